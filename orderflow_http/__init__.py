"""aiohttp adapters: the clients of the external services (and, later, the REST surface)."""

from __future__ import annotations

from orderflow_http.bulkhead import AdmissionPolicy, Bulkhead, BulkheadBusyError, Slot
from orderflow_http.clients import (
    HttpNotifications,
    HttpPayments,
    HttpService,
    HttpShipping,
    HttpWarehouse,
    parse_retry_after,
)

__all__ = [
    "AdmissionPolicy",
    "Bulkhead",
    "BulkheadBusyError",
    "HttpNotifications",
    "HttpPayments",
    "HttpService",
    "HttpShipping",
    "HttpWarehouse",
    "Slot",
    "parse_retry_after",
]

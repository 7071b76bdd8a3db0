"""orderflow's HTTP adapters, on aiohttp: the REST API with its OpenAPI document and the
operator console (`orderflow_http.api`), the clients of the warehouse, payments, shipping and
notification services with their bulkheads, the webhook sink, and the metrics and traces
(`orderflow_http.telemetry`)."""

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

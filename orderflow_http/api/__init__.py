"""The REST surface of orderflow (docs/rest-api.md): aiohttp over the core's `OrderService`."""

from __future__ import annotations

from orderflow_http.api.app import create_app
from orderflow_http.api.openapi import document as openapi_document

__all__ = ["create_app", "openapi_document"]

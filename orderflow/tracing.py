"""Exporting spans: OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set and the `otel` extra installed.

Without it the OpenTelemetry API's default provider makes no recording spans (nearly free), and
without opentelemetry-api there are no spans at all. The exporter reads the standard OTEL_*
variables itself (endpoint, headers, protocol details); the service name defaults to orderflow.
"""

from __future__ import annotations

import atexit
import logging
import os

log = logging.getLogger("orderflow.tracing")


def export_traces() -> bool:
    """Install an SDK tracer provider exporting over OTLP/HTTP; True if installed."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return False
    try:  # the optional `otel` extra: imported only when asked for
        from opentelemetry import trace  # noqa: PLC0415
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OTLP exporter is not installed "
            "(pip install 'orderflow[otel]'): spans are not exported"
        )
        return False
    name = os.environ.get("OTEL_SERVICE_NAME") or "orderflow"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)
    return True

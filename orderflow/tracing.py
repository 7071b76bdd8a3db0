"""Exporting spans: OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set and the `otel` extra installed.

Without it the OpenTelemetry API's default provider makes no recording spans, and the telemetry
then skips the spans of steps and calls altogether; without opentelemetry-api there are no spans
at all. The exporter reads the standard OTEL_* variables itself (endpoint, headers, protocol
details); the service name defaults to orderflow.

Spans are handed to the SDK's BatchSpanProcessor (never the simple one, which would export on
the event loop's thread, one request per span): its standard variables keep their defaults —
OTEL_BSP_SCHEDULE_DELAY 5000 ms, OTEL_BSP_MAX_QUEUE_SIZE 2048 (spans beyond it are dropped, not
waited for), OTEL_BSP_MAX_EXPORT_BATCH_SIZE 512. The sampler is the standard one chosen by
OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG; unset, orderflow samples 10 % of the traces that
start here (`parentbased_traceidratio`, 0.1), see `DEFAULT_SAMPLE_RATIO`.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any

log = logging.getLogger("orderflow.tracing")

# Share of the traces started here that are recorded when OTEL_TRACES_SAMPLER is unset (a
# request whose caller sampled it is recorded whatever the ratio: parent based). Measured with
# `python -m bench.telemetry`: recording every span (two per step attempt: made by the SDK,
# encoded by the OTLP exporter's thread) costs the worker about a third more CPU per order, this
# tenth about a tenth more (most of it the SDK making the dropped spans), metrics alone ~1 %.
DEFAULT_SAMPLE_RATIO = 0.1


def tracer_provider() -> Any:
    """An SDK tracer provider batch-exporting over OTLP/HTTP as the OTEL_* variables say, or
    None when no endpoint is set or the `otel` extra is missing. Not installed globally."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return None
    try:  # the optional `otel` extra: imported only when asked for
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
        from opentelemetry.sdk.trace.sampling import (  # noqa: PLC0415
            ParentBased,
            TraceIdRatioBased,
        )
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OTLP exporter is not installed "
            "(pip install 'orderflow[otel]'): spans are not exported"
        )
        return None
    name = os.environ.get("OTEL_SERVICE_NAME") or "orderflow"
    sampler = None  # the SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
    if not os.environ.get("OTEL_TRACES_SAMPLER"):
        sampler = ParentBased(TraceIdRatioBased(DEFAULT_SAMPLE_RATIO))
    provider = TracerProvider(resource=Resource.create({"service.name": name}), sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def export_traces() -> bool:
    """Install `tracer_provider()` as the process's provider; True if installed."""
    provider = tracer_provider()
    if provider is None:
        return False
    from opentelemetry import trace  # noqa: PLC0415 - present whenever a provider was made

    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)
    return True

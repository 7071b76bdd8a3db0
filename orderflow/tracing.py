"""Exporting spans: OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set and the `otel` extra installed.

Without it the OpenTelemetry API's default provider makes no recording spans, and the telemetry
then skips the spans of steps and calls altogether; without opentelemetry-api there are no spans
at all. The exporter reads the standard OTEL_* variables itself (endpoint, headers, protocol
details); the service name defaults to orderflow.

Spans are handed to the SDK's BatchSpanProcessor (never the simple one, which would export on
the event loop's thread, one request per span): its standard variables keep their defaults —
OTEL_BSP_SCHEDULE_DELAY 5000 ms, OTEL_BSP_MAX_QUEUE_SIZE 2048 (spans beyond it are dropped, not
waited for), OTEL_BSP_MAX_EXPORT_BATCH_SIZE 512. The sampler is the standard one chosen by
OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG; with OTEL_TRACES_SAMPLER unset, orderflow's own:
parent based, and a root span follows the trace it is linked to (a step attempt is recorded
exactly when the request that created its order was), other roots sampled at
OTEL_TRACES_SAMPLER_ARG or `DEFAULT_SAMPLE_RATIO` — so whole orders are traced, not fragments.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any

log = logging.getLogger("orderflow.tracing")

# Share of the traces started here that are recorded when neither OTEL_TRACES_SAMPLER nor
# OTEL_TRACES_SAMPLER_ARG is set (a request whose caller sampled it is recorded whatever the
# ratio: parent based; and the steps of an order follow the request that created it, so this is
# the share of orders traced whole). Measured with `python -m bench.telemetry` (README, "Traces"):
# a recorded order costs the worker ~3 ms of CPU (its spans made by the SDK, encoded and posted
# by the OTLP exporter's thread), so a tenth costs ~7 % of its CPU, every order about a third;
# one in a hundred keeps tracing inside the 5 % budget and is still 1-2 whole orders a second.
DEFAULT_SAMPLE_RATIO = 0.01


def follow_links_sampler(root: Any) -> Any:
    """A sampler for root spans: one linked to a valid span context is recorded exactly when
    that context was sampled (a step attempt follows the `POST /orders` that created its order,
    whose trace context the order keeps); any other root is left to `root`."""
    from opentelemetry.sdk.trace.sampling import (  # noqa: PLC0415 - the `otel` extra
        Decision,
        Sampler,
        SamplingResult,
    )

    from orderflow_http.telemetry import FOLLOW_LINKS  # noqa: PLC0415 - the name it checks for

    class FollowLinks(Sampler):
        def should_sample(  # the SDK's signature
            self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
            attributes: Any = None, links: Any = None, trace_state: Any = None,
        ) -> Any:  # fmt: skip
            for link in links or ():
                linked = link.context
                if linked.is_valid:
                    if linked.trace_flags.sampled:
                        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
                    return SamplingResult(Decision.DROP)
            return root.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )

        def get_description(self) -> str:
            return f"{FOLLOW_LINKS}{{{root.get_description()}}}"

    return FollowLinks()


def default_sampler(ratio: float) -> Any:
    """orderflow's sampler: parent based, roots following the trace they link, others at
    `ratio` (what `tracer_provider` installs when OTEL_TRACES_SAMPLER is unset)."""
    from opentelemetry.sdk.trace.sampling import (  # noqa: PLC0415 - the `otel` extra
        ParentBased,
        TraceIdRatioBased,
    )

    return ParentBased(follow_links_sampler(TraceIdRatioBased(ratio)))


def sample_ratio() -> float:
    """OTEL_TRACES_SAMPLER_ARG as a ratio in [0, 1], or `DEFAULT_SAMPLE_RATIO` (with a warning
    when it is set but is not one)."""
    text = os.environ.get("OTEL_TRACES_SAMPLER_ARG")
    if text is None or not text.strip():
        return DEFAULT_SAMPLE_RATIO
    try:
        ratio = float(text)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        log.warning(
            "OTEL_TRACES_SAMPLER_ARG=%r is not a ratio between 0 and 1: sampling %s",
            text, DEFAULT_SAMPLE_RATIO,
        )  # fmt: skip
        return DEFAULT_SAMPLE_RATIO
    return ratio


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
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OTLP exporter is not installed "
            "(pip install 'durable-orderflow[otel]'): spans are not exported"
        )
        return None
    name = os.environ.get("OTEL_SERVICE_NAME") or "orderflow"
    sampler = None  # the SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
    if not os.environ.get("OTEL_TRACES_SAMPLER"):
        sampler = default_sampler(sample_ratio())
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

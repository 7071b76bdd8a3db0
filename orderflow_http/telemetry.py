"""Metrics (prometheus-client) and traces (OpenTelemetry API): the adapter of the observer port.

Why one object: a process (API, worker, or both in `serve`) has one `Telemetry`; the executor
and the relay report to it through `orderflow_core.observe.Observer`, the HTTP clients and the
API's middleware call it directly. Its metrics live in its own registry (so several servers in
one test process do not collide), served as `GET /metrics`.

Both libraries are optional: without prometheus-client there are no metrics (and no /metrics),
without opentelemetry-api no spans and no `traceparent` header; everything else runs the same.
Gauges that need the database (outbox age, orders waiting by reason) are read by `refresh()`
when /metrics is scraped, at most every `probe_ttl_s` seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

from orderflow_core import logfields
from orderflow_core.model import Claim
from orderflow_core.observe import AttemptObservation, ProbeReading
from orderflow_core.ports import CallContext
from orderflow_http.bulkhead import Bulkhead

try:
    import prometheus_client as prom
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError:  # pragma: no cover - the `metrics` extra is not installed
    prom = None  # type: ignore[assignment]
    Collector = object  # type: ignore[assignment,misc]

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - opentelemetry-api is not installed
    trace = None  # type: ignore[assignment]

log = logging.getLogger("orderflow.metrics")
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128)


Probe = Callable[[], Awaitable[ProbeReading]]


class _Observation:
    """An attempt or a call in progress: its outcome, once told."""

    __slots__ = ("outcome",)

    def __init__(self) -> None:
        self.outcome: str | None = None

    def finished(self, outcome: str) -> None:
        self.outcome = outcome


class _Gauges(Collector):
    """Gauges read when scraped: bulkheads, the pool, and the last probe reading."""

    def __init__(self, owner: Telemetry) -> None:
        self._owner = owner

    def collect(self) -> Iterable[Any]:
        o = self._owner
        in_flight = GaugeMetricFamily(
            "orderflow_bulkhead_in_flight", "Calls holding a bulkhead slot", labels=["service"]
        )
        queued = GaugeMetricFamily(
            "orderflow_bulkhead_queued", "Calls waiting for a bulkhead slot", labels=["service"]
        )
        for service, bulkhead in o.bulkheads.items():
            in_flight.add_metric([service], bulkhead.in_flight)
            queued.add_metric([service], bulkhead.waiting)
        yield in_flight
        yield queued
        if o.pool_stats is not None:
            stats = o.pool_stats()
            in_use = stats.get("pool_size", 0) - stats.get("pool_available", 0)
            yield GaugeMetricFamily(
                "orderflow_pool_connections_in_use",
                "Database connections lent out by the pool",
                value=in_use,
            )
            yield GaugeMetricFamily(
                "orderflow_pool_connections_max",
                "The pool's largest size",
                value=stats.get("pool_max", 0),
            )
        reading = o.last_reading
        if reading is not None:
            yield GaugeMetricFamily(
                "orderflow_outbox_oldest_unpublished_age_seconds",
                "Age of the oldest outbox event not yet published (0: none waiting)",
                value=reading.oldest_unpublished_age_s,
            )
            waiting = GaugeMetricFamily(
                "orderflow_orders_waiting", "Orders waiting for a person", labels=["reason"]
            )
            for reason, count in sorted(reading.waiting_by_reason.items()):
                waiting.add_metric([reason], count)
            yield waiting


class Telemetry:
    """The process's metrics and tracer; satisfies `orderflow_core.observe.Observer`."""

    def __init__(
        self,
        *,
        metrics: bool = True,
        tracing: bool = True,
        tracer_provider: Any = None,
        probe: Probe | None = None,
        probe_ttl_s: float = 5.0,
        pool_stats: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.bulkheads: dict[str, Bulkhead] = {}
        self.pool_stats = pool_stats
        self.probe = probe
        self.probe_ttl_s = probe_ttl_s
        self.last_reading: ProbeReading | None = None
        self._read_at = float("-inf")
        self.tracer: Any = None
        if tracing and trace is not None:
            self.tracer = trace.get_tracer("orderflow", tracer_provider=tracer_provider)
            self._propagator = TraceContextTextMapPropagator()
        self.registry: Any = None
        if metrics and prom is not None:
            self._make_metrics()

    @property
    def serves_metrics(self) -> bool:
        return self.registry is not None

    def _make_metrics(self) -> None:
        r = self.registry = prom.CollectorRegistry()
        self.api_requests = prom.Counter(
            "orderflow_api_requests",
            "API requests answered",
            ["route", "method", "status"],
            registry=r,
        )
        self.api_duration = prom.Histogram(
            "orderflow_api_request_duration_seconds",
            "API request latency",
            ["route", "method"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.attempts = prom.Counter(
            "orderflow_step_attempts", "Step attempts run", ["kind", "outcome"], registry=r
        )
        self.step_duration = prom.Histogram(
            "orderflow_step_duration_seconds",
            "Step attempt duration (call and result commit)",
            ["kind"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.calls = prom.Counter(
            "orderflow_external_calls",
            "Calls to the external services",
            ["service", "operation", "outcome"],
            registry=r,
        )
        self.call_duration = prom.Histogram(
            "orderflow_external_call_duration_seconds",
            "External call latency",
            ["service", "operation"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.takeovers = prom.Counter(
            "orderflow_lease_takeovers",
            "Steps taken over after a lease ran out",
            ["kind"],
            registry=r,
        )
        self.stale = prom.Counter(
            "orderflow_stale_results_rejected",
            "Results not committed: the attempt no longer owned the step",
            ["kind"],
            registry=r,
        )
        self.claims = prom.Counter("orderflow_claims", "Claim statements run", registry=r)
        self.claim_batch = prom.Histogram(
            "orderflow_claim_batch_size",
            "Steps leased per claim",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.commit_batch_size = prom.Histogram(
            "orderflow_commit_batch_size",
            "Orders committed per group-commit transaction",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.published = prom.Counter(
            "orderflow_outbox_events_published", "Outbox events published", registry=r
        )
        self.rejected = prom.Counter(
            "orderflow_bulkhead_rejected",
            "Calls refused by a full bulkhead (policy reject)",
            ["service"],
            registry=r,
        )
        r.register(_Gauges(self))

    # -- scrape ------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Read the probe if its last reading is older than `probe_ttl_s`."""
        if self.probe is None or time.monotonic() - self._read_at < self.probe_ttl_s:
            return
        self._read_at = time.monotonic()
        try:
            self.last_reading = await self.probe()
        except Exception as exc:  # the database is down: serve the rest, gauges as last read
            log.warning("metrics: reading the database gauges failed: %s", exc)

    async def exposition(self) -> bytes:
        """The Prometheus text format of every metric (after a probe refresh if due)."""
        await self.refresh()
        return bytes(prom.generate_latest(self.registry))

    # -- the observer port -------------------------------------------------------------------

    def claimed(self, count: int) -> None:
        if self.registry is not None:
            self.claims.inc()
            self.claim_batch.observe(count)

    def lease_taken_over(self, claim: Claim) -> None:
        if self.registry is not None:
            self.takeovers.labels(claim.kind.value).inc()

    def stale_result_rejected(self, claim: Claim) -> None:
        if self.registry is not None:
            self.stale.labels(claim.kind.value).inc()

    def commit_batch(self, size: int) -> None:
        if self.registry is not None:
            self.commit_batch_size.observe(size)

    def events_published(self, count: int) -> None:
        if self.registry is not None:
            self.published.inc(count)

    @contextmanager
    def step_attempt(
        self, claim: Claim, worker: str, trace_parent: str | None
    ) -> Iterator[AttemptObservation]:
        observed = _Observation()
        started = time.perf_counter()
        span = None
        if self.tracer is not None:
            links = []
            if trace_parent:
                linked = trace.get_current_span(
                    self._propagator.extract({"traceparent": trace_parent})
                ).get_span_context()
                if linked.is_valid:
                    links.append(trace.Link(linked))
            span = self.tracer.start_span(
                f"step {claim.kind.value}",
                context=otel_context.Context(),  # a root: the creating request is a link
                links=links,
                attributes={
                    "order_id": str(claim.order_id),
                    "step_id": str(claim.step_id),
                    "attempt": claim.attempt,
                    "worker": worker,
                    "step.kind": claim.kind.value,
                },
            )
        try:
            if span is None:
                yield observed
            else:
                with trace.use_span(span, end_on_exit=False):
                    yield observed
        finally:
            outcome = observed.outcome or "lost"
            if span is not None:
                span.set_attribute("outcome", outcome)
                span.end()
            if self.registry is not None:
                self.attempts.labels(claim.kind.value, outcome).inc()
                self.step_duration.labels(claim.kind.value).observe(time.perf_counter() - started)

    # -- adapters' own reports ---------------------------------------------------------------

    @contextmanager
    def external_call(
        self, service: str, operation: str, call: CallContext
    ) -> Iterator[_Observation]:
        """Around one physical call: its span (current inside, so `inject` names it), count
        and latency. Tell the observation the outcome name."""
        observed = _Observation()
        started = time.perf_counter()
        span = None
        if self.tracer is not None:
            attributes: dict[str, str | int] = {
                "order_id": str(call.order_id),
                "step_id": str(call.step_id),
                "service": service,
                "operation": operation,
            }
            bound = logfields.current()
            for name in ("attempt", "worker"):
                if name in bound:
                    attributes[name] = bound[name]
            span = self.tracer.start_span(
                f"{service} {operation}", kind=trace.SpanKind.CLIENT, attributes=attributes
            )
        try:
            if span is None:
                yield observed
            else:
                with trace.use_span(span, end_on_exit=False):
                    yield observed
        finally:
            outcome = observed.outcome or "error"
            if span is not None:
                span.set_attribute("outcome", outcome)
                span.end()
            if self.registry is not None:
                self.calls.labels(service, operation, outcome).inc()
                self.call_duration.labels(service, operation).observe(time.perf_counter() - started)

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Add the W3C `traceparent` of the current span to outgoing headers."""
        if self.tracer is not None:
            self._propagator.inject(headers)

    def watch_bulkhead(self, service: str, bulkhead: Bulkhead) -> None:
        self.bulkheads[service] = bulkhead

    def bulkhead_rejected(self, service: str) -> None:
        if self.registry is not None:
            self.rejected.labels(service).inc()

    @contextmanager
    def api_request(
        self, method: str, route: str, headers: Mapping[str, str]
    ) -> Iterator[_Observation]:
        """Around one API request: a server span continuing the caller's trace, whose
        `traceparent` the core may keep (`observe.request_trace_parent`); tell it the status."""
        observed = _Observation()
        started = time.perf_counter()
        span = None
        if self.tracer is not None:
            parent = self._propagator.extract(headers)
            span = self.tracer.start_span(
                f"{method} {route}",
                context=parent,
                kind=trace.SpanKind.SERVER,
                attributes={"http.request.method": method, "http.route": route},
            )
        try:
            if span is None:
                yield observed
            else:
                with trace.use_span(span, end_on_exit=False):
                    yield observed
        finally:
            status = observed.outcome or "500"
            if span is not None:
                span.set_attribute("http.response.status_code", int(status))
                span.end()
            if self.registry is not None:
                self.api_requests.labels(route, method, status).inc()
                self.api_duration.labels(route, method).observe(time.perf_counter() - started)

    def current_trace_parent(self) -> str | None:
        """The `traceparent` of the current span, if one is recording."""
        if self.tracer is None:
            return None
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        return carrier.get("traceparent")

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
import random
import re
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from contextlib import AbstractContextManager
from itertools import accumulate
from typing import Any

from orderflow_core.model import Claim
from orderflow_core.observe import AttemptObservation, ProbeReading
from orderflow_core.ports import CallContext
from orderflow_http.bulkhead import Bulkhead

try:
    import prometheus_client as prom
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.registry import Collector
    from prometheus_client.utils import floatToGoString
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
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128)


Probe = Callable[[], Awaitable[ProbeReading]]


class _Labelled:
    """A labelled metric with its bound children kept per label tuple: `.labels()` validates
    and locks on every call, a dict lookup does not."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *labels: str) -> Any:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = self._metric.labels(*labels)
        return child


class _CountAndTime(Collector):
    """A counter labelled (*labels, outcome) and a latency histogram labelled labels, kept as
    plain numbers and turned into Prometheus samples when scraped: the hot path does two dict
    lookups and a bisect, no lock and no child object (every caller runs on the event loop's
    thread, and so does the scrape). Exposed exactly as prometheus-client's own would be."""

    def __init__(self, counter: tuple[str, str], histogram: tuple[str, str],
                 labels: tuple[str, ...], outcome: str) -> None:  # fmt: skip
        self._counter, self._histogram = counter, histogram
        self._labels, self._outcome = labels, outcome
        self._bounds = DURATION_BUCKETS
        # the `le` labels as prometheus-client writes them (its helper is untyped)
        self._les = [*(floatToGoString(b) for b in DURATION_BUCKETS), "+Inf"]  # type: ignore[no-untyped-call]
        self.counts: dict[tuple[str, str, str], int] = {}
        # per label pair: [sum, then one count per bucket (its own, not cumulative), +Inf last]
        self.times: dict[tuple[str, str], list[float]] = {}

    def record(self, first: str, second: str, outcome: str, seconds: float) -> None:
        key = (first, second, outcome)
        self.counts[key] = self.counts.get(key, 0) + 1
        pair = (first, second)
        timed = self.times.get(pair)
        if timed is None:
            timed = self.times[pair] = [0.0] * (len(self._bounds) + 2)
        timed[0] += seconds
        timed[1 + bisect_left(self._bounds, seconds)] += 1  # the first bound >= seconds

    def collect(self) -> Iterable[Any]:
        width = len(self._labels)  # 1: the second label is unused
        counter = CounterMetricFamily(*self._counter, labels=[*self._labels, self._outcome])
        for (first, second, outcome), count in self.counts.items():
            counter.add_metric([*[first, second][:width], outcome], count)
        yield counter
        histogram = HistogramMetricFamily(*self._histogram, labels=list(self._labels))
        for (first, second), timed in self.times.items():
            cumulative = list(accumulate(timed[1:]))
            histogram.add_metric(
                [first, second][:width],
                buckets=list(zip(self._les, cumulative, strict=True)),
                sum_value=timed[0],
            )
        yield histogram


# The hot path's count-and-latency pairs: attribute, counter (name, help), histogram (name,
# help), the histogram's labels, the label the counter adds.
# fmt: off
_TIMED: tuple[tuple[str, tuple[str, str], tuple[str, str], tuple[str, ...], str], ...] = (
    ("requests", ("orderflow_api_requests", "API requests answered"),
     ("orderflow_api_request_duration_seconds", "API request latency"),
     ("route", "method"), "status"),
    ("attempts", ("orderflow_step_attempts", "Step attempts run"),
     ("orderflow_step_duration_seconds", "Step attempt duration (call and result commit)"),
     ("kind",), "outcome"),
    ("calls", ("orderflow_external_calls", "Calls to the external services"),
     ("orderflow_external_call_duration_seconds", "External call latency"),
     ("service", "operation"), "outcome"),
)
# The other metrics: attribute, type, name, help, labels, histogram buckets.
_COUNTER, _HISTOGRAM = "counter", "histogram"
_METRICS: tuple[tuple[str, str, str, str, tuple[str, ...], tuple[float, ...]], ...] = (
    ("takeovers", _COUNTER, "orderflow_lease_takeovers",
     "Steps taken over after a lease ran out", ("kind",), ()),
    ("stale", _COUNTER, "orderflow_stale_results_rejected",
     "Results not committed: the attempt no longer owned the step", ("kind",), ()),
    ("claims", _COUNTER, "orderflow_claims", "Claim statements run", (), ()),
    ("claim_batch", _HISTOGRAM, "orderflow_claim_batch_size", "Steps leased per claim", (),
     BATCH_BUCKETS),
    ("commit_batch_size", _HISTOGRAM, "orderflow_commit_batch_size",
     "Orders committed per group-commit transaction", (), BATCH_BUCKETS),
    ("published", _COUNTER, "orderflow_outbox_events_published", "Outbox events published",
     (), ()),
    ("rejected", _COUNTER, "orderflow_bulkhead_rejected",
     "Calls refused by a full bulkhead (policy reject)", ("service",), ()),
)
# fmt: on


class _Observed:
    """One API request, step attempt or external call in progress: its span (current while
    inside, so a child span or `inject` sees it), its start, and its outcome once told.

    One clock read at each end serves both the span and the latency histogram; a plain class
    rather than a generator keeps the enter/exit cheap on the hot path."""

    __slots__ = ("_done", "_span", "_started", "_token", "first", "outcome", "second")

    def __init__(
        self,
        span: Any,
        started: int,
        done: Callable[[_Observed, int], None],
        first: str,
        second: str = "",
    ) -> None:
        self.outcome: str | None = None
        self._span = span
        self._started = started
        self._done = done  # a bound method made once: nothing allocated per observation
        self._token: Any = None
        self.first = first  # the labels it is counted under (kind; service, operation; ...)
        self.second = second

    def finished(self, outcome: str) -> None:
        self.outcome = outcome

    def __enter__(self) -> _Observed:
        if self._span is not None:
            self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        ended = time.time_ns()
        span = self._span
        if span is not None:
            otel_context.detach(self._token)
            if isinstance(exc, Exception) and span.is_recording():
                span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
        self._done(self, ended)


class _Gauges(Collector):
    """Read when scraped: bulkheads, the pool, the statements sent, the last probe reading."""

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
        if o.statements is not None:
            sent = CounterMetricFamily(
                "orderflow_db_statements",
                "Statements sent to PostgreSQL, by name (BEGIN and COMMIT not counted)",
                labels=["statement"],
            )
            for name, count in sorted(o.statements().items()):
                sent.add_metric([name], count)
            yield sent
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

    # Set from `_TIMED` and `_METRICS` when metrics are on: labelled ones bound per label tuple.
    requests: _CountAndTime
    attempts: _CountAndTime
    calls: _CountAndTime
    takeovers: _Labelled
    stale: _Labelled
    rejected: _Labelled
    claims: Any
    claim_batch: Any
    commit_batch_size: Any
    published: Any

    def __init__(
        self,
        *,
        metrics: bool = True,
        tracing: bool = True,
        tracer_provider: Any = None,
        probe: Probe | None = None,
        probe_ttl_s: float = 5.0,
        pool_stats: Callable[[], Mapping[str, int]] | None = None,
        statements: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.bulkheads: dict[str, Bulkhead] = {}
        self.pool_stats = pool_stats
        self.statements = statements
        self.probe = probe
        self.probe_ttl_s = probe_ttl_s
        self.last_reading: ProbeReading | None = None
        self._read_at = float("-inf")
        self.tracer: Any = None
        # Spans of steps and calls only with an SDK provider (given, or installed globally
        # before this is made, as the CLI does): without one they could record nothing, so
        # the worker's path skips them; API requests still pass a caller's trace through.
        self._spans = False
        self._follows_links = False
        self.tracer_provider: Any = None
        if tracing and trace is not None:
            self.tracer = trace.get_tracer("orderflow", tracer_provider=tracer_provider)
            self._propagator = TraceContextTextMapPropagator()
            provider = self.tracer_provider = tracer_provider or trace.get_tracer_provider()
            self._spans = not isinstance(
                provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider
            )
            # orderflow's default sampler (`orderflow.tracing`) drops a root linked to a trace
            # not sampled: such a step attempt's span is made here directly, not by the SDK.
            sampler = getattr(provider, "sampler", None)
            self._follows_links = sampler is not None and sampler.get_description().startswith(
                FOLLOW_LINKS_DESCRIPTION
            )
        self._step_names: dict[str, str] = {}
        self._call_names: dict[tuple[str, str], str] = {}
        self._request_names: dict[tuple[str, str], str] = {}
        self.registry: Any = None
        if metrics and prom is not None:
            self._make_metrics()

    @property
    def serves_metrics(self) -> bool:
        return self.registry is not None

    def _make_metrics(self) -> None:
        r = self.registry = prom.CollectorRegistry()
        for attribute, counter, histogram, labels, outcome in _TIMED:
            timed = _CountAndTime(counter, histogram, labels, outcome)
            setattr(self, attribute, timed)
            r.register(timed)
        for attribute, kind, name, documentation, labels, buckets in _METRICS:
            metric: Any
            if kind == _COUNTER:
                metric = prom.Counter(name, documentation, labels, registry=r)
            else:
                metric = prom.Histogram(name, documentation, labels, buckets=buckets, registry=r)
            setattr(self, attribute, _Labelled(metric) if labels else metric)
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
            self.takeovers(claim.kind.value).inc()

    def stale_result_rejected(self, claim: Claim) -> None:
        if self.registry is not None:
            self.stale(claim.kind.value).inc()

    def commit_batch(self, size: int) -> None:
        if self.registry is not None:
            self.commit_batch_size.observe(size)

    def events_published(self, count: int) -> None:
        if self.registry is not None:
            self.published.inc(count)

    def step_attempt(
        self, claim: Claim, worker: str, trace_parent: str | None
    ) -> AbstractContextManager[AttemptObservation]:
        """A root span per attempt (linked to the creating request's trace): the step kind in
        its name, `order_id`, `step_id`, `attempt`, `worker` and at the end `outcome`."""
        kind = claim.kind.value
        started = time.time_ns()
        span = None
        if self._spans:
            linked = _span_context(trace_parent) if trace_parent else None
            if linked is not None and self._follows_links and not linked.trace_flags.sampled:
                span = _dropped_root()  # what the SDK would make, a quarter of its cost
            else:
                span = self.tracer.start_span(
                    _name(self._step_names, kind, "step ", kind),
                    context=_ROOT,  # a root: the creating request is a link (samplers see it)
                    links=(trace.Link(linked),) if linked is not None else (),
                    start_time=started,
                )
            if span.is_recording():  # attributes only for a sampled span
                span.set_attributes(
                    {
                        "order_id": str(claim.order_id),
                        "step_id": str(claim.step_id),
                        "attempt": claim.attempt,
                        "worker": worker,
                    }
                )
        if span is None and self.registry is None:
            return _UNOBSERVED  # nothing to count or trace: nothing allocated
        return _Observed(span, started, self._attempt_done, kind)

    def _attempt_done(self, observed: _Observed, ended: int) -> None:
        outcome = observed.outcome or "lost"
        _end(observed, ended, "outcome", outcome)
        if self.registry is not None:
            self.attempts.record(observed.first, "", outcome, _seconds(observed, ended))

    # -- adapters' own reports ---------------------------------------------------------------

    def external_call(
        self, service: str, operation: str, call: CallContext
    ) -> AbstractContextManager[AttemptObservation]:
        """Around one physical call: its client span (current inside, so `inject` names it; a
        child of the step attempt's span, which carries the step, attempt and worker), count
        and latency. Tell the observation the outcome name."""
        started = time.time_ns()
        span = None
        # Under a span not sampled, the call's would not be either (parent based; a ratio
        # sampler decides the same for the same trace): skip it, `inject` still sends the
        # step's (unsampled) trace.
        if self._spans and trace.get_current_span().is_recording():
            span = self.tracer.start_span(
                _name(self._call_names, (service, operation), service, " ", operation),
                kind=trace.SpanKind.CLIENT,
                start_time=started,
            )
            if span.is_recording():
                span.set_attribute("order_id", str(call.order_id))
        if span is None and self.registry is None:
            return _UNOBSERVED
        return _Observed(span, started, self._call_done, service, operation)

    def _call_done(self, observed: _Observed, ended: int) -> None:
        outcome = observed.outcome or "error"
        _end(observed, ended, "outcome", outcome)
        if self.registry is not None:
            seconds = _seconds(observed, ended)
            self.calls.record(observed.first, observed.second, outcome, seconds)

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Add the W3C `traceparent` (and `tracestate`) of the current span to outgoing headers;
        nothing when no span is current (the propagator's own checks, done once here)."""
        if self.tracer is not None:
            _inject(trace.get_current_span().get_span_context(), headers)

    def watch_bulkhead(self, service: str, bulkhead: Bulkhead) -> None:
        self.bulkheads[service] = bulkhead

    def bulkhead_rejected(self, service: str) -> None:
        if self.registry is not None:
            self.rejected(service).inc()

    def api_request(
        self, method: str, route: str, headers: Mapping[str, str]
    ) -> AbstractContextManager[_Observed]:
        """Around one API request: a server span continuing the caller's trace, whose
        `traceparent` the core may keep (`observe.request_trace_parent`); tell it the status."""
        started = time.time_ns()
        span = None
        if self.tracer is not None:  # even without an SDK: the caller's trace passes through
            span = self.tracer.start_span(
                _name(self._request_names, (method, route), method, " ", route),
                context=self._propagator.extract(headers),
                kind=trace.SpanKind.SERVER,
                start_time=started,
            )
            if span.is_recording():
                span.set_attributes({"http.request.method": method, "http.route": route})
        return _Observed(span, started, self._request_done, route, method)

    def _request_done(self, observed: _Observed, ended: int) -> None:
        status = observed.outcome or "500"
        _end(observed, ended, "http.response.status_code", int(status))
        if self.registry is not None:
            seconds = _seconds(observed, ended)
            self.requests.record(observed.first, observed.second, status, seconds)

    def current_trace_parent(self) -> str | None:
        """The `traceparent` of the current span, if one is recording."""
        if self.tracer is None:
            return None
        carrier: dict[str, str] = {}
        _inject(trace.get_current_span().get_span_context(), carrier)
        return carrier.get("traceparent")


_ROOT: Any = otel_context.Context() if trace is not None else None
_NOT_SAMPLED: Any = trace.TraceFlags(trace.TraceFlags.DEFAULT) if trace is not None else None
_random_bits = random.getrandbits  # as the SDK's RandomIdGenerator makes ids
# The name of `orderflow.tracing`'s link-following sampler, and how the description of its
# default sampler (ParentBased around it) begins.
FOLLOW_LINKS = "FollowLinks"
FOLLOW_LINKS_DESCRIPTION = f"ParentBased{{root:{FOLLOW_LINKS}{{"


def _dropped_root() -> Any:
    """The span of a root the sampler dropped: a fresh trace, not sampled, not recording (the
    services still receive its `traceparent`)."""
    ids = trace.SpanContext(_random_bits(128) or 1, _random_bits(64) or 1, False, _NOT_SAMPLED)
    return trace.NonRecordingSpan(ids)


def _inject(context: Any, headers: MutableMapping[str, str]) -> None:
    """W3C trace context headers for a span context, as `TraceContextTextMapPropagator.inject`
    writes them (version 00), without its context lookups: nothing for an invalid context."""
    if not context.is_valid:
        return
    headers["traceparent"] = (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )
    if context.trace_state:
        headers["tracestate"] = context.trace_state.to_header()


def _span_context(traceparent: str) -> Any:
    """The remote span context a stored W3C `traceparent` names (read as the propagator reads
    it: version 00 exactly, later versions' first four fields), or None when it is malformed or
    invalid (all-zero ids, version ff)."""
    match = _TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    context = trace.SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=True,
        trace_flags=trace.TraceFlags(int(flags, 16)),
    )  # fmt: skip
    return context if context.is_valid else None


class _Unobserved:
    """The observation when metrics and spans are both off: one shared do-nothing instance."""

    def finished(self, outcome: str) -> None:
        del outcome

    def __enter__(self) -> _Unobserved:
        return self

    def __exit__(self, *exc: object) -> None:
        del exc


_UNOBSERVED = _Unobserved()


def _name(cache: dict[Any, str], key: Any, *parts: str) -> str:
    """A span name from its parts, joined once per distinct key."""
    name = cache.get(key)
    if name is None:
        name = cache[key] = "".join(parts)
    return name


def _seconds(observed: _Observed, ended: int) -> float:
    return max(0, ended - observed._started) / 1e9


def _end(observed: _Observed, ended: int, attribute: str, value: str | int) -> None:
    span = observed._span
    if span is not None:
        if span.is_recording():
            span.set_attribute(attribute, value)
        span.end(end_time=ended)

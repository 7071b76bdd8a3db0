"""Metrics (prometheus-client) and traces (OpenTelemetry API): the adapter of the observer port.

Why one object: a process (API, worker, or both in `serve`) has one `Telemetry`; the executor
and the relay report to it through `orderflow_core.observe.Observer`, the HTTP clients and the
API's middleware call it directly. Its metrics live in its own registry (so several servers in
one test process do not collide), served as `GET /metrics`.

Both libraries are optional: without prometheus-client there are no metrics (and no /metrics),
without opentelemetry-api no spans and no `traceparent` header; everything else runs the same.
Gauges that need the database (outbox age, orders waiting by reason) are read by `refresh()`
when /metrics is scraped, at most every `probe_ttl_s` seconds.

What each metric is (its name, help, labels and buckets) and the collectors behind the hot
path's are defined in `orderflow_http.metrics`; this module builds them into the registry and
holds the tracing.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import Any

from orderflow_core.model import Claim
from orderflow_core.observe import AttemptObservation, ProbeReading
from orderflow_core.ports import CallContext
from orderflow_http.bulkhead import Bulkhead
from orderflow_http.metrics import (
    _COUNTER,
    _METRICS,
    _TIMED,
    _CountAndTime,
    _Gauges,
    _Labelled,
)

try:
    import prometheus_client as prom
except ImportError:  # pragma: no cover - the `metrics` extra is not installed
    prom = None  # type: ignore[assignment]

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - opentelemetry-api is not installed
    trace = None  # type: ignore[assignment]

log = logging.getLogger("orderflow.metrics")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


Probe = Callable[[], Awaitable[ProbeReading]]


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

"""The metrics `Telemetry` serves: what each one is called, means and is labelled by
(`_TIMED`, `_METRICS`, and the gauges read when scraped, `_Gauges`), and the collectors that
keep the hot path's counts cheap (`_CountAndTime`, `_Labelled`).

`Telemetry` (`orderflow_http.telemetry`) builds them into its own registry; the metrics
reference is generated from that registry. prometheus-client is optional: without it nothing
here is used.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from itertools import accumulate
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from orderflow_http.telemetry import Telemetry

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128)


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

"""The telemetry's cost controls, with the real SDK and prometheus-client (no database): the
sampler the CLI's provider takes from OTEL_TRACES_SAMPLER (1 % of the traces by default, the
steps of an order following the request that created it),
the batch processor, what a sampled-out attempt still counts, the worker's spans skipped without
an SDK while a caller's trace still passes through, one clock read shared by a span and its
histogram, and the metric names kept by the table that makes them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import prometheus_client
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode
from prometheus_client.parser import text_string_to_metric_families

from orderflow import tracing
from orderflow_core.model import Claim
from orderflow_core.ports import CallContext
from orderflow_core.states import StepKind
from orderflow_http.metrics import DURATION_BUCKETS
from orderflow_http.telemetry import FOLLOW_LINKS_DESCRIPTION, Telemetry

CALLER = "00-abababababababababababababababab-cdcdcdcdcdcdcdcd-01"
CLAIM = Claim(uuid.uuid4(), uuid.uuid4(), StepKind.CHARGE, 2, "worker-t", datetime.now(UTC))
CALL = CallContext(CLAIM.order_id, CLAIM.step_id, "charge:key")


def _recorded(provider: TracerProvider, spans: int) -> int:
    tracer = provider.get_tracer("test")
    return sum(tracer.start_span("root").is_recording() for _ in range(spans))


def _collecting(sampler: object = None) -> tuple[Telemetry, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(tracer_provider=provider), exporter


def _sample(telemetry: Telemetry, name: str, **labels: str) -> float | None:
    found: float | None = telemetry.registry.get_sample_value(name, labels)
    return found


def test_the_cli_provider_batches_and_samples_one_in_a_hundred_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG", raising=False)
    assert tracing.tracer_provider() is None  # no endpoint: nothing exported, nothing recorded
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # never reached
    provider = tracing.tracer_provider()
    try:
        processors = provider._active_span_processor._span_processors
        assert [type(p) for p in processors] == [BatchSpanProcessor]
        # 4000 new traces at 1 %: 40 expected, far outside 15..70 only by a broken ratio.
        assert 15 <= _recorded(provider, 4000) <= 70
        # A caller that sampled its trace has the request recorded whatever the ratio.
        assert provider.sampler.get_description().startswith(
            "ParentBased{root:FollowLinks{TraceIdRatioBased{0.01}}"
        )
        assert provider.sampler.get_description().startswith(FOLLOW_LINKS_DESCRIPTION)
    finally:
        provider.shutdown()
    for sampler, argument, recorded in (
        ("always_on", None, 500),
        ("always_off", None, 0),
        ("traceidratio", "1.0", 500),
    ):
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
        if argument is not None:
            monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", argument)
        provider = tracing.tracer_provider()
        try:
            assert _recorded(provider, 500) == recorded, sampler
        finally:
            provider.shutdown()


def _linked_attempts_recorded(telemetry: Telemetry, exporter: InMemorySpanExporter,
                              flags: str | None, attempts: int) -> int:  # fmt: skip
    exporter.clear()
    for i in range(attempts):
        parent = None if flags is None else f"00-{uuid.uuid4().hex}-{i + 1:016x}-{flags}"
        with telemetry.step_attempt(CLAIM, "worker-t", parent) as attempt:
            attempt.finished("succeeded")
    return len(exporter.get_finished_spans())


def test_by_default_an_orders_steps_are_traced_exactly_when_its_creating_request_was(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # never reached
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")  # alone: the ratio of new traces
    provider = tracing.tracer_provider()
    try:
        assert "TraceIdRatioBased{0.5}" in provider.sampler.get_description()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        telemetry = Telemetry(tracer_provider=provider)
        # Whatever the ratio, an order's steps follow the sampled flag of its creating trace...
        assert _linked_attempts_recorded(telemetry, exporter, "01", 200) == 200
        assert _linked_attempts_recorded(telemetry, exporter, "00", 200) == 0
        # Such a step still sends the services a trace context of its own, not sampled.
        unsampled = f"00-{'ab' * 16}-{'cd' * 8}-00"
        sent: dict[str, str] = {}
        with telemetry.step_attempt(CLAIM, "worker-t", unsampled) as attempt:
            with telemetry.external_call("payments", "charge", CALL):
                telemetry.inject(sent)
            attempt.finished("succeeded")
        version, trace_id, span_id, flags = sent["traceparent"].split("-")
        assert (version, flags) == ("00", "00")
        assert trace_id not in ("ab" * 16, "0" * 32)
        assert span_id != "0" * 16
        # ...and a step whose order kept no (or no readable) trace context is sampled at the
        # ratio: 1000 at 50 %, outside 400..600 only by a broken ratio.
        assert 400 <= _linked_attempts_recorded(telemetry, exporter, None, 1000) <= 600
        assert 400 <= _linked_attempts_recorded(telemetry, exporter, "zz", 1000) <= 600
    finally:
        provider.shutdown()
    for bad in ("1.5", "most"):
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", bad)
        with caplog.at_level("WARNING", logger="orderflow.tracing"):
            assert tracing.sample_ratio() == tracing.DEFAULT_SAMPLE_RATIO
        assert f"OTEL_TRACES_SAMPLER_ARG={bad!r}" in caplog.text


def test_a_stored_traceparent_is_linked_only_when_it_reads_as_the_w3c_format() -> None:
    telemetry, exporter = _collecting()
    valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    for stored, linked in (
        (valid, True),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00-later", True),
        (valid + "-extra", False),  # version 00 has exactly four fields
        ("00-00000000000000000000000000000000-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", False),
        ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
        ("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", False),
        ("00-+af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01", False),
        ("", False),
    ):
        exporter.clear()
        with telemetry.step_attempt(CLAIM, "worker-t", stored) as attempt:
            attempt.finished("succeeded")
        (span,) = exporter.get_finished_spans()
        assert bool(span.links) is linked, stored
        if linked:
            assert f"{span.links[0].context.trace_id:032x}" == stored.split("-")[1]
            assert span.links[0].context.is_remote


def test_a_sampled_out_attempt_exports_nothing_but_is_counted_and_still_propagates() -> None:
    telemetry, exporter = _collecting(ALWAYS_OFF)
    headers: dict[str, str] = {}
    with telemetry.step_attempt(CLAIM, "worker-t", CALLER) as attempt:
        with telemetry.external_call("payments", "charge", CALL) as call:
            telemetry.inject(headers)
            call.finished("succeeded")
        attempt.finished("succeeded")
    assert exporter.get_finished_spans() == ()
    assert _sample(telemetry, "orderflow_step_attempts_total", kind="charge", outcome="succeeded")
    assert _sample(telemetry, "orderflow_step_duration_seconds_count", kind="charge") == 1
    assert (
        _sample(
            telemetry,
            "orderflow_external_calls_total",
            service="payments",
            operation="charge",
            outcome="succeeded",
        )
        == 1
    )
    # The services still learn the trace, flagged as not sampled.
    assert int(headers["traceparent"].rsplit("-", 1)[1], 16) & 1 == 0  # the sampled bit


def test_without_an_sdk_the_worker_makes_no_spans_but_a_callers_trace_passes_through() -> None:
    telemetry = Telemetry(metrics=False)  # the API's default provider: nothing would record
    alone: dict[str, str] = {}
    with telemetry.step_attempt(CLAIM, "worker-t", CALLER) as attempt:
        with telemetry.external_call("payments", "charge", CALL):
            telemetry.inject(alone)
        attempt.finished("succeeded")
    assert alone == {}  # no span was made, so no trace to send
    passed: dict[str, str] = {}
    with telemetry.api_request(
        "POST", "/api/v1/orders/{order_id}/reconcile", {"traceparent": CALLER}
    ) as seen:
        kept = telemetry.current_trace_parent()
        with telemetry.external_call("payments", "status", CALL):
            telemetry.inject(passed)
        seen.finished("200")
    assert kept == CALLER
    assert passed == {"traceparent": CALLER}


def test_a_failing_attempt_marks_its_span_and_its_duration_is_the_spans() -> None:
    telemetry, exporter = _collecting()
    with pytest.raises(RuntimeError), telemetry.step_attempt(CLAIM, "worker-t", None):
        raise RuntimeError("lease lost")
    [span] = exporter.get_finished_spans()
    assert span.name == "step charge"
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]
    assert dict(span.attributes or {}) == {
        "order_id": str(CLAIM.order_id),
        "step_id": str(CLAIM.step_id),
        "attempt": 2,
        "worker": "worker-t",
        "outcome": "lost",
    }
    assert _sample(telemetry, "orderflow_step_attempts_total", kind="charge", outcome="lost") == 1
    assert span.start_time is not None
    assert span.end_time is not None
    # One clock read at each end serves the span and the histogram.
    assert _sample(telemetry, "orderflow_step_duration_seconds_sum", kind="charge") == (
        (span.end_time - span.start_time) / 1e9
    )


def test_every_metric_keeps_its_name_and_labels() -> None:
    telemetry = Telemetry(tracing=False)
    with telemetry.api_request("GET", "/api/v1/orders", {}) as seen:
        seen.finished("200")
    with telemetry.step_attempt(CLAIM, "worker-t", None) as attempt:
        with telemetry.external_call("payments", "charge", CALL) as call:
            call.finished("succeeded")
        attempt.finished("succeeded")
    for _ in range(2):  # the second time through the cached children
        telemetry.lease_taken_over(CLAIM)
        telemetry.stale_result_rejected(CLAIM)
        telemetry.bulkhead_rejected("payments")
    telemetry.claimed(3)
    telemetry.commit_batch(2)
    telemetry.events_published(4)
    served = prometheus_client.generate_latest(telemetry.registry).decode()
    families = {
        family.name: {tuple(sorted(s.labels)) for s in family.samples}
        for family in text_string_to_metric_families(served)
        if not family.name.endswith("_created")  # the client's own timestamps
    }
    assert families == {
        "orderflow_api_requests": {("method", "route", "status")},
        "orderflow_api_request_duration_seconds": {("le", "method", "route"), ("method", "route")},
        "orderflow_step_attempts": {("kind", "outcome")},
        "orderflow_step_duration_seconds": {("kind", "le"), ("kind",)},
        "orderflow_external_calls": {("operation", "outcome", "service")},
        "orderflow_external_call_duration_seconds": {
            ("le", "operation", "service"),
            ("operation", "service"),
        },
        "orderflow_lease_takeovers": {("kind",)},
        "orderflow_stale_results_rejected": {("kind",)},
        "orderflow_claims": {()},
        "orderflow_claim_batch_size": {("le",), ()},
        "orderflow_commit_batch_size": {("le",), ()},
        "orderflow_outbox_events_published": {()},
        "orderflow_bulkhead_rejected": {("service",)},
        "orderflow_bulkhead_in_flight": set(),
        "orderflow_bulkhead_queued": set(),
    }
    assert _sample(telemetry, "orderflow_lease_takeovers_total", kind="charge") == 2
    assert _sample(telemetry, "orderflow_bulkhead_rejected_total", service="payments") == 2
    assert _sample(telemetry, "orderflow_outbox_events_published_total") == 4


def test_the_step_latency_histogram_reads_as_prometheus_clients_own() -> None:
    telemetry = Telemetry(tracing=False)
    reference = prometheus_client.CollectorRegistry()
    counter = prometheus_client.Counter(
        "reference_attempts", "", ["kind", "outcome"], registry=reference
    )
    histogram = prometheus_client.Histogram(
        "reference_duration_seconds", "", ["kind"], buckets=DURATION_BUCKETS, registry=reference
    )
    # On a bound, between bounds, beyond the last (+Inf), and zero.
    for seconds, outcome in (
        (0.005, "succeeded"),
        (0.0031, "transient"),
        (42.0, "lost"),
        (0, "succeeded"),
    ):
        telemetry.attempts.record("charge", "", outcome, seconds)
        counter.labels("charge", outcome).inc()
        histogram.labels("charge").observe(seconds)

    def samples(registry: prometheus_client.CollectorRegistry, prefix: str) -> dict[str, float]:
        return {
            f"{s.name.removeprefix(prefix)}{sorted(s.labels.items())}": s.value
            for family in registry.collect()
            for s in family.samples
            if not s.name.endswith("_created")
        }

    ours = samples(telemetry.registry, "orderflow_step_")
    theirs = samples(reference, "reference_")
    assert {k: v for k, v in ours.items() if k.startswith(("attempts", "duration"))} == theirs


def test_with_metrics_and_tracing_off_an_attempt_and_its_call_cost_one_shared_object() -> None:
    telemetry = Telemetry(metrics=False, tracing=False)
    headers: dict[str, str] = {}
    with telemetry.step_attempt(CLAIM, "worker-t", CALLER) as attempt:
        with telemetry.external_call("payments", "charge", CALL) as call:
            telemetry.inject(headers)
            call.finished("succeeded")
        attempt.finished("succeeded")
    assert attempt is call  # nothing made per observation
    assert headers == {}
    assert telemetry.registry is None

"""Traces: a span per API request, per step attempt and per external call, with the order, step,
attempt and worker; the W3C `traceparent` on every external call; each step attempt linked to
the trace of the POST /orders that created the order (kept in PostgreSQL with the order); the
trace id in JSON log lines. Spans are collected with the SDK's in-memory exporter."""

from __future__ import annotations

import io
import json
import logging
from typing import Any
from uuid import UUID

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler
from api_harness import PRINCIPALS, TOKENS, serve
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from orderflow import logs
from orderflow_core import Executor, OrderService, Services, SystemClock, Timing
from orderflow_core.service import hash_token
from orderflow_core.testing import InMemoryUsers
from orderflow_http import HttpPayments, HttpShipping, HttpWarehouse
from orderflow_http.telemetry import Telemetry
from orderflow_mocks.app import create_mocks_app
from orderflow_mocks.simulation import Simulator
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
ORDER = {"items": [{"sku": "book", "quantity": 1, "unit_price_minor": 990}], "currency": "RUB"}
CALLER_TRACE = 0xABABABABABABABABABABABABABABABAB
CALLER_SPAN = 0xCDCDCDCDCDCDCDCD


def _traceparent(trace_id: int, span_id: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def _ids(traceparent: str | None) -> tuple[int, int]:
    """The trace id and parent span id of a W3C `traceparent` (flags aside)."""
    assert traceparent is not None
    version, trace_id, span_id, _flags = traceparent.split("-")
    assert version == "00"
    return int(trace_id, 16), int(span_id, 16)


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    [span] = [s for s in spans if s.name == name]
    return span


def test_request_steps_and_calls_are_traced_and_each_step_links_the_creating_request(
    pg_store: PgOrderStore, run: Any
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=provider)
    received: list[tuple[str, str | None]] = []

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        received.append((request.path, request.headers.get("traceparent")))
        return await handler(request)

    async def scenario() -> str:
        mocks = create_mocks_app(Simulator())
        mocks.middlewares.append(record)
        runner = web.AppRunner(mocks)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            users = InMemoryUsers({hash_token(TOKENS["customer"]): PRINCIPALS["customer"]})
            service = OrderService(pg_store, SystemClock(), users)
            async with (
                HttpWarehouse(url, telemetry=telemetry) as warehouse,
                HttpPayments(url, telemetry=telemetry) as payments,
                HttpShipping(url, telemetry=telemetry) as shipping,
            ):
                executor = Executor(
                    store=pg_store,
                    services=Services(warehouse, payments, shipping),
                    clock=SystemClock(),
                    worker_id="worker-t",
                    timing=Timing(chain_steps=True),
                    observer=telemetry,
                )
                async with serve(service, telemetry=telemetry) as api:
                    reply = await api.call(
                        "POST",
                        "/api/v1/orders",
                        body=ORDER,
                        key="traced-1",
                        headers={"traceparent": _traceparent(CALLER_TRACE, CALLER_SPAN)},
                    )
                    assert reply.status == 202
                while await executor.run_once():
                    pass
            return str(reply.body["order_id"])  # type: ignore[index]
        finally:
            await runner.cleanup()

    order_id = run(scenario())
    spans = list(exporter.get_finished_spans())

    request = _one(spans, "POST /api/v1/orders")
    assert request.kind is SpanKind.SERVER
    assert request.context.trace_id == CALLER_TRACE  # continues the caller's trace
    assert request.parent is not None
    assert request.parent.span_id == CALLER_SPAN
    assert request.attributes["http.route"] == "/api/v1/orders"  # type: ignore[index]
    assert request.attributes["http.response.status_code"] == 202  # type: ignore[index]
    aggregate = run(pg_store.load(UUID(order_id)))
    assert aggregate.order.state.value == "shipped"
    assert aggregate.order.trace_parent is not None
    assert _ids(aggregate.order.trace_parent) == (CALLER_TRACE, request.context.span_id)

    for kind, service, operation in (
        ("reserve", "warehouse", "reserve"),
        ("charge", "payments", "charge"),
        ("ship", "shipping", "ship"),
    ):
        step = _one(spans, f"step {kind}")
        attributes = dict(step.attributes or {})
        assert attributes["order_id"] == order_id
        assert attributes["worker"] == "worker-t"
        assert attributes["attempt"] == 1
        assert attributes["outcome"] == "succeeded"
        assert step.parent is None  # its own trace, linked to the request
        assert step.context.trace_id != CALLER_TRACE
        [link] = step.links
        assert (link.context.trace_id, link.context.span_id) == (
            CALLER_TRACE,
            request.context.span_id,
        )
        call = _one(spans, f"{service} {operation}")
        assert call.kind is SpanKind.CLIENT
        assert call.parent is not None
        assert call.parent.span_id == step.context.span_id
        # The step, attempt and worker are its parent's; the call keeps the order and outcome.
        assert dict(call.attributes or {}) == {"order_id": order_id, "outcome": "succeeded"}
        sent = [_ids(tp) for path, tp in received if path.startswith(f"/{service}/")]
        assert (step.context.trace_id, call.context.span_id) in sent
    # Every external call carried a traceparent.
    assert received
    assert all(tp is not None for _, tp in received)


def test_a_json_log_line_names_the_trace_of_the_current_span() -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.StepFields())
    logger = logging.getLogger("orderflow.test.tracing")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with tracer.start_as_current_span("work") as span:
            logger.info("inside")
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert "trace_id" not in outside


def test_without_tracing_no_span_is_made_and_no_traceparent_is_sent() -> None:
    telemetry = Telemetry(tracing=False, metrics=False)
    headers: dict[str, str] = {}
    telemetry.inject(headers)
    assert headers == {}
    assert telemetry.current_trace_parent() is None
    assert not telemetry.serves_metrics

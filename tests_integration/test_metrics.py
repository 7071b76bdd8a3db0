"""GET /metrics of a real `orderflow serve` and a real `orderflow worker`: the counters move as
the orders run. Step attempts by kind and outcome equal the attempts PostgreSQL recorded, every
attempt made one external call, requests are labelled by route template, the waiting gauge
counts the order waiting for a person."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections import Counter

import psycopg
import pytest
from processes import CUSTOMER_TOKEN, Proc, base_env, eventually, free_port, http
from prometheus_client.parser import text_string_to_metric_families

from orderflow.config import ConfigError, load_settings
from orderflow_core.errors import StoreUnavailable
from orderflow_core.model import Item
from orderflow_core.observe import ProbeReading
from orderflow_core.outcomes import Transient
from orderflow_core.ports import CallContext
from orderflow_http import Bulkhead, HttpWarehouse
from orderflow_http.telemetry import Telemetry
from orderflow_mocks import running_mocks
from orderflow_pg.queries import queries

pytestmark = pytest.mark.postgres
AUTH = {"Authorization": f"Bearer {CUSTOMER_TOKEN}"}
ORDER = {"items": [{"sku": "book", "quantity": 1, "unit_price_minor": 990}], "currency": "RUB"}
CALL_OF = {
    "reserve": ("warehouse", "reserve"),
    "charge": ("payments", "charge"),
    "reconcile_payment": ("payments", "status"),
    "ship": ("shipping", "ship"),
    "release_reservation": ("warehouse", "release"),
    "refund": ("payments", "refund"),
    "notify_customer": ("notifications", "notify"),
}
Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(url: str) -> Samples:
    """Every sample of /metrics by sample name (counters end in `_total`)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def by(samples: Samples, name: str, *labels: str) -> Counter[tuple[str, ...]]:
    counts: Counter[tuple[str, ...]] = Counter()
    for sample_labels, value in samples.get(name, []):
        if value:
            counts[tuple(sample_labels[label] for label in labels)] += int(value)
    return counts


def value(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for s, v in samples.get(name, []) if all(s.get(k) == w for k, w in labels.items()))


def recorded_attempts(url: str) -> Counter[tuple[str, ...]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT s.kind, a.outcome, count(*) FROM step_attempts AS a"
            " JOIN workflow_steps AS s USING (step_id) WHERE a.outcome IS NOT NULL"
            " GROUP BY s.kind, a.outcome"
        ).fetchall()
    return Counter({(kind, outcome): int(n) for kind, outcome, n in rows})


def published_events(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM outbox WHERE seq <= (SELECT published_through FROM outbox_feed)"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _state(api: str, order_id: str) -> dict[str, object]:
    status, body = http("GET", f"{api}/api/v1/orders/{order_id}", **AUTH)
    assert status == 200, body
    return dict(body)


def test_serve_counts_api_requests_steps_calls_claims_and_waiting_orders(
    procs: list[Proc], pg_url: str
) -> None:
    mocks_port = free_port()
    env = base_env(
        ORDERFLOW_DATABASE_URL=pg_url,
        ORDERFLOW_HTTP_PORT="0",
        ORDERFLOW_MOCKS_PORT=str(mocks_port),
        ORDERFLOW_RETRY_DELAYS_S="0.05,0.05,0.05,0.05",
        ORDERFLOW_POLL_INTERVAL_S="0.1",
    )
    proc = Proc("serve", env)
    procs.append(proc)
    api = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
    mocks = f"http://127.0.0.1:{mocks_port}"
    # The first order's charge stays pending until the status checks give up: it waits.
    script = {"service": "payments", "operation": "charge", "outcomes": ["pending"]}
    assert http("POST", f"{mocks}/_control/scripts", script)[0] == 201
    posted = []
    for n in range(4):
        status, order = http(
            "POST", f"{api}/api/v1/orders", ORDER, **AUTH, **{"Idempotency-Key": f"m-{n}"}
        )
        assert status == 202, order
        posted.append(str(order["order_id"]))
    gets = 0

    def settled(order_id: str) -> bool:
        nonlocal gets
        gets += 1
        body = _state(api, order_id)
        return body["state"] == "shipped" or body["attention_reason"] == "reconcile_gave_up"

    for order_id in posted:
        eventually(lambda o=order_id: settled(o), timeout_s=60, what=f"{order_id} settled")
    assert _state(api, posted[0])["attention_reason"] == "reconcile_gave_up"
    gets += 1
    unknown = http("GET", f"{api}/api/v1/orders/not-an-id", **AUTH)[0]
    missing = http("GET", f"{api}/no/such/path")[0]

    # Steps: by kind and outcome exactly what PostgreSQL recorded (the relay and the last
    # commit may trail the order's state by a moment, so poll).
    eventually(
        lambda: (
            by(scrape(api), "orderflow_step_attempts_total", "kind", "outcome")
            == recorded_attempts(pg_url)
        ),
        timeout_s=30,
        what="attempt counters equal to the recorded attempts",
    )
    samples = scrape(api)
    attempts = by(samples, "orderflow_step_attempts_total", "kind", "outcome")
    assert attempts[("reserve", "succeeded")] == 4
    assert attempts[("ship", "succeeded")] == 3
    assert attempts[("charge", "unknown")] == 1
    # The status checks went through and each found the charge still pending (so recorded).
    assert attempts[("reconcile_payment", "pending")] >= 1
    durations = by(samples, "orderflow_step_duration_seconds_count", "kind")
    per_kind: Counter[tuple[str, ...]] = Counter()
    for (kind, _), n in attempts.items():
        per_kind[(kind,)] += n
    assert durations == per_kind
    # Every attempt made one external call, with the same outcome — but for a status check
    # that went through (a call that succeeded) and found the charge pending: the attempt is
    # recorded `pending`, the call counted `succeeded`.
    calls = by(samples, "orderflow_external_calls_total", "service", "operation", "outcome")
    call_outcome = {"pending": "succeeded"}
    expected: Counter[tuple[str, ...]] = Counter()
    for (kind, outcome), n in attempts.items():
        expected[(*CALL_OF[kind], call_outcome.get(outcome, outcome))] += n
    assert calls == expected
    latencies = by(
        samples, "orderflow_external_call_duration_seconds_count", "service", "operation"
    )
    assert latencies[("warehouse", "reserve")] == 4
    # Requests by route template and status, never the raw path.
    requests = by(samples, "orderflow_api_requests_total", "route", "method", "status")
    assert requests[("/api/v1/orders", "POST", "202")] == 4
    assert requests[("/api/v1/orders/{order_id}", "GET", "200")] == gets
    assert requests[("/api/v1/orders/{order_id}", "GET", str(unknown))] == 1
    assert requests[("unmatched", "GET", str(missing))] == 1
    assert not any(posted[0] in route for route, _, _ in requests)
    assert value(samples, "orderflow_api_request_duration_seconds_count", method="POST") == 4
    # Claims: with chaining, only each order's reserve is claimed (the rest is chained).
    assert value(samples, "orderflow_claims_total") >= 1
    assert value(samples, "orderflow_claim_batch_size_sum") >= 4
    assert value(samples, "orderflow_lease_takeovers_total") == 0
    assert value(samples, "orderflow_stale_results_rejected_total") == 0
    # Gauges read at scrape time.
    assert value(samples, "orderflow_orders_waiting", reason="reconcile_gave_up") == 1
    assert value(samples, "orderflow_pool_connections_max") == 30
    assert 0 <= value(samples, "orderflow_pool_connections_in_use") <= 30
    assert value(samples, "orderflow_bulkhead_in_flight", service="payments") == 0
    assert {s["service"] for s, _ in samples["orderflow_bulkhead_queued"]} == {
        "warehouse",
        "payments",
        "shipping",
        "notifications",
    }
    eventually(
        lambda: (
            value(scrape(api), "orderflow_outbox_events_published_total")
            == published_events(pg_url)
        ),
        timeout_s=30,
        what="published counter equal to the feed",
    )
    assert value(scrape(api), "orderflow_outbox_oldest_unpublished_age_seconds") >= 0
    assert proc.terminate() == 0


def test_a_worker_serves_its_own_metrics_on_the_metrics_port(
    procs: list[Proc], pg_url: str
) -> None:
    mocks_port, metrics_port = free_port(), free_port()
    mocks = Proc("mocks", base_env(ORDERFLOW_MOCKS_PORT=str(mocks_port)))
    procs.append(mocks)
    mocks.wait_for("listening")
    api = Proc(
        "api",
        base_env(ORDERFLOW_DATABASE_URL=pg_url, ORDERFLOW_HTTP_PORT="0"),
    )
    procs.append(api)
    api_url = api.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
    worker = Proc(
        "worker",
        base_env(
            ORDERFLOW_DATABASE_URL=pg_url,
            ORDERFLOW_MOCKS_PORT=str(mocks_port),
            ORDERFLOW_WORKER_ID="worker-m",
            ORDERFLOW_METRICS_PORT=str(metrics_port),
        ),
    )
    procs.append(worker)
    url = worker.wait_for(r"metrics: (http://\S+)/metrics", timeout_s=60).group(1)
    assert url.endswith(f":{metrics_port}")
    ids = []
    for n in range(2):
        status, order = http(
            "POST", f"{api_url}/api/v1/orders", ORDER, **AUTH, **{"Idempotency-Key": f"w-{n}"}
        )
        assert status == 202
        ids.append(str(order["order_id"]))
    for order_id in ids:
        eventually(lambda o=order_id: _state(api_url, o)["state"] == "shipped", what="shipped")
    eventually(
        lambda: (
            by(scrape(url), "orderflow_step_attempts_total", "kind", "outcome")
            == Counter(
                {
                    ("reserve", "succeeded"): 2,
                    ("charge", "succeeded"): 2,
                    ("ship", "succeeded"): 2,
                    ("notify_customer", "succeeded"): 2,  # process version 2, the default
                }
            )
        ),
        timeout_s=30,
        what="the worker's attempt counters",
    )
    worker_samples = scrape(url)
    assert "orderflow_api_requests_total" not in worker_samples  # the worker serves no API
    assert "orderflow_orders_waiting" not in worker_samples  # database gauges: the API's
    assert value(worker_samples, "orderflow_pool_connections_max") == 30
    assert "orderflow_outbox_oldest_unpublished_age_seconds" in scrape(api_url)
    api_samples = scrape(api_url)
    # Statements by name, each a named query of the store: the worker claims and writes
    # results; the API writes the creates and claims nothing.
    worker_sent = by(worker_samples, "orderflow_db_statements_total", "statement")
    api_sent = by(api_samples, "orderflow_db_statements_total", "statement")
    assert worker_sent[("claim_due",)] >= 1
    assert worker_sent[("apply_changes",)] >= 1
    assert api_sent[("apply_changes",)] >= 1
    assert api_sent[("claim_due",)] == 0
    assert {name for (name,) in worker_sent | api_sent} <= set(queries())
    assert "orderflow_step_attempts_total" not in api_samples  # the API runs no steps
    assert (
        by(api_samples, "orderflow_api_requests_total", "route", "method", "status")[
            ("/api/v1/orders", "POST", "202")
        ]
        == 2
    )
    for proc in (worker, api):
        assert proc.terminate() == 0


def test_a_full_bulkhead_is_seen_in_flight_and_its_refusals_are_counted() -> None:
    telemetry = Telemetry(tracing=False)

    def sample(name: str) -> float | None:
        found: float | None = telemetry.registry.get_sample_value(name, {"service": "warehouse"})
        return found

    async def scenario() -> None:
        async with (
            running_mocks(latency_ms=300) as mocks,
            HttpWarehouse(
                mocks.url, bulkhead=Bulkhead(1, "reject"), telemetry=telemetry
            ) as warehouse,
        ):
            calls = [CallContext(uuid.uuid4(), uuid.uuid4(), f"reserve:{n}") for n in range(2)]
            first = asyncio.create_task(warehouse.reserve(calls[0], [Item("sku", 1, 100)]))
            async with asyncio.timeout(10):  # poll the gauge until the first call holds it
                while sample("orderflow_bulkhead_in_flight") != 1:  # noqa: ASYNC110 - a gauge
                    await asyncio.sleep(0.01)
            refused = await warehouse.reserve(calls[1], [Item("sku", 1, 100)])
            assert isinstance(refused, Transient)
            assert refused.detail == "busy"
            await first
        assert sample("orderflow_bulkhead_in_flight") == 0

    asyncio.run(scenario())
    assert sample("orderflow_bulkhead_rejected_total") == 1
    outcomes = {
        outcome: telemetry.registry.get_sample_value(
            "orderflow_external_calls_total",
            {"service": "warehouse", "operation": "reserve", "outcome": outcome},
        )
        for outcome in ("succeeded", "transient")
    }
    assert outcomes == {"succeeded": 1, "transient": 1}


def test_the_metrics_settings_are_read_and_checked() -> None:
    default = load_settings({})
    assert (default.metrics, default.tracing, default.metrics_port) == (True, True, 0)
    custom = load_settings(
        {"ORDERFLOW_METRICS": "0", "ORDERFLOW_TRACING": "0", "ORDERFLOW_METRICS_PORT": "9464"}
    )
    assert (custom.metrics, custom.tracing, custom.metrics_port) == (False, False, 9464)
    for variable, bad in (
        ("ORDERFLOW_METRICS_PORT", "70000"),
        ("ORDERFLOW_METRICS", "yes"),
        ("ORDERFLOW_TRACING", "on"),
    ):
        with pytest.raises(ConfigError, match=variable):
            load_settings({variable: bad})


def test_a_database_that_does_not_answer_leaves_the_last_reading_and_the_rest_served() -> None:
    readings: list[ProbeReading | Exception] = [
        ProbeReading(2.5, {"blocked": 3}),
        StoreUnavailable("no connection"),
    ]

    async def probe() -> ProbeReading:
        reading = readings.pop(0)
        if isinstance(reading, Exception):
            raise reading
        return reading

    telemetry = Telemetry(tracing=False, probe=probe, probe_ttl_s=0)
    first = asyncio.run(telemetry.exposition()).decode()
    second = asyncio.run(telemetry.exposition()).decode()
    assert readings == []  # both scrapes read the database
    for text in (first, second):
        assert 'orderflow_orders_waiting{reason="blocked"} 3.0' in text
        assert "orderflow_outbox_oldest_unpublished_age_seconds 2.5" in text

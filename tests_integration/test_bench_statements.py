"""The benchmark's statements per order: the processes' `orderflow_db_statements_total`
counters, read from real `/metrics` endpoints over sockets, added up and divided."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping

from aiohttp import web
from sockets import serving

from bench import statements
from orderflow_http.api.metrics import metrics_app
from orderflow_http.telemetry import Telemetry


def _metrics_of(counts: Mapping[str, int]) -> web.Application:
    return metrics_app(Telemetry(tracing=False, statements=lambda: counts))


def test_statements_are_summed_over_processes_and_divided_by_the_orders() -> None:
    api_counts = {"apply_changes": 10}
    worker_counts = {"apply_changes": 30, "claim_due": 12}

    async def scenario() -> None:
        async with (
            serving(_metrics_of(api_counts)) as api,
            serving(_metrics_of(worker_counts)) as worker,
        ):
            start = await statements.read([api, worker])
            assert start == Counter({"apply_changes": 40, "claim_due": 12})
            api_counts["apply_changes"] += 20  # 20 orders: one create statement each
            worker_counts["apply_changes"] += 40
            worker_counts["claim_due"] += 5
            worker_counts["renew_lease"] = 2
            end = await statements.read([api, worker])
        assert statements.per_order(start, end, 20) == {
            "statements_per_order": 3.35,
            "statements_by_name_per_order": {
                "apply_changes": 3.0,
                "claim_due": 0.25,
                "renew_lease": 0.1,
            },
        }

    asyncio.run(scenario())


def test_a_process_without_the_counters_gives_no_figure() -> None:
    async def scenario() -> None:
        async with (
            serving(_metrics_of({"apply_changes": 1})) as counted,
            serving(web.Application()) as bare,  # /metrics: 404
            serving(metrics_app(Telemetry(tracing=False))) as uncounted,
        ):
            assert await statements.read([counted, bare]) is None
            assert await statements.read([counted, uncounted]) is None
            assert await statements.read([counted]) == Counter({"apply_changes": 1})

    asyncio.run(scenario())
    assert statements.per_order(None, Counter({"x": 1}), 10) == {"statements_per_order": None}

"""The benchmark's durable-workflow peer (DBOS Transact) and its cost floor run a few orders end
to end: real PostgreSQL, real `orderflow mocks` on a real socket, the peer in its own process;
every order makes its three calls, and the CPU of the peer, the mocks and PostgreSQL is read
between the load's start and end."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
from typing import Any

import pytest

from bench import compare, launch, peer, peer_env, report, scenario

pytestmark = pytest.mark.postgres

ORDERS = 12


def _setup(admin_url: str) -> scenario.Setup:
    return scenario.Setup(
        launcher=launch.choose_launcher("auto"), server_url=admin_url, template="unused",
        db_prefix=f"orderflow_test_bench_{os.getpid()}_", customer_token="t",
        operator_token="o", concurrency=4, clients=1, timeout_s=120.0,
    )


def _dbos_ready() -> str | None:
    """Why the DBOS peer cannot run here, or None: bench/.peer-venv with dbos in it."""
    if peer.ensure_installed() is None:
        return "bench/.peer-venv cannot be prepared (no package index reachable?)"
    probe = subprocess.run([str(peer_env.python()), "-c", "import dbos"], capture_output=True,
                           text=True, timeout=120, check=False)
    return None if probe.returncode == 0 else f"dbos is not importable: {probe.stderr[-300:]}"


def _assert_ran_every_order(result: dict[str, Any]) -> None:
    assert "error" not in result, result.get("error")
    assert result["chains_done"] == ORDERS
    assert result["call_failures"] == 0
    assert result["chains_per_s"] > 0
    # Its own transactions on its own database: at least one durable write per order.
    assert result["xact_commit"] >= ORDERS
    per = result["cpu_ms_per_order"]
    assert {"worker", "mocks"} <= set(per)
    assert per["worker"] > 0
    assert result["cpu_total_ms_per_order"] >= per["worker"]


@pytest.mark.parametrize(("mode", "batch"), [("sync", 5), ("async", 1)])
def test_the_dbos_peer_runs_one_workflow_of_three_steps_per_order(
    admin_url: str, mode: str, batch: int
) -> None:
    reason = _dbos_ready()
    if reason:
        pytest.skip(reason)
    options = {"dbos_polling_s": 0.05, "dbos_mode": mode, "dbos_enqueue_batch": batch}
    result = asyncio.run(peer.run(_setup(admin_url), "dbos", latency=0, orders=ORDERS,
                                  concurrency=4, options=options))
    _assert_ran_every_order(result)
    assert result["system"] == f"dbos-{mode}"
    assert (result["mode"], result["enqueue_batch"]) == (mode, batch)
    assert result["options"] == options
    # DBOS records each workflow and each of its steps: several transactions per order.
    assert result["xacts_per_chain"] > 1


def test_the_floor_makes_three_calls_and_three_durable_writes_per_order(
    admin_url: str,
) -> None:
    result = asyncio.run(peer.run(_setup(admin_url), peer.FLOOR, latency=0, orders=ORDERS,
                                  concurrency=4))
    _assert_ran_every_order(result)
    # Group-committed: never more commits than results, at least one.
    assert 1 <= result["commits"] <= 3 * ORDERS


def test_a_run_is_read_against_the_floor_at_its_own_latency() -> None:
    floors = [{"mocks_latency_ms": 0, "chains_per_s": 400.0, "cpu_total_ms_per_order": 2.0},
              {"mocks_latency_ms": 20, "chains_per_s": 250.0, "cpu_total_ms_per_order": 2.5}]
    run = {"mocks_latency_ms": 20, "orders_per_s": 200.0, "cpu_total_ms_per_order": 7.5}
    report._floor_ratio(run, floors)
    assert (run["floor_ratio"], run["floor_cpu_ratio"]) == (0.8, 3.0)
    pairs = [{"mocks_latency_ms": 0, "ours": 300.0, "peer": 250.0, "dbos": 60.0, "floor": 400.0,
              "cpu_total_ms_per_order": {"ours": 7.0, "dbos": 14.0, "floor": 2.0}},
             {"mocks_latency_ms": 0, "ours": 330.0, "peer": 300.0, "dbos": None, "floor": 440.0,
              "cpu_total_ms_per_order": {"ours": 6.0, "floor": 3.0}}]
    assert report.pair_summary(pairs, "dbos") == [
        {"mocks_latency_ms": 0, "ratios": [5.0], "mean": 5.0, "min": 5.0, "max": 5.0}]
    assert report.pair_summary(pairs, "floor")[0]["ratios"] == [0.75, 0.75]
    assert report.pair_cpu_summary(pairs) == [
        {"mocks_latency_ms": 0, "ours": 6.5, "dbos": 14.0, "floor": 2.5}]


def test_the_floor_offered_a_rate_starts_its_orders_on_that_schedule(admin_url: str) -> None:
    rate = 40.0
    result = asyncio.run(peer.run(_setup(admin_url), peer.FLOOR, latency=0, orders=ORDERS,
                                  concurrency=4, options={"floor_rate": rate}))
    _assert_ran_every_order(result)
    assert result["offered_rate"] == rate
    # An open loop: the last order cannot start before (ORDERS - 1) / rate s, however fast
    # the calls and commits are (the closed loop of 12 orders at 0 ms takes far less).
    assert result["elapsed_s"] >= (ORDERS - 1) / rate - 0.01
    assert result["chains_per_s"] <= rate * ORDERS / (ORDERS - 1) + 0.5


def test_the_low_load_run_is_read_against_the_floor_at_the_same_rate() -> None:
    low = {"cpu_total_ms_per_order": 12.0, "created_to_shipped_ms": {"p50": 90.0},
           "floor": {"cpu_total_ms_per_order": 4.0, "chain_latency_ms": {"p50": 72.0}}}
    assert compare.against_floor(low) == {"floor_cpu_ratio": 3.0, "floor_p50_ratio": 1.25}
    assert compare.against_floor({"floor": {"error": "timed out"}}) == {
        "floor_cpu_ratio": None, "floor_p50_ratio": None}
    lines = "\n".join(compare.low_load_lines({**low, **compare.against_floor(low)}))
    assert "CPU per order 3.0, p50 1.25" in lines


def test_the_compared_results_keep_no_token() -> None:
    args = argparse.Namespace(peer_orders=10, customer_token="s3cret", operator_token="t0k")
    assert compare.options_of(args) == {"peer_orders": 10}

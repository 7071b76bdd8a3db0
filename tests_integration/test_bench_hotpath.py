"""`python -m bench.hotpath`: the worker's decisions and documents for whole orders, replayed
without I/O, are the ones the executor and the PostgreSQL store make."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import orjson

from bench import hotpath
from orderflow_core.states import OrderState, StepKind, StepStatus

ROOT = Path(__file__).resolve().parents[1]


def test_each_order_is_replayed_from_its_claim_to_shipped_in_four_fenced_writes() -> None:
    clock = hotpath._Ticking()
    done = hotpath.replay(hotpath._created(clock, 3), clock)
    assert len(done) == 3
    for kept, docs in done:
        assert kept.order.state is OrderState.SHIPPED
        mainline = [s for s in kept.steps if s.kind is not StepKind.EXPIRE_RESERVATION]
        assert [s.kind for s in mainline] == [StepKind.RESERVE, StepKind.CHARGE, StepKind.SHIP]
        assert all(s.status is StepStatus.SUCCEEDED for s in mainline)
        # the start, two results that chain the next intent, the last result: each decided on
        # the kept copy, so each carries what that copy expects of the order
        assert len(docs) == 4
        assert [d["expect_version"] for d in docs] == [0, 1, 2, 3]
        # every write is fenced by the generation of the step it starts or ends
        assert [d["guarded_step"]["kind"] for d in docs] == ["reserve", "reserve", "charge", "ship"]
        assert [len(d["new_steps"]) for d in docs] == [0, 2, 1, 0]  # charge + expiry, ship
        # the batch's JSON carries the four documents, each fenced to this order
        sent = orjson.loads(hotpath.writes.documents(docs))
        assert [d["expect_order"] for d in sent] == [str(kept.order.order_id)] * 4


def test_the_command_reports_time_and_calls_per_order() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.hotpath", "--orders", "20", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = ast.literal_eval(out.stdout.strip())
    assert report["orders"] == 20
    assert report["us_per_order"] > 0
    # an order's decisions and documents are some thousands of Python calls, not a few
    assert 500 < report["calls_per_order"] < 20_000

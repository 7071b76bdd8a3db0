"""Random commands, outcomes, crashes, stalls and clock jumps against two executors on one
store; the six rules of docs/lifecycle.md are checked after every step, through the store port.

The machine runs on the in-memory store here; `tests_integration/test_stateful_pg.py` runs the
same machine on PostgreSQL by overriding `make_world` and `close_world`.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from orderflow_core import Item, OrderflowError, StepStatus
from orderflow_core.model import Claim
from tests_core.rules import check_all_rules
from tests_core.world import CUSTOMER, OPERATOR, World

CHECKPOINTS = ["before_call", "after_call", "after_commit"]
FAULTS = {
    ("warehouse", "reserve"): ["success", "transient", "permanent", "timeout", "lost_response"],
    ("warehouse", "release"): ["success", "transient", "timeout", "lost_response"],
    ("payments", "charge"): [
        "success",
        "transient",
        "permanent",
        "timeout",
        "lost_response",
        "pending",
    ],
    ("payments", "status"): ["success", "transient", "timeout"],
    ("payments", "refund"): ["success", "transient", "permanent", "timeout", "lost_response"],
    ("shipping", "ship"): ["success", "transient", "permanent", "timeout", "lost_response"],
}
items = st.lists(
    st.builds(
        Item, st.sampled_from(["sku-a", "sku-b", "sku-c"]), st.integers(1, 3), st.integers(0, 5000)
    ),
    min_size=1,
    max_size=3,
).filter(lambda lines: sum(i.total_minor for i in lines) > 0)  # a free order is refused


class Crash(Exception):
    """The executor dies at a checkpoint, leaving its step as a SIGKILL would."""


class Stall:
    """An executor frozen at a checkpoint until the test lets it go."""

    def __init__(
        self, task: asyncio.Task[int], claim: Claim, release: asyncio.Future[None], point: str
    ) -> None:
        self.task, self.claim, self.release, self.point = task, claim, release, point


class OrderflowMachine(RuleBasedStateMachine):
    orders = Bundle("orders")

    def __init__(self) -> None:
        super().__init__()
        self.crash_at: dict[str, str] = {}  # worker id -> checkpoint to crash at
        self.stall_at: dict[str, str] = {}  # worker id -> checkpoint to stall at
        self.stalled: asyncio.Future[Claim] | None = None
        self.stall_release: asyncio.Future[None] | None = None
        self.stalls: list[Stall] = []
        self.world = self.make_world()

    def make_world(self) -> World:
        """The world under test; subclasses put it on another store."""
        return World(executors=2, checkpoint=self._checkpoint)

    def close_world(self) -> None:
        self.world.close()

    async def _checkpoint(self, name: str, claim: Claim) -> None:
        if self.crash_at.get(claim.owner) == name:
            del self.crash_at[claim.owner]
            raise Crash(name)
        if self.stall_at.get(claim.owner) == name:
            del self.stall_at[claim.owner]
            assert self.stalled is not None
            assert self.stall_release is not None
            release = self.stall_release
            self.stalled.set_result(claim)
            await release

    def teardown(self) -> None:
        try:
            self._finish()
        finally:
            self.close_world()

    def _finish(self) -> None:
        w = self.world
        for stall in self.stalls:
            stall.release.set_result(None)
            w.run(asyncio.wait({stall.task}))
        self.crash_at.clear()
        self.stall_at.clear()
        for _ in range(3):  # past every lease and the reservation TTL, then drain
            w.clock.advance(w.timing.reservation_ttl_s + 1)
            w.settle(max_rounds=400)
        check_all_rules(w)
        for order_id in w.order_ids:
            aggregate = w.load(order_id)
            assert aggregate.order.is_terminal or aggregate.needs_attention, (
                aggregate.order.state,
                [(s.kind.value, s.status.value) for s in aggregate.steps],
            )

    @initialize()
    def start(self) -> None:
        check_all_rules(self.world)

    @rule(target=orders, lines=items)
    def create_order(self, lines: list[Item]) -> UUID:
        return self.world.create(*lines)

    @rule(op=st.sampled_from(sorted(FAULTS)), data=st.data())
    def script_fault(self, op: tuple[str, str], data: st.DataObject) -> None:
        outcome = data.draw(st.sampled_from(FAULTS[op]))
        self.world.sim.script(op[0], op[1], [outcome])

    @rule(executor=st.integers(0, 1), crash=st.none() | st.sampled_from(CHECKPOINTS))
    def run_executor(self, executor: int, crash: str | None) -> None:
        worker = self.world.executors[executor].worker_id
        if crash:
            self.crash_at[worker] = crash
        self.world.step(executor)
        self.crash_at.pop(worker, None)

    @precondition(lambda self: len(self.stalls) < 2)
    @rule(executor=st.integers(0, 1), point=st.sampled_from(CHECKPOINTS))
    def stall_executor(self, executor: int, point: str) -> None:
        w = self.world
        ex = w.executors[executor]
        self.stalled = w.loop.create_future()
        self.stall_release = w.loop.create_future()
        self.stall_at[ex.worker_id] = point
        task = w.loop.create_task(ex.run_once(limit=1))
        w.run(asyncio.wait({task, self.stalled}, return_when=asyncio.FIRST_COMPLETED))
        self.stall_at.pop(ex.worker_id, None)
        if self.stalled.done():
            self.stalls.append(Stall(task, self.stalled.result(), self.stall_release, point))
        else:
            w.run(asyncio.wait({task}))

    @precondition(lambda self: bool(self.stalls))
    @rule(data=st.data())
    def resume_stalled(self, data: st.DataObject) -> None:
        stall = self.stalls.pop(data.draw(st.integers(0, len(self.stalls) - 1)))
        w = self.world
        step = w.load(stall.claim.order_id).step(stall.claim.step_id)
        assert step is not None
        lost = stall.point != "after_commit" and (
            step.attempt != stall.claim.attempt
            or step.status is not StepStatus.RUNNING
            or step.lease_expires_at is None
            or step.lease_expires_at <= w.clock.now()
        )
        stall.release.set_result(None)
        w.run(asyncio.wait({stall.task}))
        if lost:
            after = w.load(stall.claim.order_id).step(stall.claim.step_id)
            assert after is not None
            mine = [a for a in after.attempts if a.attempt == stall.claim.attempt]
            # A result computed under a lost lease is never stored (rule 6).
            assert all(a.outcome in (None, "abandoned", "not_sent") for a in mine), mine

    @rule(seconds=st.sampled_from([1, 2, 5, 11, 31, 120, 901]))
    def advance_clock(self, seconds: int) -> None:
        self.world.clock.advance(seconds)
        self.world.run(asyncio.sleep(0))

    @rule(data=st.data(), status=st.sampled_from(["succeeded", "failed"]))
    def settle_a_pending_charge(self, data: st.DataObject, status: str) -> None:
        pending = [
            c for c in self.world.sim.ledger()["effects"]["charges"] if c["status"] == "pending"
        ]
        if pending:
            charge = data.draw(st.sampled_from(pending))
            self.world.sim.settle(charge["idempotency_key"], status)

    @rule(order_id=orders)
    def cancel(self, order_id: UUID) -> None:
        self._command(self.world.service.cancel(CUSTOMER, order_id))

    @rule(order_id=orders, operator=st.booleans())
    def retry(self, order_id: UUID, operator: bool) -> None:
        self._command(self.world.service.retry(OPERATOR if operator else CUSTOMER, order_id))

    @rule(order_id=orders)
    def reconcile(self, order_id: UUID) -> None:
        self._command(self.world.service.reconcile(OPERATOR, order_id))

    @rule(order_id=orders, amount=st.none() | st.integers(1, 20000), key=st.sampled_from("ab"))
    def refund(self, order_id: UUID, amount: int | None, key: str) -> None:
        self._command(self.world.service.request_refund(OPERATOR, order_id, key, amount, "r"))

    def _command(self, coro: Any) -> None:
        status = 0
        try:
            self.world.run(coro)
        except OrderflowError as refused:
            status = refused.status
        # Refusals are conflicts or validation errors, never a crash of the core.
        assert status in (0, 409, 422)

    @invariant()
    def the_six_rules_hold(self) -> None:
        check_all_rules(self.world)


TestOrderflow = OrderflowMachine.TestCase

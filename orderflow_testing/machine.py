"""The six-rule stateful machine, reusable against any `OrderStore`.

Random orders, scripted outcomes of every kind, two executors on one store (one chaining),
crashes and stalls at every checkpoint, clock jumps past the lease and the reservation hold,
and random cancel/retry/reconcile/refund; after every step the six rules are checked through
the store port and the simulated services' ledger, and at the end every order is terminal or
waiting for a person. Rule 6 is judged by writer: the store is wrapped in a `RecordingStore`,
and a stalled executor that lost its lease must have committed nothing under its generation
when it resumes.

    TestMyStore = machine_for(fresh_store).TestCase

`fresh_store` returns an async context manager that yields a new, empty store (also an outbox
feed) and closes it on exit; it is entered once per example on that example's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack
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

from orderflow_core import (
    Item,
    OrderAggregate,
    OrderflowError,
    OrderState,
    Services,
    StepKind,
    StepStatus,
)
from orderflow_core.model import Claim
from orderflow_core.ports import OrderStore
from orderflow_core.process import NEWEST, process_for
from orderflow_core.steps.registry import attention_reason
from orderflow_core.testing import InMemoryOrderStore
from orderflow_mocks.sim_adapters import simulated_services
from orderflow_mocks.simulation import Simulator
from orderflow_testing.recording import RecordingStore, recording_store
from orderflow_testing.rules import check_all_rules
from orderflow_testing.strategies import (
    CUSTOMER,
    OPERATOR,
    Operation,
    checkpoints,
    operations,
    order_lines,
    scripted_outcomes,
)
from orderflow_testing.world import ServicesFactory, SimWorld

StoreFactory = Callable[[], AbstractAsyncContextManager[OrderStore]]


def in_memory_store() -> AbstractAsyncContextManager[OrderStore]:
    """A fresh `InMemoryOrderStore` (the default store of the machine)."""
    return contextlib.nullcontext(InMemoryOrderStore())


# The codes a command may be refused with (the API answers them 409 or 422).
REFUSAL_CODES = frozenset(
    {
        "invalid_transition",
        "not_retryable",
        "validation_failed",
        "idempotency_key_reused",
        "idempotency_conflict",
        "concurrent_update",
    }
)


class Crash(Exception):
    """The executor dies at a checkpoint, leaving its step as a SIGKILL would."""


class Stall:
    """An executor frozen at a checkpoint until the test lets it go."""

    def __init__(
        self, task: asyncio.Task[int], claim: Claim, release: asyncio.Future[None], point: str
    ) -> None:
        self.task, self.claim, self.release, self.point = task, claim, release, point


class UnexpectedErrors(logging.Handler):
    """Collects what orderflow logs at ERROR or above: a decision or a store that raised is
    survived by the executor (the step is left to lease expiry), so the rules alone could
    miss it. Crashes the machine injects at a checkpoint are expected and not collected."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not (record.exc_info and isinstance(record.exc_info[1], Crash)):
            self.records.append(record)

    def __enter__(self) -> UnexpectedErrors:
        logging.getLogger("orderflow").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("orderflow").removeHandler(self)


class OrderflowMachine(RuleBasedStateMachine):
    """Subclass it overriding `open_store` (and `services`, to wrap or replace the simulated
    services), or let `machine_for` do it. `process_version` is the version of the orders it
    creates (the newest unless a subclass says otherwise)."""

    process_version: int = NEWEST

    def open_store(self) -> AbstractAsyncContextManager[OrderStore]:
        """A new, empty store for one example, as an async context manager."""
        return in_memory_store()

    def services(self, sim: Simulator) -> Services:
        """The services the executors call; the rules read `sim`'s ledger."""
        return simulated_services(sim)

    orders = Bundle("orders")

    def __init__(self) -> None:
        super().__init__()
        self.crash_at: dict[str, str] = {}  # worker id -> checkpoint to crash at
        self.stall_at: dict[str, str] = {}  # worker id -> checkpoint to stall at
        self.stalled: asyncio.Future[Claim] | None = None
        self.stall_release: asyncio.Future[None] | None = None
        self.stalls: list[Stall] = []
        self._stack = AsyncExitStack()
        self.errors = UnexpectedErrors()
        self.world = self.make_world()
        self._stack.push(self.errors.__exit__)
        self.errors.__enter__()

    def make_world(self) -> SimWorld:
        """The store from the factory, opened on a new loop and wrapped for recording."""
        loop = asyncio.new_event_loop()
        try:
            store = loop.run_until_complete(self._stack.enter_async_context(self.open_store()))
        except BaseException:
            loop.close()
            raise
        return SimWorld(
            recording_store(store),
            loop,
            self.services,
            checkpoint=self._checkpoint,
            process_version=self.process_version,
        )

    def close_world(self) -> None:
        """Close the store first, then cancel what is left on the loop and close it."""
        w = self.world
        try:
            w.run(self._stack.aclose())
        finally:

            async def cancel_all() -> None:
                pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

            w.run(cancel_all())
            w.loop.close()

    @property
    def recorder(self) -> RecordingStore:
        """Who wrote what: every applied change with the generation it was committed under."""
        store = self.world.store
        assert isinstance(store, RecordingStore), "make_world must wrap its store"
        return store

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
        for _ in range(3):  # past every lease and the reservation hold, then drain
            w.clock.advance(w.timing.reservation_ttl_s + 1)
            w.settle(max_rounds=400)
        check_all_rules(w)
        self.nothing_raised_unexpectedly()
        for order_id in w.order_ids:
            aggregate = w.load(order_id)
            waits = attention_reason(aggregate) is not None
            assert aggregate.order.is_terminal or waits, (
                aggregate.order.state,
                [(s.kind.value, s.status.value) for s in aggregate.steps],
            )
            self._notified_unless_waiting(aggregate)

    @staticmethod
    def _notified_unless_waiting(aggregate: OrderAggregate) -> None:
        """Once drained, a shipped order of a version that notifies was notified, or waits
        for a person; the other versions never notify."""
        notify = [s.status for s in aggregate.steps_of(StepKind.NOTIFY_CUSTOMER)]
        version = process_for(aggregate.order.process_version)
        if StepKind.NOTIFY_CUSTOMER not in version.then.get(StepKind.SHIP, ()):
            assert not notify, (version.version, notify)
        elif aggregate.order.state is OrderState.SHIPPED:
            waits = attention_reason(aggregate) is not None
            assert StepStatus.SUCCEEDED in notify or waits, notify

    @initialize()
    def start(self) -> None:
        check_all_rules(self.world)

    @rule(target=orders, lines=order_lines())
    def create_order(self, lines: list[Item]) -> UUID:
        return self.world.create(*lines)

    @rule(op=operations(), data=st.data())
    def script_fault(self, op: Operation, data: st.DataObject) -> None:
        self.world.sim.script(op[0], op[1], [data.draw(scripted_outcomes(op))])

    @rule(executor=st.integers(0, 1), crash=st.none() | checkpoints())
    def run_executor(self, executor: int, crash: str | None) -> None:
        worker = self.world.executors[executor].worker_id
        if crash:
            self.crash_at[worker] = crash
        self.world.step(executor)
        self.crash_at.pop(worker, None)

    @precondition(lambda self: len(self.stalls) < 2)
    @rule(executor=st.integers(0, 1), point=checkpoints())
    def stall_executor(self, executor: int, point: str) -> None:
        w = self.world
        ex = w.executors[executor]
        self.stalled = w.loop.create_future()
        self.stall_release = w.loop.create_future()
        self.stall_at[ex.worker_id] = point
        task = w.loop.create_task(ex.run_once(limit=1))
        either: set[asyncio.Future[Any]] = {task, self.stalled}
        w.run(asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED))
        self.stall_at.pop(ex.worker_id, None)
        if self.stalled.done():
            self.stalls.append(Stall(task, self.stalled.result(), self.stall_release, point))
        else:
            w.run(asyncio.wait({task}))

    @precondition(lambda self: bool(self.stalls))
    @rule(data=st.data())
    def resume_stalled(self, data: st.DataObject) -> None:
        self.resume(data.draw(st.integers(0, len(self.stalls) - 1)))

    def resume(self, index: int) -> None:
        """Let stalled executor `index` go on, and check what it wrote."""
        stall = self.stalls.pop(index)
        w = self.world
        step = w.load(stall.claim.order_id).step(stall.claim.step_id)
        assert step is not None
        lost = stall.point != "after_commit" and (
            step.attempt != stall.claim.attempt
            or step.status is not StepStatus.RUNNING
            or step.lease_expires_at is None
            or step.lease_expires_at <= w.clock.now()
        )
        since = len(self.recorder.writes)
        stall.release.set_result(None)
        w.run(asyncio.wait({stall.task}))
        if lost:
            # Rule 6 is about the writer: once its lease is lost, the stale owner writes
            # nothing under its generation. (A later writer may relabel its attempt: a status
            # check that finds no charge marks it `not_charged`.)
            stale = self.recorder.writes_under(stall.claim.guard, since)
            assert not stale, ("a stale owner wrote after losing its lease", stall.claim, stale)

    @rule(seconds=st.sampled_from([1, 2, 5, 11, 31, 120, 901]))
    def advance_clock(self, seconds: int) -> None:
        self.world.clock.advance(seconds)
        self.world.run(asyncio.sleep(0))

    @rule(data=st.data(), status=st.sampled_from(["succeeded", "failed"]))
    def settle_a_pending_charge(self, data: st.DataObject, status: str) -> None:
        pending = [c for c in self.world.effects()["charges"] if c["status"] == "pending"]
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

    def _command(self, coro: Coroutine[Any, Any, object]) -> None:
        code = None
        try:
            self.world.run(coro)
        except OrderflowError as refused:
            code = refused.code
        # Refusals are conflicts or validation errors, never a crash of the core.
        assert code is None or code in REFUSAL_CODES, code

    @invariant()
    def the_six_rules_hold(self) -> None:
        check_all_rules(self.world)

    @invariant()
    def nothing_raised_unexpectedly(self) -> None:
        """No decision, store call or adapter raised: the executor survives such a bug by
        leaving the step to lease expiry, which would hide it from the rules."""
        assert not self.errors.records, [r.getMessage() for r in self.errors.records]


def machine_for(
    store_factory: StoreFactory,
    *,
    services_factory: ServicesFactory = simulated_services,
    name: str = "StoreMachine",
    process_version: int = NEWEST,
) -> type[OrderflowMachine]:
    """The six-rule machine on the stores `store_factory` opens (one per example)."""

    class StoreMachine(OrderflowMachine):
        def open_store(self) -> AbstractAsyncContextManager[OrderStore]:
            return store_factory()

        def services(self, sim: Simulator) -> Services:
            return services_factory(sim)

    StoreMachine.process_version = process_version
    StoreMachine.__name__ = StoreMachine.__qualname__ = name
    return StoreMachine

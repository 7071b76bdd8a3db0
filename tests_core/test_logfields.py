"""Every line logged while an executor runs a step can say which order, step, attempt and worker
it is about: the executor binds them for the task that runs the attempt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from orderflow_core import logfields
from orderflow_core.model import Item
from orderflow_core.outcomes import Outcome
from orderflow_core.ports import CallContext, Warehouse
from tests_core.world import World


@attrs.define
class Recording:
    """A warehouse that notes what was bound for logging when each call was made."""

    inner: Warehouse
    seen: list[Mapping[str, str | int]] = attrs.field(factory=list)

    async def reserve(self, call: CallContext, items: Sequence[Item]) -> Outcome:
        self.seen.append(dict(logfields.current()))
        return await self.inner.reserve(call, items)

    async def release(self, call: CallContext, reservation_key: str) -> Outcome:
        self.seen.append(dict(logfields.current()))
        return await self.inner.release(call, reservation_key)


def test_a_call_made_for_a_step_sees_that_steps_ids_bound_for_its_log_lines() -> None:
    w = World()
    try:
        executor = w.executors[0]
        recording = Recording(executor.services.warehouse)
        executor.services = attrs.evolve(executor.services, warehouse=recording)
        order_id = w.create()
        assert logfields.current() == {}
        w.step()
        [bound] = recording.seen
        reserve = w.load(order_id).steps[0]
        assert bound == {
            "order_id": str(order_id),
            "step_id": str(reserve.step_id),
            "attempt": 1,
            "worker": "worker-0",
        }
        assert logfields.current() == {}, "the binding leaked out of the step's task"
    finally:
        w.close()

"""The step registry: one definition per step kind, and the operations the adapters call."""

from __future__ import annotations

from orderflow_core.states import StepKind
from orderflow_core.steps.registry import OPERATIONS, STEPS
from orderflow_mocks.sim_wire import OPERATIONS as SIMULATED_OPERATIONS


def test_the_registry_defines_every_step_kind_once_under_its_own_kind() -> None:
    assert set(STEPS) == set(StepKind)
    for kind, definition in STEPS.items():
        assert definition.kind is kind


def test_every_step_that_calls_out_names_an_operation_of_its_own() -> None:
    calling = [d for d in STEPS.values() if d.perform is not None]
    names = [d.operation.name for d in calling if d.operation is not None]
    assert len(names) == len(calling) == len(set(names))
    assert set(OPERATIONS) == set(names)


def test_the_simulator_serves_every_operation_of_the_registry_on_its_service() -> None:
    served = {(s, op) for s, ops in SIMULATED_OPERATIONS.items() for op in ops}
    assert {(o.service, o.name) for o in OPERATIONS.values()} == served

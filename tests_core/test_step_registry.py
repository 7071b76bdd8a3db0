"""The step registry: one definition per step kind, and the operations the adapters call."""

from __future__ import annotations

import attrs
import pytest

from orderflow_core.states import BUILT_IN_KINDS, StepKind
from orderflow_core.steps.registry import BUILT_IN, OPERATIONS, STEPS, add, remove
from orderflow_core.steps.reserve import DEFINITION as RESERVE
from orderflow_mocks.sim_wire import OPERATIONS as SIMULATED_OPERATIONS


def test_the_registry_defines_every_step_kind_once_under_its_own_kind() -> None:
    assert set(BUILT_IN) == set(BUILT_IN_KINDS) <= set(STEPS)
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


def test_a_step_kind_is_one_object_per_name_so_kinds_compare_by_identity() -> None:
    assert StepKind("charge") is StepKind.CHARGE
    assert StepKind("fraud_check_example") is StepKind("fraud_check_example")
    assert StepKind.CHARGE.value == "charge" == f"{StepKind.CHARGE}"
    with pytest.raises(ValueError, match="not a step kind's name"):
        StepKind("")


def test_a_kind_is_defined_once_and_the_packages_own_cannot_be_removed() -> None:
    with pytest.raises(ValueError, match="already defined"):
        add(attrs.evolve(RESERVE, mainline=False))
    add(RESERVE)  # the same definition again is no change
    with pytest.raises(ValueError, match="package's own"):
        remove(StepKind.RESERVE)
    assert STEPS[StepKind.RESERVE] is RESERVE

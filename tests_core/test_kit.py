"""The property-testing kit's strategies state the transition table the way an embedder would
use them: every allowed edge passes, every other pair is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orderflow_core import InvalidTransition
from orderflow_core.process import PROCESSES
from orderflow_core.transitions import TRANSITIONS, check, is_allowed
from orderflow_testing.strategies import (
    SCRIPTED_OUTCOMES,
    Command,
    allowed_edges,
    commands,
    faults,
    refused_edges,
)


@pytest.mark.parametrize("version", sorted(PROCESSES))
@given(data=st.data())
def test_an_allowed_edge_is_allowed_and_names_its_trigger(
    version: int, data: st.DataObject
) -> None:
    edge = data.draw(allowed_edges(version))
    assert is_allowed(*edge, version)
    assert check(*edge, version) == TRANSITIONS[version][edge]


@pytest.mark.parametrize("version", sorted(PROCESSES))
@given(data=st.data())
def test_any_other_pair_is_refused(version: int, data: st.DataObject) -> None:
    edge = data.draw(refused_edges(version))
    assert not is_allowed(*edge, version)
    with pytest.raises(InvalidTransition) as refused:
        check(*edge, version)
    assert (refused.value.current_state, refused.value.requested) == (
        edge[0].value,
        edge[1].value,
    )


@given(faults())
def test_a_fault_is_an_outcome_its_operation_can_be_scripted_to_answer(
    fault: tuple[str, str, str],
) -> None:
    service, operation, outcome = fault
    assert outcome in SCRIPTED_OUTCOMES[(service, operation)]


@given(commands())
def test_refunds_and_reconciliations_come_from_an_operator(command: Command) -> None:
    if command.name in ("refund", "reconcile"):
        assert command.principal.role.value == "operator"
    assert command.refund_amount is None or command.refund_amount >= 1

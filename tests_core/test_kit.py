"""The property-testing kit's strategies state the transition table the way an embedder would
use them: every allowed edge passes, every other pair is refused."""

from __future__ import annotations

import pytest
from hypothesis import given

from orderflow_core import InvalidTransition
from orderflow_core.transitions import TRANSITIONS, check, is_allowed
from orderflow_testing.strategies import (
    SCRIPTED_OUTCOMES,
    Command,
    Edge,
    allowed_edges,
    commands,
    faults,
    refused_edges,
)


@given(allowed_edges())
def test_an_allowed_edge_is_allowed_and_names_its_trigger(edge: Edge) -> None:
    assert is_allowed(*edge)
    assert check(*edge) == TRANSITIONS[1][edge]


@given(refused_edges())
def test_any_other_pair_is_refused(edge: Edge) -> None:
    assert not is_allowed(*edge)
    with pytest.raises(InvalidTransition) as refused:
        check(*edge)
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

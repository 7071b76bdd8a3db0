"""Hypothesis strategies over orderflow's public vocabulary: states, the edges of a process
version's transition table (allowed and refused), order lines, the commands people give, the
outcomes a simulated service can be scripted to answer, and executor faults."""

from __future__ import annotations

from collections.abc import Mapping

import attrs
from hypothesis import strategies as st

from orderflow_core import Item, OrderState, Principal, Role
from orderflow_core.transitions import PROCESS_VERSION, TRANSITIONS

Edge = tuple[OrderState, OrderState]
Operation = tuple[str, str]  # (service, operation), as the simulator's scripts name them

# What each simulated operation can be scripted to answer (the whole vocabulary but `pending`
# outside the charge, and `permanent` for release and status, which have no refusal of theirs).
SCRIPTED_OUTCOMES: Mapping[Operation, tuple[str, ...]] = {
    ("warehouse", "reserve"): ("success", "transient", "permanent", "timeout", "lost_response"),
    ("warehouse", "release"): ("success", "transient", "timeout", "lost_response"),
    ("payments", "charge"): (
        "success",
        "transient",
        "permanent",
        "timeout",
        "lost_response",
        "pending",
    ),
    ("payments", "status"): ("success", "transient", "timeout"),
    ("payments", "refund"): ("success", "transient", "permanent", "timeout", "lost_response"),
    ("shipping", "ship"): ("success", "transient", "permanent", "timeout", "lost_response"),
    ("notifications", "notify"): ("success", "transient", "permanent", "timeout", "lost_response"),
}
# Where an executor can be crashed or stalled: before the call, after it, after the commit.
CHECKPOINTS: tuple[str, ...] = ("before_call", "after_call", "after_commit")
CUSTOMER = Principal("order_customer", Role.CUSTOMER)
OPERATOR = Principal("order_operator", Role.OPERATOR)


def states() -> st.SearchStrategy[OrderState]:
    """Any order state."""
    return st.sampled_from(list(OrderState))


def allowed_edges(version: int = PROCESS_VERSION) -> st.SearchStrategy[Edge]:
    """An edge the transition table of `version` has."""
    return st.sampled_from(sorted(TRANSITIONS[version], key=_edge_key))


def refused_edges(version: int = PROCESS_VERSION) -> st.SearchStrategy[Edge]:
    """A (from, to) pair the table of `version` does not have (staying put included)."""
    table = TRANSITIONS[version]
    refused = [(a, b) for a in OrderState for b in OrderState if (a, b) not in table]
    return st.sampled_from(sorted(refused, key=_edge_key))


def _edge_key(edge: Edge) -> tuple[str, str]:
    return edge[0].value, edge[1].value


def order_lines(max_lines: int = 3) -> st.SearchStrategy[list[Item]]:
    """Order lines with a positive total (a free order is refused)."""
    return st.lists(
        st.builds(
            Item,
            st.sampled_from(["sku-a", "sku-b", "sku-c"]),
            st.integers(1, 3),
            st.integers(0, 5000),
        ),
        min_size=1,
        max_size=max_lines,
    ).filter(lambda lines: sum(i.total_minor for i in lines) > 0)


@attrs.frozen
class Command:
    """Something a person asks of an order: `cancel`, `retry`, `reconcile` or `refund`."""

    name: str
    principal: Principal
    refund_key: str = "a"
    refund_amount: int | None = None  # None: whatever is left


def commands() -> st.SearchStrategy[Command]:
    """Cancel (customer), retry (customer or operator), reconcile and refund (operator)."""
    return st.one_of(
        st.just(Command("cancel", CUSTOMER)),
        st.builds(Command, st.just("retry"), st.sampled_from([CUSTOMER, OPERATOR])),
        st.just(Command("reconcile", OPERATOR)),
        st.builds(
            Command,
            st.just("refund"),
            st.just(OPERATOR),
            st.sampled_from("ab"),
            st.none() | st.integers(1, 20000),
        ),
    )


def operations() -> st.SearchStrategy[Operation]:
    """A (service, operation) of the simulated services."""
    return st.sampled_from(sorted(SCRIPTED_OUTCOMES))


def scripted_outcomes(operation: Operation) -> st.SearchStrategy[str]:
    """An outcome `operation` can be scripted to answer next."""
    return st.sampled_from(SCRIPTED_OUTCOMES[operation])


def faults() -> st.SearchStrategy[tuple[str, str, str]]:
    """(service, operation, outcome): the next answer of one operation, scripted."""
    return operations().flatmap(
        lambda op: scripted_outcomes(op).map(lambda outcome: (op[0], op[1], outcome))
    )


def checkpoints() -> st.SearchStrategy[str]:
    """A point of an executor's attempt where it can crash or stall."""
    return st.sampled_from(CHECKPOINTS)

"""Every allowed transition is reached by a real scenario; every other edge is refused."""

from __future__ import annotations

import itertools

import pytest

from orderflow_core import TERMINAL_STATES, TRANSITIONS, InvalidTransition, OrderState
from orderflow_core.transitions import check
from tests_core.scenarios import SCENARIOS
from tests_core.world import World


@pytest.fixture
def world() -> World:
    w = World()
    yield w
    w.close()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_ends_where_the_lifecycle_says(world: World, name: str) -> None:
    order_id = SCENARIOS[name](world)
    visited = world.states_visited(order_id)
    for from_state, to_state in visited[1:]:
        assert from_state is not None
        assert (OrderState(from_state), OrderState(to_state)) in TRANSITIONS[1]


def test_the_scenarios_together_reach_every_allowed_transition() -> None:
    reached: set[tuple[OrderState, OrderState]] = set()
    for scenario in SCENARIOS.values():
        w = World()
        try:
            order_id = scenario(w)
            reached |= {(OrderState(a), OrderState(b)) for a, b in w.states_visited(order_id) if a}
        finally:
            w.close()
    assert reached == set(TRANSITIONS[1])


def test_every_edge_outside_the_table_is_refused_with_both_states() -> None:
    for current, requested in itertools.product(OrderState, OrderState):
        if (current, requested) in TRANSITIONS[1]:
            assert check(current, requested)
            continue
        with pytest.raises(InvalidTransition) as refused:
            check(current, requested)
        assert refused.value.current_state == current.value
        assert refused.value.requested == requested.value
        assert refused.value.code == "invalid_transition"


def test_terminal_states_have_no_way_out() -> None:
    for current, _ in TRANSITIONS[1]:
        assert current not in TERMINAL_STATES

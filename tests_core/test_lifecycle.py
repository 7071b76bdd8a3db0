"""Every allowed transition is reached by a real scenario; every other edge is refused."""

from __future__ import annotations

import itertools

import pytest

from orderflow_core import TERMINAL_STATES, TRANSITIONS, InvalidTransition, OrderState
from orderflow_core.process import PROCESSES
from orderflow_core.transitions import check
from tests_core.scenarios import SCENARIOS
from tests_core.world import World

VERSIONS = sorted(PROCESSES)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_ends_where_the_lifecycle_says(name: str, version: int) -> None:
    world = World(process_version=version)
    try:
        order_id = SCENARIOS[name](world)
        assert world.load(order_id).order.process_version == version
        visited = world.states_visited(order_id)
    finally:
        world.close()
    for from_state, to_state in visited[1:]:
        assert from_state is not None
        assert (OrderState(from_state), OrderState(to_state)) in TRANSITIONS[version]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_scenarios_together_reach_every_allowed_transition(version: int) -> None:
    reached: set[tuple[OrderState, OrderState]] = set()
    for scenario in SCENARIOS.values():
        w = World(process_version=version)
        try:
            order_id = scenario(w)
            reached |= {(OrderState(a), OrderState(b)) for a, b in w.states_visited(order_id) if a}
        finally:
            w.close()
    assert reached == set(TRANSITIONS[version])


@pytest.mark.parametrize("version", VERSIONS)
def test_every_edge_outside_the_table_is_refused_with_both_states(version: int) -> None:
    for current, requested in itertools.product(OrderState, OrderState):
        if (current, requested) in TRANSITIONS[version]:
            assert check(current, requested, version)
            continue
        with pytest.raises(InvalidTransition) as refused:
            check(current, requested, version)
        assert refused.value.current_state == current.value
        assert refused.value.requested == requested.value
        assert refused.value.code == "invalid_transition"


@pytest.mark.parametrize("version", VERSIONS)
def test_terminal_states_have_no_way_out(version: int) -> None:
    for current, _ in TRANSITIONS[version]:
        assert current not in TERMINAL_STATES

"""Each operation of the simulated services under each scripted outcome kind, and replays."""

from __future__ import annotations

import pytest

from orderflow_core.classify import classify
from orderflow_core.outcomes import Broken, Refused, Succeeded, Transient
from orderflow_mocks.sim_world import PERMANENT_ANSWERS
from tests_core.sim_requests import (
    MUTATING,
    OPERATIONS,
    call,
    effect_count,
    make_sim,
    prepared,
)


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_successful_call_answers_2xx_and_applies_its_effect_once(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    response = call(sim, service, operation, body=body)
    assert 200 <= response.status < 300
    assert response.disposition == "answer"
    assert response.effect_applied is (operation != "status")
    assert effect_count(sim) == before + (operation != "status")
    assert isinstance(classify(operation, response.status, response.body), Succeeded)


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_transient_outcome_answers_503_with_retry_after_and_touches_nothing(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    sim.script(service, operation, ["transient"], retry_after_s=7)
    response = call(sim, service, operation, body=body)
    assert (response.status, response.retry_after_s, response.effect_applied) == (503, 7, False)
    assert effect_count(sim) == before
    assert classify(operation, response.status, response.body, 7) == Transient(
        detail=f"{operation}: HTTP 503", retry_after_s=7
    )
    assert call(sim, service, operation, body=body).status < 300  # the key was not consumed


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_permanent_outcome_answers_the_refusal_and_touches_nothing(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    sim.script(service, operation, ["permanent"])
    response = call(sim, service, operation, body=body)
    status, code = PERMANENT_ANSWERS[operation]
    assert (response.status, response.body["code"]) == (status, code)
    assert not response.effect_applied
    assert effect_count(sim) == before
    outcome = classify(operation, response.status, response.body)
    if operation in ("release", "status"):  # no business refusal exists: a person must look
        assert isinstance(outcome, Broken)
    else:
        assert outcome == Refused(code=code, detail="scripted permanent refusal")


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_timeout_answers_nothing_and_applies_nothing(service: str, operation: str) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    sim.script(service, operation, ["timeout"])
    response = call(sim, service, operation, body=body)
    assert (response.disposition, response.effect_applied) == ("timeout", False)
    assert effect_count(sim) == before
    assert call(sim, service, operation, body=body).effect_applied is (operation != "status")


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_lost_response_applies_the_effect_and_its_replay_returns_the_same_answer(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    sim.script(service, operation, ["lost_response"])
    lost = call(sim, service, operation, body=body)
    assert lost.disposition == "lost_response"
    assert lost.effect_applied is (operation != "status")
    assert effect_count(sim) == before + (operation != "status")
    replay = call(sim, service, operation, body=body)
    assert (replay.status, replay.body, replay.effect_applied) == (lost.status, lost.body, False)
    assert effect_count(sim) == before + (operation != "status")


@pytest.mark.parametrize(("service", "operation"), [o for o in OPERATIONS if o[1] != "charge"])
def test_pending_can_be_scripted_only_for_charges(service: str, operation: str) -> None:
    with pytest.raises(ValueError, match="pending"):
        make_sim().script(service, operation, ["pending"])


@pytest.mark.parametrize(("service", "operation"), MUTATING)
def test_the_same_key_and_body_replays_the_stored_answer_without_a_second_effect(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    first = call(sim, service, operation, body=body)
    count = effect_count(sim)
    again = call(sim, service, operation, body=body)
    assert (again.status, again.body, again.effect_applied) == (first.status, first.body, False)
    assert effect_count(sim) == count
    assert [c["replayed"] for c in sim.ledger()["calls"]][-2:] == [False, True]


@pytest.mark.parametrize(("service", "operation"), MUTATING)
def test_the_same_key_with_another_body_is_refused_as_reused(service: str, operation: str) -> None:
    sim, body = prepared(operation)
    call(sim, service, operation, body=body)
    count = effect_count(sim)
    response = call(sim, service, operation, body={**body, "order_id": "another"})
    assert (response.status, response.body["code"]) == (422, "idempotency_key_reused")
    assert effect_count(sim) == count
    assert isinstance(classify(operation, response.status, response.body), Broken)

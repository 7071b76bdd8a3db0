"""Errors are problem+json (RFC 9457) from one middleware: routing errors, core errors, and
unexpected failures, which answer 500 with an id that is in the log and nothing else."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

import pytest
from api_harness import live, make_world, serve

from orderflow_core.errors import ConcurrentUpdate, StoreUnavailable
from orderflow_core.model import HistoryEntry, OrderAggregate
from orderflow_core.testing import InMemoryOrderStore
from orderflow_pg import PgOrderStore


class FailingStore(InMemoryOrderStore):
    """Once `armed`, loading (or, with `updates_only`, updating) an order raises `failure`."""

    def __init__(self, failure: Exception, *, updates_only: bool = False) -> None:
        super().__init__()
        self.failure = failure
        self.updates_only = updates_only
        self.armed = True

    async def load(self, order_id: UUID) -> OrderAggregate | None:
        if self.armed and not self.updates_only:
            raise self.failure
        return await super().load(order_id)

    async def load_with_history(
        self, order_id: UUID
    ) -> tuple[OrderAggregate, list[HistoryEntry]] | None:
        if self.armed and not self.updates_only:
            raise self.failure
        return await super().load_with_history(order_id)

    async def update(self, order_id: UUID, decide: Any) -> Any:
        if self.armed:
            raise self.failure
        return await super().update(order_id, decide)


def test_an_unknown_path_is_a_not_found_problem() -> None:
    with live() as api:
        reply = api("GET", "/api/v1/nothing-here")
        assert reply.status == 404
        assert reply.content_type == "application/problem+json"
        assert reply.body == {
            "type": "urn:orderflow:problem:not_found",
            "title": "Not found",
            "status": 404,
            "detail": reply.body["detail"],
            "code": "not_found",
        }


def test_a_wrong_method_is_a_problem_that_says_which_are_allowed() -> None:
    with live() as api:
        reply = api("DELETE", "/api/v1/orders/00000000-0000-4000-8000-000000000000")
        assert (reply.status, reply.code) == (405, "method_not_allowed")
        assert reply.headers["Allow"] == "GET"
        assert reply.content_type == "application/problem+json"


def test_an_unexpected_failure_is_a_500_with_an_error_id_that_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = make_world(FailingStore(RuntimeError("secret connection string")))
    with caplog.at_level(logging.ERROR, logger="orderflow.http.api"), live(world) as api:
        reply = api("GET", "/api/v1/orders/00000000-0000-4000-8000-000000000000")
    assert (reply.status, reply.code) == (500, "internal_error")
    assert set(reply.body) == {"type", "title", "status", "detail", "code", "error_id"}
    assert "secret" not in str(reply.body)
    assert "Traceback" not in str(reply.body)
    logged = [r for r in caplog.records if reply.body["error_id"] in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].exc_info is not None


def test_an_unreachable_store_is_a_503_to_retry_later() -> None:
    world = make_world(FailingStore(StoreUnavailable("database timed out")))
    with live(world) as api:
        reply = api("GET", "/api/v1/orders/00000000-0000-4000-8000-000000000000")
        assert (reply.status, reply.code) == (503, "store_unavailable")
        assert reply.headers["Retry-After"] == "1"


def test_a_503_says_what_to_do_and_logs_the_cause_without_internals_or_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cause = (
        "principal_for_token_hash: PoolTimeout: couldn't get a connection after 3.00 sec "
        "(postgresql://orderflow:hunter2@db.internal/orders, password=hunter2)"
    )
    world = make_world(FailingStore(StoreUnavailable(cause)))
    with caplog.at_level(logging.INFO), live(world) as api:
        reply = api("GET", "/api/v1/orders/00000000-0000-4000-8000-000000000000")
    assert (reply.status, reply.code) == (503, "store_unavailable")
    for internal in ("principal_for_token_hash", "PoolTimeout", "hunter2", "postgresql://"):
        assert internal not in str(reply.body)
    assert "Retry-After" in reply.body["detail"]
    logged = [r for r in caplog.records if "PoolTimeout" in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].exc_info is None
    assert "hunter2" not in caplog.text
    assert "orderflow:***@db.internal" in logged[0].getMessage()


@pytest.mark.postgres
def test_a_pool_that_hands_out_no_connection_answers_a_503_without_internals(
    pg_url: str, run: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> Any:
        async with (
            PgOrderStore.open(pg_url, max_size=1, statement_timeout_s=0.3) as store,
            serve(make_world(store).service) as api,
            # The test holds the pool's only connection, so the request gets none.
            store._db.pool.connection(),
        ):
            return await api.call("GET", "/api/v1/orders/00000000-0000-4000-8000-000000000000")

    with caplog.at_level(logging.INFO):
        reply = run(scenario())
    assert (reply.status, reply.code) == (503, "store_unavailable")
    assert "PoolTimeout" not in str(reply.body)
    assert any("PoolTimeout" in r.getMessage() for r in caplog.records)


def test_a_concurrent_update_is_a_409_conflict() -> None:
    store = FailingStore(ConcurrentUpdate("someone else changed the order"), updates_only=True)
    with live(make_world(store)) as api:
        order_id = api.create().body["order_id"]
        reply = api("POST", f"/api/v1/orders/{order_id}/cancel")
        assert (reply.status, reply.code) == (409, "concurrent_update")


def test_a_validation_problem_lists_each_field() -> None:
    with live() as api:
        reply = api("POST", "/api/v1/orders", key="k", body={"items": [], "currency": "EUR"})
        assert (reply.status, reply.code) == (422, "validation_failed")
        assert reply.body["type"] == "urn:orderflow:problem:validation_failed"
        assert {e["field"] for e in reply.body["errors"]} == {"items", "currency"}


def test_the_api_maps_every_error_code_of_the_core_and_of_its_parsing_to_a_4xx_or_503() -> None:
    from orderflow_core import errors
    from orderflow_http.api import parse
    from orderflow_http.api.problems import STATUSES

    raised = [
        e for module in (errors, parse) for e in vars(module).values()
        if isinstance(e, type) and issubclass(e, errors.OrderflowError)
        and e is not errors.OrderflowError
    ]
    assert {e.code for e in raised} == set(STATUSES)
    assert all(400 <= s < 500 or s == 503 for s in STATUSES.values())

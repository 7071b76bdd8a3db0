"""The simulated services over real sockets: their wire and their control API."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from orderflow_mocks import RunningMocks, running_mocks

HOLD_S = 0.3
CHARGE = {"order_id": "o1", "amount_minor": 1000, "currency": "RUB"}


def headers(key: str = "k1", order: str = "o1") -> dict[str, str]:
    return {"Idempotency-Key": key, "X-Order-Id": order, "X-Step-Id": "s1"}


def with_mocks(
    scenario: Callable[[RunningMocks, aiohttp.ClientSession], Awaitable[None]],
    *,
    latency_ms: int = 0,
) -> None:
    """Run `scenario` against a mocks server on 127.0.0.1, port 0, with one client session."""

    async def main() -> None:
        async with (
            running_mocks(hold_s=HOLD_S, latency_ms=latency_ms) as mocks,
            aiohttp.ClientSession(mocks.url, timeout=aiohttp.ClientTimeout(total=5)) as http,
        ):
            await scenario(mocks, http)

    asyncio.run(main())


async def post(http: aiohttp.ClientSession, path: str, body: object, **kw: Any) -> tuple[int, Any]:
    async with http.post(path, json=body, **kw) as response:
        return response.status, await response.json(content_type=None)


def test_a_charge_answers_201_and_its_replay_is_identical() -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        first = await post(http, "/payments/v1/charges", CHARGE, headers=headers())
        again = await post(http, "/payments/v1/charges", CHARGE, headers=headers())
        assert first[0] == 201
        assert again == first
        assert len(mocks.sim.ledger()["effects"]["charges"]) == 1

    with_mocks(scenario)


def test_fifty_concurrent_identical_requests_apply_one_effect() -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        answers = await asyncio.gather(
            *(post(http, "/payments/v1/charges", CHARGE, headers=headers()) for _ in range(50))
        )
        assert {status for status, _ in answers} == {201}
        assert len({body["payment_reference"] for _, body in answers}) == 1
        async with http.get("/_control/ledger", params={"order_id": "o1"}) as response:
            ledger = await response.json()
        assert len(ledger["effects"]["charges"]) == 1
        assert len(ledger["calls"]) == 50
        assert sum(call["effect_applied"] for call in ledger["calls"]) == 1

    with_mocks(scenario, latency_ms=5)


def test_a_reused_key_with_another_body_is_a_422_problem() -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        await post(http, "/payments/v1/charges", CHARGE, headers=headers())
        async with http.post(
            "/payments/v1/charges", json={**CHARGE, "amount_minor": 5}, headers=headers()
        ) as response:
            assert response.content_type == "application/problem+json"
            body = await response.json(content_type=None)
        assert (response.status, body["code"]) == (422, "idempotency_key_reused")

    with_mocks(scenario)


def test_lost_response_applies_the_effect_and_drops_the_connection_unanswered() -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        mocks.sim.script("shipping", "ship", ["lost_response"])
        body = {"order_id": "o1", "items": [{"sku": "A", "quantity": 1}]}
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await post(http, "/shipping/v1/shipments", body, headers=headers())
        assert len(mocks.sim.ledger()["effects"]["shipments"]) == 1

    with_mocks(scenario)


def test_timeout_holds_the_request_then_drops_it_and_applies_nothing() -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        mocks.sim.script("payments", "charge", ["timeout"])
        started = time.monotonic()
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await post(http, "/payments/v1/charges", CHARGE, headers=headers())
        assert time.monotonic() - started >= HOLD_S
        assert mocks.sim.ledger()["effects"]["charges"] == []

    with_mocks(scenario)


def test_a_transient_answer_carries_retry_after() -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        mocks.sim.script("warehouse", "reserve", ["transient"], retry_after_s=3)
        body = {"order_id": "o1", "items": [{"sku": "A", "quantity": 1}]}
        async with http.post(
            "/warehouse/v1/reservations", json=body, headers=headers()
        ) as response:
            assert (response.status, response.headers["Retry-After"]) == (503, "3")

    with_mocks(scenario)


def test_the_status_of_a_key_with_reserved_characters_is_found() -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        key = "a/b?c#d%e"
        await post(http, "/payments/v1/charges", CHARGE, headers=headers(key))
        url = URL(f"{mocks.url}/payments/v1/charges/a%2Fb%3Fc%23d%25e", encoded=True)
        async with http.get(url) as response:
            body = await response.json()
        assert (response.status, body["status"]) == (200, "succeeded")

    with_mocks(scenario)


@pytest.mark.parametrize(
    ("data", "request_headers", "status", "code"),
    [
        (b"{not json", headers(), 400, "malformed_json"),
        (b"[1, 2]", headers(), 422, "validation_failed"),
        (b'{"order_id": "o1"}', headers(), 422, "validation_failed"),
        (
            b'{"order_id": "o1", "amount_minor": 1, "currency": "RUB"}',
            {},
            400,
            "idempotency_key_required",
        ),
        (b"x" * (70 * 1024), headers(), 413, "payload_too_large"),
    ],
)
def test_bad_requests_are_problems_and_never_500(
    data: bytes, request_headers: dict[str, str], status: int, code: str
) -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        async with http.post(
            "/payments/v1/charges", data=data, headers=request_headers
        ) as response:
            body = await response.json(content_type=None)
            assert response.content_type == "application/problem+json"
        assert (response.status, body["code"]) == (status, code)

    with_mocks(scenario)


def test_unknown_paths_and_methods_are_problems() -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        async with http.get("/nowhere") as missing, http.get("/payments/v1/refunds") as wrong:
            assert (missing.status, (await missing.json(content_type=None))["code"]) == (
                404,
                "not_found",
            )
            assert (wrong.status, (await wrong.json(content_type=None))["code"]) == (
                405,
                "method_not_allowed",
            )

    with_mocks(scenario)


def test_the_control_api_scripts_settles_reports_and_resets() -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        script = {
            "service": "payments",
            "operation": "charge",
            "outcomes": ["pending"],
            "order_id": "o1",
        }
        assert (await post(http, "/_control/scripts", script))[0] == 201
        status, body = await post(http, "/payments/v1/charges", CHARGE, headers=headers("pk"))
        assert (status, body) == (202, {"status": "pending"})
        async with http.get("/payments/v1/charges/pk") as response:
            assert (await response.json())["status"] == "pending"
        settle = {"idempotency_key": "pk", "status": "succeeded"}
        status, charge = await post(http, "/_control/payments/settle", settle)
        assert (status, charge["status"]) == (200, "succeeded")
        assert (await post(http, "/_control/payments/settle", settle))[1]["code"] == "not_pending"
        missing = {"idempotency_key": "nope", "status": "failed"}
        assert (await post(http, "/_control/payments/settle", missing))[0] == 404
        async with http.get("/_control/ledger") as response:
            ledger = await response.json()
        assert ledger["effects"]["charges"][0]["payment_reference"] == charge["payment_reference"]
        assert (await post(http, "/_control/reset", {}))[0] == 200
        assert mocks.sim.ledger()["calls"] == []

    with_mocks(scenario)


@pytest.mark.parametrize(
    "script",
    [
        {"service": "payments", "operation": "ship", "outcomes": ["success"]},
        {"service": "payments", "operation": "charge", "outcomes": ["explode"]},
        {"service": "payments", "operation": "charge", "outcomes": []},
        {"service": "warehouse", "operation": "reserve", "outcomes": ["pending"]},
        {
            "service": "payments",
            "operation": "charge",
            "outcomes": ["transient"],
            "retry_after_s": "soon",
        },
        {"service": "payments", "operation": "charge", "outcomes": ["success"], "extra": 1},
    ],
)
def test_invalid_scripts_are_422_problems(script: dict[str, Any]) -> None:
    async def scenario(mocks: RunningMocks, http: aiohttp.ClientSession) -> None:
        status, body = await post(http, "/_control/scripts", script)
        assert (status, body["code"]) == (422, "validation_failed")
        assert mocks.sim.ledger()["scripts"] == []

    with_mocks(scenario)


def test_orderflow_mocks_prints_its_url_answers_the_control_api_and_exits_0_on_sigint() -> None:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = "from orderflow_mocks import run_mocks; run_mocks(port=0)"
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, cwd=root
    ) as process:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = line.split("listening on ", 1)[1].split()[0]

        async def ask() -> int:
            async with aiohttp.ClientSession() as http, http.get(f"{url}/_control/ledger") as r:
                return r.status

        assert asyncio.run(ask()) == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0

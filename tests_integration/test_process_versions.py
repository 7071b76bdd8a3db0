"""Process versions across a restart, with real processes: a version-1 order in flight when
`orderflow serve` is SIGKILLed and started again with version 2 as the default finishes exactly
as version 1 (no notification), while the orders created after the restart are version 2 and
their customers are notified through the simulated notification service."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from processes import CUSTOMER_TOKEN, OPERATOR_TOKEN, Proc, base_env, eventually, free_port, http

pytestmark = pytest.mark.postgres
AUTH = {"Authorization": f"Bearer {CUSTOMER_TOKEN}"}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
ORDER = {"items": [{"sku": "lamp", "quantity": 1, "unit_price_minor": 4200}], "currency": "RUB"}


def _serve(procs: list[Proc], pg_url: str, mocks: str, **extra: str) -> tuple[Proc, str]:
    urls = {
        f"ORDERFLOW_{name}_URL": mocks
        for name in ("WAREHOUSE", "PAYMENTS", "SHIPPING", "NOTIFICATIONS")
    }
    env = base_env(ORDERFLOW_DATABASE_URL=pg_url, ORDERFLOW_HTTP_PORT="0", **urls, **extra)
    proc = Proc("serve", env)
    procs.append(proc)
    api = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
    eventually(lambda: http("GET", f"{api}/readyz")[0] == 200, what="/readyz")
    return proc, api


def _order(api: str, order_id: str) -> dict[str, Any]:
    status, body = http("GET", f"{api}/api/v1/orders/{order_id}", **OPERATOR)
    assert status == 200, body
    return dict(body)


def _ship_status(pg_url: str, order_id: str) -> str | None:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT status FROM workflow_steps WHERE order_id = %s AND kind = 'ship'", (order_id,)
        ).fetchone()
    return None if row is None else str(row[0])


def _step_kinds(pg_url: str, order_id: str) -> list[str]:
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT kind FROM workflow_steps WHERE order_id = %s ORDER BY seq", (order_id,)
        ).fetchall()
    return [str(r[0]) for r in rows]


def _ledger(mocks: str, order_id: str) -> dict[str, Any]:
    status, body = http("GET", f"{mocks}/_control/ledger?order_id={order_id}")
    assert status == 200, body
    return dict(body)


def test_a_version_1_order_in_flight_finishes_as_version_1_after_a_restart_with_version_2(
    procs: list[Proc], pg_url: str
) -> None:
    port = free_port()
    mocks_proc = Proc("mocks", base_env(ORDERFLOW_MOCKS_PORT=str(port)))
    procs.append(mocks_proc)
    mocks_proc.wait_for("listening")
    mocks = f"http://127.0.0.1:{port}"
    # The carrier answers the first ship call with 503 Retry-After 2: the order waits in
    # `shipping` with its ship step scheduled for a retry when the service is killed.
    script = {"service": "shipping", "operation": "ship", "outcomes": ["transient"],
              "retry_after_s": 2}
    assert http("POST", f"{mocks}/_control/scripts", script)[0] in (200, 201, 204)

    first, api = _serve(procs, pg_url, mocks, ORDERFLOW_PROCESS_VERSION="1")
    status, created = http("POST", f"{api}/api/v1/orders", ORDER, **AUTH,
                           **{"Idempotency-Key": "v1-in-flight"})
    assert status == 202, created
    old = str(created["order_id"])
    assert created["process_version"] == 1
    eventually(lambda: _ship_status(pg_url, old) == "retry_scheduled", what="ship retry pending")
    first.kill()
    assert _order_state_in_db(pg_url, old) == "shipping"

    second, api = _serve(procs, pg_url, mocks)  # no ORDERFLOW_PROCESS_VERSION: the newest
    status, created = http("POST", f"{api}/api/v1/orders", ORDER, **AUTH,
                           **{"Idempotency-Key": "v2-after-restart"})
    assert status == 202, created
    new = str(created["order_id"])
    assert created["process_version"] == 2

    eventually(lambda: _order(api, old)["state"] == "shipped", what="the v1 order shipped")
    eventually(lambda: "notify_customer" in _step_kinds(pg_url, new)
               and _ledger(mocks, new)["effects"]["messages"] != [], what="v2 notified")
    old_order = _order(api, old)
    assert old_order["process_version"] == 1
    assert sorted(_step_kinds(pg_url, old)) == ["charge", "expire_reservation", "reserve", "ship"]
    ledger = _ledger(mocks, old)
    assert ledger["effects"]["messages"] == []
    assert [c for c in ledger["calls"] if c["service"] == "notifications"] == []
    assert len(ledger["effects"]["shipments"]) == 1
    [message] = _ledger(mocks, new)["effects"]["messages"]
    assert message["template"] == "shipped"
    assert _order(api, new)["state"] == "shipped"
    assert second.terminate() == 0


def _order_state_in_db(pg_url: str, order_id: str) -> str:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT state FROM orders WHERE order_id = %s", (order_id,)).fetchone()
    assert row is not None
    return str(row[0])

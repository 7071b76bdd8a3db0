"""orderflow through a real pgbouncer in transaction mode.

Each transaction may run on a different server connection, so nothing may live in a server
session: psycopg's server-side prepared statements are off (ORDERFLOW_DATABASE_POOLER=
transaction), the statement timeouts come from pgbouncer's `connect_query`, and what needs a
session of its own — the workers' LISTEN for wake-ups and the migrations' advisory lock — goes
straight to PostgreSQL (ORDERFLOW_DIRECT_DATABASE_URL). The poll interval is set far above the
test's deadline, so orders that flow prove the wake-ups arrive over the direct connection.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import pytest
from conftest import database_name
from processes import CUSTOMER_TOKEN, Proc, base_env, eventually, free_port, http

from bench import pgbouncer

pytestmark = pytest.mark.postgres
ORDERS = 24
AUTH = {"Authorization": f"Bearer {CUSTOMER_TOKEN}"}
ORDER = {"items": [{"sku": "a", "quantity": 1, "unit_price_minor": 100}], "currency": "RUB"}


@pytest.fixture
def bouncer(pg_url: str) -> Iterator[pgbouncer.PgBouncer]:
    why = pgbouncer.available(pg_url)
    if why is not None:
        pytest.skip(why)
    with pgbouncer.PgBouncer.in_front_of(pg_url, pool_size=4) as running:
        yield running


def test_the_api_and_workers_run_through_pgbouncer_in_transaction_mode(
    bouncer: pgbouncer.PgBouncer, pg_url: str, procs: list[Proc]
) -> None:
    env = base_env(
        ORDERFLOW_DATABASE_URL=bouncer.url(pg_url),
        ORDERFLOW_DATABASE_POOLER="transaction",
        ORDERFLOW_DIRECT_DATABASE_URL=pg_url,
        ORDERFLOW_HTTP_PORT="0",
        ORDERFLOW_MOCKS_PORT=str(free_port()),
        ORDERFLOW_POLL_INTERVAL_S="120",  # only the LISTEN wake-ups can move the orders in time
    )
    proc = Proc("serve", env)
    procs.append(proc)
    api = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
    eventually(lambda: http("GET", f"{api}/readyz")[0] == 200, what="/readyz")

    def create(n: int) -> str:
        key = {"Idempotency-Key": f"pgb-{n}"}
        status, body = http("POST", f"{api}/api/v1/orders", ORDER, **AUTH, **key)
        assert status == 202, body
        return str(body["order_id"])

    # Concurrent requests: more client transactions than the pool's 4 server connections.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        order_ids = list(pool.map(create, range(ORDERS)))
    key = {"Idempotency-Key": "pgb-0"}
    _, again = http("POST", f"{api}/api/v1/orders", ORDER, **AUTH, **key)
    assert again["order_id"] == order_ids[0], "the replay is answered from the same order"

    def all_shipped() -> bool:
        states = [http("GET", f"{api}/api/v1/orders/{o}", **AUTH)[1]["state"] for o in order_ids]
        return set(states) == {"shipped"}

    eventually(all_shipped, timeout_s=60, what="every order shipped through pgbouncer")
    assert proc.terminate() == 0
    log = "\n".join(proc.lines)
    assert "prepared statement" not in log, log
    assert "Traceback" not in log
    # The traffic went through pgbouncer: it opened server connections to this test's database.
    assert f"{database_name(pg_url)}/" in bouncer.log()
    assert "new connection to server" in bouncer.log()

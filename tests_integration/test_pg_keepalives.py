"""Every connection to the database carries TCP keepalives and a user timeout (unless the URL
sets its own), so a primary that vanished without closing its sockets is found dead in seconds,
not after the kernel's two hours: the pool's connections and the workers' LISTEN connection."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Run
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from orderflow_pg import PgOrderStore
from orderflow_pg.database import TCP_KEEPALIVES, with_keepalives

pytestmark = pytest.mark.postgres


def test_pooled_connections_carry_keepalives_and_a_user_timeout(pg_url: str, run: Run[Any]) -> None:
    async def parameters() -> dict[str, str]:
        async with (
            PgOrderStore.open(pg_url, min_size=1, max_size=1) as store,
            store._db.pool.connection() as conn,
        ):
            return dict(conn.info.get_parameters())

    params = run(parameters())
    if str(conninfo_to_dict(pg_url).get("host", "")).startswith("/"):
        pytest.skip("a unix-socket server: TCP keepalives do not apply")
    for name, value in TCP_KEEPALIVES.items():
        assert params.get(name) == value, (name, params)


def test_a_url_that_sets_its_own_keepalives_keeps_them() -> None:
    url = make_conninfo("postgresql://u@h1:5432,h2:5432/db", keepalives_idle="30")
    given = conninfo_to_dict(with_keepalives(url))
    assert given["keepalives_idle"] == "30"
    assert given["tcp_user_timeout"] == TCP_KEEPALIVES["tcp_user_timeout"]
    assert given["host"] == "h1,h2"

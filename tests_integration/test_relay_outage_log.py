"""While PostgreSQL is unreachable the relay's loop says so once (no traceback per poll), and
once more when it works again. The database is cut off by a TCP proxy that refuses and drops
connections, not by stopping the shared server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from orderflow.runtime import _every
from orderflow_core import SystemClock
from orderflow_core.relay import OutboxRelay
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres


class CuttableProxy:
    """Forwards a local port to the database; `cut()` drops every connection and refuses new
    ones until `mend()`."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def mend(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.transport.abort()
        await self.server.wait_closed()
        self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = self.target
        if host.startswith("/"):  # a socket directory (the embedded server): libpq's file name
            up_reader, up_writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        else:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        self.writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        try:
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        finally:
            self.writers -= {writer, up_writer}


def test_a_database_outage_is_logged_once_and_its_end_once(
    pg_url: str, run: Any, caplog: pytest.LogCaptureFixture
) -> None:
    params = conninfo_to_dict(pg_url)
    proxy = CuttableProxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))

    async def scenario() -> tuple[int, int]:
        await proxy.mend()
        url = make_conninfo(pg_url, host="127.0.0.1", port=str(proxy.port))
        outcomes: list[bool] = []
        changed = asyncio.Event()  # set after every poll
        async with PgOrderStore.open(url, min_size=1, max_size=2, statement_timeout_s=0.5) as store:
            relay = OutboxRelay(store, SystemClock())

            async def polled() -> None:
                try:
                    await relay.run_once()
                except Exception:
                    outcomes.append(False)
                    changed.set()
                    raise
                outcomes.append(True)
                changed.set()

            async def until(check: Any) -> None:
                async with asyncio.timeout(30):
                    while not check():
                        changed.clear()
                        await changed.wait()

            stop = asyncio.Event()
            loop = asyncio.create_task(_every(0.05, polled, stop, "outbox relay"))
            await until(lambda: outcomes.count(True) >= 2)
            await proxy.cut()
            mark = len(outcomes)
            await until(lambda: outcomes[mark:].count(False) >= 4)
            failed = outcomes[mark:].count(False)
            await proxy.mend()
            await until(lambda: outcomes[-3:] == [True] * 3)
            stop.set()
            await loop
            await proxy.cut()
            return failed, outcomes.count(False)

    with caplog.at_level(logging.INFO, logger="orderflow"):
        failed, total = run(scenario())
    assert failed >= 4
    assert total >= failed
    relay_lines = [r for r in caplog.records if r.getMessage().startswith("outbox relay")]
    warnings = [r for r in relay_lines if r.levelno == logging.WARNING]
    recoveries = [r for r in relay_lines if r.levelno == logging.INFO]
    assert len(warnings) == 1, [r.getMessage() for r in relay_lines]
    assert not warnings[0].exc_info, "a database outage is no bug: no traceback"
    assert "\n" not in warnings[0].getMessage(), "one line"
    assert len(recoveries) == 1
    assert f"after {total} failed attempts" in recoveries[0].getMessage()
    assert not any(r.exc_info for r in caplog.records if r.name.startswith("orderflow"))

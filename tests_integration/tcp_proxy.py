"""A TCP proxy that can stop forwarding on demand: a hung database (or a network that stopped
carrying packets) for one test, without signalling the PostgreSQL server other tests share.

The proxy runs its own event loop in a thread, so it serves in-process code and real
processes alike. While paused it still accepts connections (as the kernel of a frozen server
does) but moves no byte in either direction; `resume()` lets the held bytes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from psycopg.conninfo import conninfo_to_dict, make_conninfo

CHUNK = 65536


class PausableProxy:
    """Forwards `listen_host:port` to `target`; `pause()` / `resume()` switch forwarding."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        listen_host: str = "127.0.0.1",
        *,
        target_socket: str | None = None,
    ) -> None:
        self.target = (target_host, target_port)
        self.target_socket = target_socket  # a unix socket to forward to instead of host:port
        self.listen_host = listen_host
        self.port = 0
        self.accepted = 0
        # Seconds each chunk from the server waits before it is forwarded (a slow link).
        self.reply_delay_s = 0.0
        # Armed by `lose_reply_to`: the answer to the next client message carrying the marker
        # is dropped and every connection cut.
        self._lose_reply_to: bytes | None = None
        self.replies_lost = 0
        self._loop = asyncio.new_event_loop()
        self._flowing = asyncio.Event()
        self._refusing = False
        self._writers: set[asyncio.StreamWriter] = set()
        # Each connection's task, so closing ends them all: a task left pending when the loop
        # closes is reported at garbage collection, which may run inside any other code.
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> PausableProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._thread.start()
        self._call(self._start())

    async def _start(self) -> None:
        self._flowing.set()
        self._server = await asyncio.start_server(self._handle, self.listen_host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def pause(self) -> None:
        """Stop forwarding: every connection, old and new, hangs."""
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def resume(self) -> None:
        """Forward again, held bytes first."""
        self._loop.call_soon_threadsafe(self._flowing.set)

    def cut(self, *, refuse: bool = False) -> None:
        """Close every open connection (both sides), as a peer that went away would; with
        `refuse`, also drop every new connection at once until `mend()` (a host that is gone)."""
        self._refusing = self._refusing or refuse
        self._call(self._abort_all())

    def lose_reply_to(self, marker: bytes) -> None:
        """The server's answer to the next client message containing `marker` never reaches
        the client: every connection is cut instead, as when a primary dies right after it
        committed. What the client sent was executed; the client cannot know it was."""
        self._lose_reply_to = marker

    def mend(self) -> None:
        """Accept and forward new connections again after `cut(refuse=True)`."""
        self._refusing = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def url(self, url: str) -> str:
        """`url` (a libpq URL or conninfo) with host and port pointing at this proxy."""
        return make_conninfo(url, host=self.listen_host, port=str(self.port))

    @classmethod
    def to_database(cls, url: str, listen_host: str = "127.0.0.1") -> PausableProxy:
        """A proxy (use it as a context manager) in front of the server `url` names."""
        params = conninfo_to_dict(url)
        host, port = str(params.get("host", "127.0.0.1")), int(params.get("port", 5432))
        if host.startswith("/"):  # a socket directory (the embedded server): libpq's file name
            return cls(host, port, listen_host, target_socket=f"{host}/.s.PGSQL.{port}")
        return cls(host, port, listen_host)

    # -- the loop's side ---------------------------------------------------------------------
    def _call(self, coro: object) -> None:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        future.result(timeout=10)

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self.accepted += 1
        if self._refusing:
            client_w.transport.abort()
            return
        self._writers.add(client_w)
        try:
            await self._flowing.wait()
            if self.target_socket is not None:
                server_r, server_w = await asyncio.open_unix_connection(self.target_socket)
            else:
                server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            self._writers.discard(client_w)
            client_w.close()
            return
        self._writers.add(server_w)
        armed: list[bool] = []  # this connection's reply is to be lost
        await asyncio.gather(
            self._pump(client_r, server_w, armed=armed),
            self._pump(server_r, client_w, replies=True, armed=armed),
            return_exceptions=True,
        )
        for writer in (client_w, server_w):
            self._writers.discard(writer)
            writer.close()

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        *,
        replies: bool = False,
        armed: list[bool] | None = None,
    ) -> None:
        armed = [] if armed is None else armed
        try:
            while data := await source.read(CHUNK):
                if replies and self.reply_delay_s:
                    await asyncio.sleep(self.reply_delay_s)
                marker = self._lose_reply_to
                if not replies and marker is not None and marker in data:
                    self._lose_reply_to = None
                    armed.append(True)
                elif replies and armed:
                    self.replies_lost += 1
                    await self._abort_all()
                    return
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        except ConnectionError:
            pass  # the other side went away (or was cut): this direction is over
        finally:
            # One side ended: end the other, so neither end waits on a half-open link.
            sink.close()

    async def _abort_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._abort_all()
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

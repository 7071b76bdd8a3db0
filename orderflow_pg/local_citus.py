"""A local Citus cluster for tests and the benchmark: a coordinator and N workers, each its own
PostgreSQL 15 on 127.0.0.1 (trust authentication, user `postgres`), under one directory.

Needs the Citus extension installed into the machine's PostgreSQL 15 (`citus.control` in its
extension directory; docs/citus.md says how). As root the nodes run as user `postgres`.
Command line (what the benchmark and a person use):

    python -m orderflow_pg.local_citus start DIR PORT [WORKERS]   # prints the coordinator's URL
    python -m orderflow_pg.local_citus stop DIR
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from orderflow_pg.embedded import process_exists

PG_BIN = Path("/usr/lib/postgresql/15/bin")
EXTENSION_DIRS = (Path("/usr/share/postgresql/15/extension"),)
# Which process made a cluster directory: a later session removes it once that one is gone.
OWNER_FILE = "owner.pid"


def citus_missing() -> str | None:
    """Why no local cluster can be started here, or None when one can."""
    if not (PG_BIN / "pg_ctl").exists():
        return f"no PostgreSQL 15 server binaries in {PG_BIN}"
    dirs = list(EXTENSION_DIRS)
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        share = subprocess.run(
            ["pg_config", "--sharedir"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirs.insert(0, Path(share) / "extension")
    if not any((d / "citus.control").exists() for d in dirs):
        return "the Citus extension is not installed in PostgreSQL 15 (no citus.control)"
    return None


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports on 127.0.0.1 that are free now."""
    for base in range(20000 + os.getpid() % 20000, 60000, count + 1):
        if all(_free(base + i) for i in range(count)):
            return base
    raise RuntimeError("no free block of ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.getuid() == 0 else command


@attrs.frozen
class Cluster:
    """A running local cluster: the coordinator's port first, then the workers'."""

    home: Path
    ports: tuple[int, ...]

    @property
    def coordinator(self) -> int:
        return self.ports[0]

    @property
    def workers(self) -> tuple[int, ...]:
        return self.ports[1:]

    def url(self, dbname: str = "postgres", port: int | None = None) -> str:
        """A URL of one node (the coordinator by default)."""
        return make_conninfo(
            host="127.0.0.1", port=port or self.coordinator, user="postgres", dbname=dbname
        )

    def node_dir(self, port: int) -> Path:
        return self.home / f"node-{port}"

    def create_database(self, name: str) -> str:
        """A database of this name on every node with Citus in it, the workers added to the
        coordinator's; the coordinator's URL of it."""
        for port in self.ports:
            with psycopg.connect(self.url(port=port), autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            with psycopg.connect(self.url(name, port), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION citus")
        with psycopg.connect(self.url(name), autocommit=True) as conn:
            conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (self.coordinator,))
            for port in self.workers:
                conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (port,))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        for port in self.ports:
            with psycopg.connect(self.url(port=port), autocommit=True) as conn:
                drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                conn.execute(drop.format(sql.Identifier(name)))

    def restart_node(self, port: int) -> None:
        """Stop one node at once (immediate: as a crash) and start it again."""
        _pg_ctl(self.node_dir(port), "stop", "-m", "immediate")
        _pg_ctl(self.node_dir(port), "start", "-l", f"{self.node_dir(port)}.log")

    def stop(self) -> None:
        stop(self.home)


def _pg_ctl(data: Path, *args: str) -> None:
    subprocess.run(
        _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-w", *args]),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def start(home: Path, port: int, workers: int = 2) -> Cluster:
    """Start (initialising if new) a coordinator on `port` and `workers` nodes after it."""
    home.mkdir(parents=True, exist_ok=True)
    (home / OWNER_FILE).write_text(str(os.getpid()))
    if os.getuid() == 0:
        shutil.chown(home, "postgres")
    cluster = Cluster(home, tuple(port + i for i in range(workers + 1)))
    for p in cluster.ports:
        data = cluster.node_dir(p)
        if not data.exists():
            subprocess.run(
                _as_postgres(
                    [str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
                ),
                check=True,
                stdout=subprocess.DEVNULL,
            )
            with (data / "postgresql.conf").open("a") as conf:
                conf.write(
                    "shared_preload_libraries = 'citus'\nmax_connections = 200\n"
                    f"listen_addresses = '127.0.0.1'\nport = {p}\n"
                    f"unix_socket_directories = '{home}'\nfsync = off\n"
                )
        _pg_ctl(data, "start", "-l", f"{data}.log")
    return cluster


def stop(home: Path) -> None:
    """Stop every node under `home` (nothing if none runs)."""
    for data in sorted(home.glob("node-*")):
        if data.is_dir() and (data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                _pg_ctl(data, "stop", "-m", "fast")


def remove_stale(parent: Path, prefix: str) -> None:
    """Stop and delete clusters under `parent` named `prefix*` whose making process is gone."""
    for home in parent.glob(f"{prefix}*"):
        owner = home / OWNER_FILE
        try:
            pid = int(owner.read_text())
        except (OSError, ValueError):
            continue
        if process_exists(pid):
            continue
        stop(home)
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def running(workers: int = 2) -> Iterator[Cluster]:
    """A fresh cluster under /tmp for as long as the block runs, then stopped and deleted."""
    remove_stale(Path("/tmp"), "orderflow-citus-")
    home = Path(f"/tmp/orderflow-citus-{os.getpid()}-{os.urandom(3).hex()}")
    cluster = start(home, free_ports(workers + 1), workers)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


def _main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "start":
        workers = int(argv[3]) if len(argv) > 3 else 2
        cluster = start(Path(argv[1]), int(argv[2]), workers)
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
        for port in cluster.workers:
            with psycopg.connect(cluster.url(port=port), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            conn.execute(
                "SELECT citus_set_coordinator_host('127.0.0.1', %s)", (cluster.coordinator,)
            )
            for port in cluster.workers:
                conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (port,))
        print(cluster.url())
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        stop(Path(argv[1]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

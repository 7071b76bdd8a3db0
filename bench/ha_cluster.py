"""A local high-availability PostgreSQL for tests and the bench: etcd, and Patroni managing two
PostgreSQL 15 nodes on 127.0.0.1 with synchronous replication.

    python -m bench.ha_cluster start /var/tmp/orderflow-ha    # prints the connection string
    python -m bench.ha_cluster stop /var/tmp/orderflow-ha

(`scripts/ha-cluster.sh` wraps the same.) The layout is a production one shrunk onto one host:
one etcd member (the distributed configuration store Patroni elects the leader in; run three
on three machines), one Patroni per PostgreSQL node (each node its own data directory, port and
REST API), `synchronous_mode: true` (a commit returns once the synchronous standby has it, so
a failover loses no acknowledged commit). For real machines: three etcd members, nodes on
their own hosts (`connect_address` their own addresses), passwords and `pg_hba` rules for the
application and replication users instead of `trust`, `ttl`/`loop_wait` at Patroni's defaults
(30 s / 10 s; here 10 s / 1 s so tests fail over in seconds).

Clients use a multi-host connection string with `target_session_attrs=read-write`: libpq tries
the hosts in turn and keeps the one that accepts writes, so after a failover every new
connection finds the new primary by itself. As root, Patroni and PostgreSQL run as `postgres`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SCOPE = "orderflow-ha"
START_TIMEOUT_S = 120.0


def available() -> str | None:
    """None when the cluster can run here, else why not (a skip reason)."""
    for binary in ("etcd", "patroni"):
        if shutil.which(binary) is None:
            return f"{binary} is not installed (apt-get install -y patroni etcd-server)"
    if not (PG_BIN / "postgres").exists():
        return f"PostgreSQL 15 is not installed ({PG_BIN})"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres user for the nodes to run as"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


class Node:
    """One Patroni-managed PostgreSQL."""

    def __init__(self, cluster: HaCluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.pg_port = _free_port()
        self.rest_port = _free_port()
        self.data_dir = cluster.dir / name
        self.config = cluster.dir / f"{name}.yml"
        self.log = cluster.dir / f"{name}.log"
        self.patroni: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.pg_port}"

    def write_config(self) -> None:
        c = self.cluster
        lines = f"""
scope: {SCOPE}
namespace: /orderflow/
name: {self.name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:{self.rest_port}
  connect_address: 127.0.0.1:{self.rest_port}
etcd3:
  hosts: 127.0.0.1:{c.etcd_port}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: {"true" if c.strict else "false"}
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_log_hints: "on"
        max_connections: 200
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
  pg_hba:
    - local all all trust
    - host replication all 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{self.pg_port}
  connect_address: 127.0.0.1:{self.pg_port}
  data_dir: {self.data_dir}
  bin_dir: {PG_BIN}
  pgpass: {c.dir / f"{self.name}.pgpass"}
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: replicator
      password: replicator
    rewind:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: '{c.dir}'
"""
        self.config.write_text(lines.lstrip())
        c.chown(self.config)

    def start(self) -> None:
        self.write_config()
        with self.log.open("ab") as out:
            self.patroni = subprocess.Popen(
                _as_postgres(["patroni", str(self.config)]),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL Patroni and the postmaster of this node (a machine that died)."""
        if self.patroni is not None and self.patroni.poll() is None:
            os.killpg(self.patroni.pid, signal.SIGKILL)
            self.patroni.wait(timeout=10)
        pid = self.postmaster_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # The backends of a killed postmaster notice (its death pipe) and exit by themselves.

    def kill_postmaster(self) -> int | None:
        """SIGKILL only the postmaster (Patroni lives on and restarts or replaces it)."""
        pid = self.postmaster_pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        postmaster = self.postmaster_pid()
        if self.patroni is not None and self.patroni.poll() is None:
            os.killpg(self.patroni.pid, signal.SIGTERM)  # Patroni stops PostgreSQL cleanly
            try:
                self.patroni.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
        if postmaster is not None:
            stop_postmaster(postmaster)

    def rest(self, path: str, body: object | None = None, method: str | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.rest_port}{path}",
            data=data,
            method=method or ("POST" if data is not None else "GET"),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as reply:
            raw = reply.read()
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")


class HaCluster:
    """etcd + Patroni on two PostgreSQL 15 nodes, in `directory` (made and removed here)."""

    def __init__(self, directory: Path | str, *, nodes: int = 2, strict: bool = False) -> None:
        self.dir = Path(directory)
        self.strict = strict
        self.etcd_port = _free_port()
        self.etcd_peer_port = _free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.nodes = [Node(self, f"pg{i}") for i in range(nodes)]

    def chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def url(self, dbname: str = "postgres") -> str:
        """Every node, libpq keeping the one that takes writes."""
        hosts = ",".join(n.host for n in self.nodes)
        return f"postgresql://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def node_url(self, node: Node, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@{node.host}/{dbname}"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)
        self.chown(self.dir)
        etcd_data = self.dir / "etcd"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        with (self.dir / "etcd.log").open("ab") as out:
            self.etcd = subprocess.Popen(
                [
                    "etcd",
                    "--name=etcd0",
                    f"--data-dir={etcd_data}",
                    f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
                    f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=etcd0={peer}",
                    "--initial-cluster-state=new",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._until(self._etcd_up, "etcd answers")
        for node in self.nodes:
            node.start()
        self.wait_healthy()

    def _etcd_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=2):
                return True
        except OSError:
            return False

    def _until(self, check: Any, what: str, timeout_s: float = START_TIMEOUT_S) -> float:
        started = time.monotonic()
        while not check():
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"HA cluster: {what} not within {timeout_s:g} s\n{self.logs()}")
            time.sleep(0.2)  # polling with a deadline
        return time.monotonic() - started

    def members(self) -> list[dict[str, Any]]:
        for node in self.nodes:
            try:
                return list(node.rest("/cluster")["members"])
            except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
                continue
        return []

    def leader(self) -> Node | None:
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return next(n for n in self.nodes if n.name == member["name"])
        return None

    def healthy(self) -> bool:
        """A running leader and every other node a streaming synchronous standby."""
        members = self.members()
        if len(members) != len(self.nodes):
            return False
        leaders = [m for m in members if m.get("role") == "leader" and m.get("state") == "running"]
        standbys = [
            m
            for m in members
            if m.get("role") == "sync_standby" and m.get("state") in ("running", "streaming")
        ]
        return len(leaders) == 1 and len(standbys) == len(self.nodes) - 1

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> float:
        return self._until(self.healthy, "a leader and a synchronous standby", timeout_s)

    def switchover(self) -> Node:
        """A clean switchover to the standby; the new leader once it leads."""
        leader = self.leader()
        assert leader is not None, "no leader to switch over from"
        candidate = next(n for n in self.nodes if n is not leader)
        leader.rest("/switchover", {"leader": leader.name, "candidate": candidate.name})
        self._until(lambda: self.leader() is candidate, "the switchover", 60)
        return candidate

    def set_strict(self, strict: bool) -> None:
        """synchronous_mode_strict on or off (Patroni's dynamic configuration): strict, a
        primary without a synchronous standby refuses to complete commits instead of going on
        alone; nothing acknowledged can then be lost with it."""
        node = self.leader() or self.nodes[0]
        node.rest("/config", {"synchronous_mode_strict": strict}, method="PATCH")
        self.strict = strict

    def standby(self) -> Node | None:
        leader = self.leader()
        return next((n for n in self.nodes if n is not leader), None) if leader else None

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:]
            for path in sorted(self.dir.glob("*.log"))
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self.etcd is not None and self.etcd.poll() is None:
            os.killpg(self.etcd.pid, signal.SIGTERM)
            try:
                self.etcd.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.etcd.pid, signal.SIGKILL)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def state(self) -> dict[str, Any]:
        return {
            "etcd_port": self.etcd_port,
            "url": self.url(),
            "nodes": [
                {"name": n.name, "pg_port": n.pg_port, "rest_port": n.rest_port}
                for n in self.nodes
            ],
            "pids": {
                "etcd": self.etcd.pid if self.etcd else None,
                **{n.name: n.patroni.pid if n.patroni else None for n in self.nodes},
            },
        }

    def __enter__(self) -> HaCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.remove()


def stop_postmaster(pid: int, timeout_s: float = 30.0) -> None:
    """A fast shutdown (SIGINT) of a postmaster Patroni left behind; SIGKILL after timeout_s."""
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)  # waiting for it to end, with a deadline
    os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    """`start DIR` (prints the connection string; the processes keep running) or `stop DIR`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("start", "stop"):
        print("usage: python -m bench.ha_cluster start|stop DIRECTORY", file=sys.stderr)
        return 2
    command, directory = args
    state_file = Path(directory) / "cluster.json"
    if command == "start":
        why = available()
        if why is not None:
            print(f"cannot start: {why}", file=sys.stderr)
            return 1
        cluster = HaCluster(directory)
        cluster.start()
        state_file.write_text(json.dumps(cluster.state(), indent=2))
        print(cluster.url())
        return 0
    state = json.loads(state_file.read_text())
    postmasters = [
        int(pid_file.read_text().split()[0])
        for pid_file in Path(directory).glob("pg*/postmaster.pid")
        if pid_file.read_text().split()
    ]
    for name, pid in reversed(list(state["pids"].items())):
        if pid is None:
            continue
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)  # waiting for the process to end, with a deadline
        print(f"stopped {name}")
    for pid in postmasters:
        stop_postmaster(pid)
    shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The real command line: serve on the embedded database, workers sharing work, SIGTERM,
bad configuration, and a restart after SIGKILL."""

from __future__ import annotations

import asyncio
import os
import pty
import re
import select
import signal
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from processes import (
    CUSTOMER_TOKEN,
    Proc,
    base_env,
    eventually,
    free_port,
    http,
    run_cli,
)

from orderflow import cli
from orderflow.config import load_settings
from orderflow_core import Item, OrderService, Principal, Role, SystemClock
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
AUTH = {"Authorization": f"Bearer {CUSTOMER_TOKEN}"}
ORDER = {"items": [{"sku": "book", "quantity": 1, "unit_price_minor": 990}], "currency": "RUB"}


def _serve(procs: list[Proc], home: Path) -> tuple[Proc, str]:
    env = base_env(
        ORDERFLOW_HOME=str(home), ORDERFLOW_HTTP_PORT="0", ORDERFLOW_MOCKS_PORT=str(free_port())
    )
    proc = Proc("serve", env)
    procs.append(proc)
    api = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
    eventually(lambda: http("GET", f"{api}/readyz")[0] == 200, what="/readyz")
    return proc, api


def _create(api: str, key: str) -> dict[str, object]:
    """POST an order as a careful client does: a 503 (the request's deadline passed on a busy
    machine) is answered with Retry-After and repeated with the same key; anything else but 202
    fails the test."""
    accepted: dict[str, object] = {}

    def posted() -> bool:
        headers = {**AUTH, "Idempotency-Key": key}
        status, body = http("POST", f"{api}/api/v1/orders", ORDER, **headers)
        assert status in (202, 503), (status, body)
        if status == 202:
            accepted.update(body)
        return status == 202

    eventually(posted, what=f"order {key} accepted")
    return accepted


def _state(api: str, order_id: str) -> str:
    status, body = http("GET", f"{api}/api/v1/orders/{order_id}", **AUTH)
    assert status == 200, body
    return str(body["state"])


def test_serve_on_the_embedded_database_becomes_ready_and_ships_an_order(
    procs: list[Proc], tmp_path: Path
) -> None:
    proc, api = _serve(procs, tmp_path / "home")
    order = _create(api, "cli-1")
    eventually(lambda: _state(api, str(order["order_id"])) == "shipped", what="shipped")
    assert proc.terminate() == 0


def test_a_restart_after_sigkill_reuses_the_embedded_database(
    procs: list[Proc], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    first, api = _serve(procs, home)
    order = _create(api, "k")
    eventually(lambda: _state(api, str(order["order_id"])) == "shipped", what="shipped")
    first.kill()
    second, api = _serve(procs, home)
    assert _state(api, str(order["order_id"])) == "shipped"
    assert second.terminate() == 0
    pid_file = home / "pgdata" / "postmaster.pid"
    eventually(lambda: not pid_file.exists(), timeout_s=30, what="embedded server stopped")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ORDERFLOW_LEASE_S", "soon"),
        ("ORDERFLOW_HTTP_PORT", "99999"),
        ("ORDERFLOW_RETRY_DELAYS_S", "1,x"),
        ("ORDERFLOW_PAYMENTS_URL", "ftp://pay"),
        ("ORDERFLOW_MAX_CONCURRENT_STEPS", "0"),
        ("ORDERFLOW_HEARTBEAT_S", "45"),
        ("ORDERFLOW_TOKEN_CACHE_S", "-1"),
        ("ORDERFLOW_PROCESS_VERSION", "3"),
    ],
)
def test_a_bad_configuration_value_stops_start_up_with_one_line_naming_it(
    procs: list[Proc], variable: str, value: str
) -> None:
    proc = Proc("serve", base_env(**{variable: value}))
    procs.append(proc)
    assert proc.popen.wait(timeout=60) == 2
    line = proc.wait_for(variable, timeout_s=5).string
    assert line.startswith("orderflow: configuration error:")
    assert len([x for x in proc.lines if x.strip()]) == 1


def _create_orders(url: str, count: int) -> list[uuid.UUID]:
    async def create() -> list[uuid.UUID]:
        async with PgOrderStore.open(url) as store:
            # Version 1: three steps per order (the attempt count below).
            service = OrderService(store, SystemClock(), store.users, process_version=1)
            customer = Principal("order_customer", Role.CUSTOMER)
            ids = []
            for n in range(count):
                view, _ = await service.create_order(
                    customer, f"bulk-{n}", [Item("sku", 1, 100)], "RUB"
                )
                ids.append(view.aggregate.order.order_id)
            return ids

    return asyncio.run(create())


def _count(url: str, query: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return int(row[0])


def _worker_env(url: str, mocks_port: int, worker_id: str, **extra: str) -> dict[str, str]:
    return base_env(
        ORDERFLOW_DATABASE_URL=url,
        ORDERFLOW_MOCKS_PORT=str(mocks_port),
        ORDERFLOW_WORKER_ID=worker_id,
        **extra,
    )


def test_two_workers_share_the_steps_of_a_hundred_orders(procs: list[Proc], pg_url: str) -> None:
    mocks_port = free_port()
    mocks = Proc("mocks", base_env(ORDERFLOW_MOCKS_PORT=str(mocks_port)))
    procs.append(mocks)
    mocks.wait_for("listening")
    _create_orders(pg_url, 100)
    procs.extend(
        Proc("worker", _worker_env(pg_url, mocks_port, name, ORDERFLOW_MAX_CONCURRENT_STEPS="5"))
        for name in ("worker-a", "worker-b")
    )
    shipped = "SELECT count(*) FROM orders WHERE state = 'shipped'"
    eventually(lambda: _count(pg_url, shipped) == 100, timeout_s=120, what="100 shipped")
    for name in ("worker-a", "worker-b"):
        ran = _count(pg_url, f"SELECT count(*) FROM step_attempts WHERE worker = '{name}'")
        assert ran > 0, f"{name} ran no step"
    assert _count(pg_url, "SELECT count(*) FROM step_attempts") == 300
    for proc in procs[1:]:
        assert proc.terminate() == 0


def test_sigterm_finishes_in_flight_steps_and_exits_zero(procs: list[Proc], pg_url: str) -> None:
    mocks_port = free_port()
    mocks = Proc(
        "mocks", base_env(ORDERFLOW_MOCKS_PORT=str(mocks_port), ORDERFLOW_MOCKS_LATENCY_MS="300")
    )
    procs.append(mocks)
    mocks.wait_for("listening")
    _create_orders(pg_url, 20)
    worker = Proc("worker", _worker_env(pg_url, mocks_port, "worker-t"))
    procs.append(worker)
    started = "SELECT count(*) FROM step_attempts"
    eventually(lambda: _count(pg_url, started) >= 5, what="steps in flight")
    assert worker.terminate() == 0
    live = (
        "SELECT count(*) FROM workflow_steps WHERE status = 'running' AND lease_owner = 'worker-t'"
    )
    assert _count(pg_url, live) == 0
    unfinished = "SELECT count(*) FROM step_attempts WHERE finished_at IS NULL"
    assert _count(pg_url, unfinished) == 0


def _postmaster(pgdata: Path) -> int:
    """The pid of the embedded server running on `pgdata` (first line of postmaster.pid)."""
    return int((pgdata / "postmaster.pid").read_text().split()[0])


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting to be reaped is not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_sighup_stops_serve_cleanly_and_a_sigkilled_owners_server_is_stopped_after_restart(
    procs: list[Proc], tmp_path: Path
) -> None:
    # Closing the terminal sends SIGHUP. A SIGKILLed owner leaves its embedded server running;
    # the next start adopts it, and the SIGHUP stop of that start stops it.
    home = tmp_path / "home"
    pgdata = home / "pgdata"
    first, _ = _serve(procs, home)
    first.kill()
    orphan = _postmaster(pgdata)
    assert _running(orphan)  # what the restart has to clean up
    second, api = _serve(procs, home)
    assert _postmaster(pgdata) == orphan  # adopted, not a second server on the same data
    _, order = http("POST", f"{api}/api/v1/orders", ORDER, **AUTH, **{"Idempotency-Key": "hup"})
    second.popen.send_signal(signal.SIGHUP)
    assert second.popen.wait(timeout=60) == 0
    second.wait_for(r"^orderflow stopped: ", timeout_s=5)
    assert not (pgdata / "postmaster.pid").exists()
    eventually(lambda: not _running(orphan), timeout_s=30, what="the embedded server's exit")
    with pytest.raises(OSError):  # nothing listens on the API's port any more
        http("GET", f"{api}/healthz")
    assert order["order_id"]


def test_commands_in_a_subdirectory_use_the_projects_embedded_database_and_elsewhere_refuse(
    procs: list[Proc], tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    deep = project / "src" / "deep"
    elsewhere = tmp_path / "elsewhere"
    deep.mkdir(parents=True)
    elsewhere.mkdir()
    above = [p for p in tmp_path.parents if (p / ".orderflow").is_dir()]
    if above:  # a stray one above the test's folder would be found, as it should be
        pytest.skip(f"{above[0]}/.orderflow exists, so no folder under {tmp_path} is outside")
    env = base_env(ORDERFLOW_HTTP_PORT="0", ORDERFLOW_MOCKS_PORT=str(free_port()))
    proc = Proc("serve", env, cwd=project)  # no ORDERFLOW_HOME: ./.orderflow of the project
    procs.append(proc)
    api = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
    said = proc.wait_for(r"^database: embedded under (\S+)").group(1)
    assert Path(said) == project / ".orderflow"
    assert any(f"creating an embedded PostgreSQL under {said}" in line for line in proc.lines)

    added = run_cli(["user", "add", "bob", "--role", "operator"], env, cwd=deep)
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    # The running service sees bob: the command found the project's database from below.
    status, _ = http("GET", f"{api}/api/v1/events?after=0&limit=1", Authorization=f"Bearer {token}")
    assert status == 200
    assert not (deep / ".orderflow").exists()

    refused = run_cli(["user", "add", "carol", "--role", "operator"], env, cwd=elsewhere)
    assert refused.returncode == 2
    assert refused.stdout == ""
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("orderflow user add: no embedded database under "), line
    assert str(elsewhere / ".orderflow") in line
    assert "ORDERFLOW_HOME" in line
    assert not (elsewhere / ".orderflow").exists()  # no second, empty database made
    assert proc.terminate() == 0


def _read_until(fd: int, pattern: str, timeout_s: float) -> str:
    """What the terminal shows until a line matches `pattern` (a deadline, no sleep)."""
    seen = ""
    deadline = time.monotonic() + timeout_s
    while not re.search(pattern, seen, re.MULTILINE):
        left = deadline - time.monotonic()
        assert left > 0, f"no {pattern!r} on the terminal; it showed:\n{seen}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 65536).decode(errors="replace")
    return seen


def test_closing_the_terminal_stops_serve_and_its_embedded_server(tmp_path: Path) -> None:
    # A real terminal: serve runs on a pseudo-terminal as its session's controlling terminal;
    # closing the terminal's side (what closing the window does) makes the kernel send SIGHUP.
    home = tmp_path / "home"
    env = base_env(
        ORDERFLOW_HOME=str(home), ORDERFLOW_HTTP_PORT="0", ORDERFLOW_MOCKS_PORT=str(free_port())
    )
    for variable in ("ORDERFLOW_CUSTOMER_TOKEN", "ORDERFLOW_OPERATOR_TOKEN"):
        del env[variable]  # a newcomer's first start: tokens generated and shown once
    pid, terminal = pty.fork()
    if pid == 0:  # the child: becomes `orderflow serve` at once
        os.execve(sys.executable, [sys.executable, "-m", "orderflow.cli", "serve"], env)
    try:
        shown = _read_until(terminal, r"^database: embedded under ", timeout_s=120)
        assert "orderflow API: http://" in shown
        # The banner says where the console is and where the operator's token came from.
        assert re.search(r"^operator console: http://\S+/console ", shown, re.MULTILINE)
        assert "generated token for order_operator (shown once" in shown
        assert "operator token: printed above at the first start" in shown
        postmaster = _postmaster(home / "pgdata")
    finally:
        os.close(terminal)  # the terminal goes away
    deadline = time.monotonic() + 60
    while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0:
        assert time.monotonic() < deadline, "serve did not stop when its terminal closed"
        select.select([], [], [], 0.05)  # a polling interval, not a wait for a condition
    status = ended[1]
    assert os.WIFEXITED(status), f"serve died of signal {os.WTERMSIG(status)}"
    assert os.WEXITSTATUS(status) == 0
    assert not (home / "pgdata" / "postmaster.pid").exists()
    eventually(lambda: not _running(postmaster), timeout_s=30, what="the embedded server's exit")


class _GoneTerminal:
    """A stdout whose terminal went away: every write fails as a closed pty's does (EIO)."""

    def write(self, text: str) -> int:
        raise OSError(5, "Input/output error")

    def flush(self) -> None:
        raise OSError(5, "Input/output error")


def test_a_terminal_gone_while_the_banner_prints_is_no_failed_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Closing the window while `serve` prints its banner (a run of CI closed it between the
    banner's text and its final newline) must leave `serve` running, for the SIGHUP that follows
    to stop it gracefully: before, the failed write ended it with exit 1."""
    monkeypatch.setattr(sys, "stdout", _GoneTerminal())
    settings = load_settings({"ORDERFLOW_HOME": "/tmp/orderflow-banner-test"})
    cli._announce("http://127.0.0.1:1", "http://127.0.0.1:2", settings)  # raises nothing
    dropped = sys.stdout
    assert not isinstance(dropped, _GoneTerminal)  # the rest of the output is dropped
    cli._say("orderflow stopped: nothing in flight")
    dropped.close()

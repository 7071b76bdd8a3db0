"""Starting and stopping the processes under test: the real CLI, or the in-process fallback.

`command_for` is the one place that knows how a role becomes a command line.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).absolute().parent.parent  # not resolved: an A/B checkout may link bench in
LOGS = REPO / "bench" / "results" / "logs"
STOP_GRACE_S = 15.0


def cli_path() -> str | None:
    """The `orderflow` entry point next to this interpreter, if it exists and has `worker`."""
    found = shutil.which("orderflow", path=str(Path(sys.executable).parent))
    if found is None:
        return None
    probe = subprocess.run(
        [found, "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    return found if probe.returncode == 0 and "worker" in probe.stdout else None


def choose_launcher(wanted: str) -> str:
    """`cli` when asked for or available (auto); `fallback` otherwise."""
    if wanted == "auto":
        return "cli" if cli_path() else "fallback"
    if wanted == "cli" and cli_path() is None:
        raise SystemExit("--launcher cli: `orderflow` with a `worker` command is not installed")
    return wanted


def command_for(launcher: str, role: str) -> list[str]:
    """The command line that runs one role: `api`, `worker`, `mocks`, `migrate` or `seed`."""
    if launcher == "cli":
        return [str(cli_path()), role]
    return [sys.executable, "-m", "bench.fallback_node", role]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _status_kib(pid: int, field: str) -> int:
    """One `kB` field of /proc/PID/status; 0 once the process is gone (or is a zombie, which
    has no memory lines), so a reading never fails the run."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_rss_kib(pid: int) -> int:
    """VmHWM: the highest resident set the process has had, from /proc."""
    return _status_kib(pid, "VmHWM")


def current_rss_kib(pid: int) -> int:
    """VmRSS: the resident set now. The peak only ever rises, so growth over time (a leak) is
    read from a series of these instead."""
    return _status_kib(pid, "VmRSS")


def node_env(env: dict[str, str]) -> dict[str, str]:
    """A started process's environment: ours, `env`, and this checkout first on the import
    path (the `orderflow` script of an editable install would otherwise import the checkout
    it was installed from, not the one an A/B run points at)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **env, "PYTHONPATH": path}


class Node:
    """One started process: its role, its log, its RSS (now and peak); stopped with SIGTERM."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        LOGS.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.log_path = LOGS / f"{name}.log"
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                argv, env=node_env(env), cwd=REPO, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def peak_rss_mib(self) -> float:
        return round(peak_rss_kib(self.pid) / 1024, 1)

    def rss_mib(self) -> float:
        return round(current_rss_kib(self.pid) / 1024, 1)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text()[-2000:]
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")

    def stop(self) -> int | None:
        """SIGTERM, wait for a clean exit; SIGKILL after the grace period. The exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_GRACE_S)
        return self.proc.returncode


async def wait_for_port(node: Node, port: int, timeout_s: float = 30.0) -> None:
    """Until 127.0.0.1:port accepts a connection (the node started listening)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        node.check_alive()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise RuntimeError(f"{node.name} did not listen on port {port} within {timeout_s:g} s")


def run_once(launcher: str, role: str, env: dict[str, str]) -> str:
    """Run a one-shot command (`migrate`, `seed`) to completion; its output."""
    done = subprocess.run(
        command_for(launcher, role),
        env=node_env(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{role} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout

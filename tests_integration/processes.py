"""Real `orderflow` processes for the CLI tests: start, read their output, stop, kill."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

CUSTOMER_TOKEN = "customer-token-for-tests-0001"
OPERATOR_TOKEN = "operator-token-for-tests-0001"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDERFLOW_")}
    env.update(ORDERFLOW_CUSTOMER_TOKEN=CUSTOMER_TOKEN, ORDERFLOW_OPERATOR_TOKEN=OPERATOR_TOKEN)
    env.update(extra)
    return env


class Proc:
    """A running `orderflow COMMAND` whose output lines are collected as they come."""

    def __init__(
        self,
        command: str,
        env: dict[str, str],
        prefix: Sequence[str] = (),
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        # `prefix` wraps the command, e.g. `ip netns exec NAME` to run it in a namespace.
        self.popen = subprocess.Popen(
            [*prefix, sys.executable, "-m", "orderflow.cli", command],
            env=env,
            cwd=cwd,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._queue.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout_s: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        regex = re.compile(pattern)
        for line in self.lines:
            if found := regex.search(line):
                return found
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.lines.append(line)
            if found := regex.search(line):
                return found
        raise AssertionError(f"no line matching {pattern!r}; output:\n" + "\n".join(self.lines))

    def terminate(self, timeout_s: float = 30.0) -> int:
        self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout=timeout_s)

    def kill(self) -> None:
        self.popen.kill()
        self.popen.wait(timeout=10)

    def close(self) -> None:
        if self.popen.poll() is None:
            self.kill()
        if self.popen.stdout is not None:
            self.popen.stdout.close()


def serve_as_documented(
    procs: list[Proc], start_block: str, pg_url: str
) -> tuple[int, int, dict[str, str]]:
    """`orderflow serve` started the way a documented shell block starts it: with the tokens it
    exports, on free ports for the API and the simulated services, reconciliation giving up
    after 0.1 s delays instead of 1, 2, 4, 8 s (the same path, sooner). Returns both ports and
    the exported variables."""
    assert "orderflow serve" in start_block
    exported = dict(re.findall(r"\b(ORDERFLOW_\w+)=(\S+)", start_block))
    assert set(exported) == {"ORDERFLOW_CUSTOMER_TOKEN", "ORDERFLOW_OPERATOR_TOKEN"}
    api_port, mocks_port = free_port(), free_port()
    env = base_env(
        **exported,
        ORDERFLOW_DATABASE_URL=pg_url,
        ORDERFLOW_HTTP_PORT=str(api_port),
        ORDERFLOW_MOCKS_PORT=str(mocks_port),
        ORDERFLOW_RETRY_DELAYS_S="0.1,0.1,0.1,0.1",
    )
    proc = Proc("serve", env)
    procs.append(proc)
    proc.wait_for(r"orderflow API: http://\S+/api/v1", timeout_s=120)
    return api_port, mocks_port, exported


def run_cli(
    args: list[str],
    env: dict[str, str],
    timeout_s: float = 60.0,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m orderflow ARGS` (what the `orderflow` script runs) to its end."""
    return subprocess.run(
        [sys.executable, "-m", "orderflow", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def output_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The non-empty lines a finished command wrote to stdout and stderr."""
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def http(method: str, url: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def eventually(check: Callable[[], bool], timeout_s: float = 60.0, what: str = "") -> None:
    """Poll `check` until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)  # a polling interval, not a wait for a condition
    raise AssertionError(f"timed out waiting for {what or check}")

"""`orderflow user …` run as a real process, and a small HTTP client that names the caller."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

from processes import base_env


def user_cli(pg_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `orderflow user ARGS` against `pg_url`; stdout and stderr kept apart."""
    return orderflow(pg_url, "user", *args, **env)


def orderflow(pg_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `orderflow ARGS` against `pg_url` to its end; stdout and stderr kept apart."""
    return subprocess.run(
        [sys.executable, "-m", "orderflow.cli", *args],
        env=base_env(ORDERFLOW_DATABASE_URL=pg_url, **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def new_user(pg_url: str, name: str, role: str) -> str:
    """Add a user with the real command; its token."""
    done = user_cli(pg_url, "add", name, "--role", role)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def call(
    method: str,
    url: str,
    token: str | None,
    body: Any = None,
    key: str | None = None,
) -> tuple[int, Any, dict[str, str]]:
    """One request as the holder of `token`: status, parsed body, headers."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if key is not None:
        request.add_header("Idempotency-Key", key)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read() or b"null"), dict(reply.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null"), dict(error.headers)

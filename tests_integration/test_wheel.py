"""The release a user installs: the built wheel, installed alone into a fresh virtual
environment (not the checkout, not an editable install), answers `orderflow --help` and
`--version`, applies every migration from the SQL files inside it, and serves the operator
console's assets from inside it.

The wheel is `ORDERFLOW_TEST_WHEEL` when set (`.ci/run` passes the one `python -m build` made),
else built here with `pip wheel`. It is installed with `--no-deps`; its dependencies come from
the running interpreter's site-packages through a `.pth` line (installing them afresh would
fetch ~20 packages per run), which adds their folder to the path without running the editable
install's hooks in it, so `orderflow` can only come from the wheel — the test checks that it did.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from processes import base_env, free_port

import orderflow

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("ORDERFLOW_TEST_WHEEL")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(ROOT), "-w", str(out)],
        check=True,
        timeout=300,
    )
    (built,) = glob.glob(str(out / "*.whl"))  # the distribution's name is not assumed
    return Path(built)


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = home / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )  # fmt: skip
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    deps = sysconfig.get_paths()["purelib"]
    (Path(site) / "zz_orderflow_test_deps.pth").write_text(deps + "\n")
    return home


def run(
    venv: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "orderflow"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=venv,  # not the checkout: nothing of it is importable from here
        env=env or base_env(),
    )


def test_the_wheel_is_what_runs(venv: Path) -> None:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import orderflow, orderflow_pg.migrations as m; "
         "print(orderflow.__file__); print(m.__file__)"],
        capture_output=True, text=True, check=True, cwd=venv,
    )  # fmt: skip
    for path in done.stdout.split():
        assert path.startswith(str(venv)), path


def test_the_installed_command_answers_help_and_version(venv: Path) -> None:
    helped = run(venv, "--help")
    assert helped.returncode == 0, helped.stderr
    for command in ("serve", "worker", "api", "migrate", "seed", "mocks", "user"):
        assert command in helped.stdout
    version = run(venv, "--version")
    assert version.stdout.strip() == f"orderflow {orderflow.__version__}"


@pytest.fixture
def api(venv: Path, fresh_database_url: str) -> Iterator[tuple[str, str]]:
    """`orderflow api` from the wheel on an empty database: (base URL, its output so far)."""
    port = free_port()
    env = base_env(ORDERFLOW_DATABASE_URL=fresh_database_url, ORDERFLOW_HTTP_PORT=str(port))
    proc = subprocess.Popen(
        [str(venv / "bin" / "orderflow"), "api"],
        env=env, cwd=venv, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "orderflow API: " in line:
                break
        assert any("orderflow API: " in line for line in lines), "".join(lines)
        yield f"http://127.0.0.1:{port}", "".join(lines)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()


@pytest.mark.postgres
def test_the_wheel_applies_every_migration_and_serves_the_console(
    api: tuple[str, str], fresh_database_url: str
) -> None:
    base, output = api
    shipped = sorted(
        p.stem for p in (ROOT / "migrations").glob("*.sql") if re.match(r"\d{4}_", p.name)
    )
    applied = [name.removesuffix(".sql") for name in re.findall(r"applied migration (\S+)", output)]
    assert applied == shipped, output
    with psycopg.connect(fresh_database_url) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables").fetchall()}
    assert {"orders", "workflow_steps"} <= tables
    for path, kind in (("/console", "text/html"), ("/console/console.js", "javascript"),
                       ("/console/console.css", "text/css")):  # fmt: skip
        with urllib.request.urlopen(base + path, timeout=10) as answer:
            assert answer.status == 200
            assert kind in answer.headers["Content-Type"]
            assert len(answer.read()) > 100

"""A new user's first mistakes, with real processes: a database that refuses, a bad or misspelt
variable, a port in use, a bare install, `--version`. Each is one line that says what to change,
never a traceback, never a password or a token."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import psycopg
import pytest
from processes import Proc, base_env, free_port, output_lines, run_cli
from psycopg.conninfo import conninfo_to_dict, make_conninfo

PASSWORD = "pw-Never-Shown-7431"


def _assert_one_clean_line(lines: list[str], *wanted: str) -> str:
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("orderflow: "), line
    for text in wanted:
        assert text in line, line
    for internal in ("Traceback", "invalid literal", "could not convert", "Error:", PASSWORD):
        assert internal not in line, line
    return line


def _database_urls(admin_url: str) -> dict[str, str]:
    params = conninfo_to_dict(admin_url)
    port = str(params.get("port") or "5432")
    user, dbname = str(params.get("user") or "postgres"), str(params.get("dbname") or "postgres")
    closed = free_port()  # nothing listens there once the probe socket is closed
    return {
        "refused": f"postgresql://{user}:{PASSWORD}@127.0.0.1:{closed}/{dbname}",
        "unknown role": make_conninfo(admin_url, user="no_such_role_x", password=PASSWORD),
        "unknown database": make_conninfo(admin_url, dbname="no_such_db_x", password=PASSWORD),
        # Built from the admin URL, so they keep its host: a TCP address or a unix socket's folder.
        "port out of range": make_conninfo(admin_url, port="99999", password=PASSWORD),
        "port not a number": make_conninfo(admin_url, port=f"{port}x", password=PASSWORD),
    }


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("refused", "Connection refused"),
        ("unknown role", 'role "no_such_role_x" does not exist'),
        ("unknown database", 'database "no_such_db_x" does not exist'),
        ("port out of range", "is not a TCP port"),
        ("port not a number", "is not a TCP port"),
    ],
)
@pytest.mark.parametrize("command", ["migrate", "serve"])
def test_a_database_that_cannot_be_used_is_one_line_naming_the_variable_and_exit_2(
    admin_url: str, command: str, case: str, reason: str
) -> None:
    env = base_env(ORDERFLOW_DATABASE_URL=_database_urls(admin_url)[case])
    done = run_cli([command], env)
    assert done.returncode == 2, done.stderr
    _assert_one_clean_line(output_lines(done), "ORDERFLOW_DATABASE_URL", reason)


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("ORDERFLOW_LEASE_S", "soon", "expected a positive number of seconds"),
        ("ORDERFLOW_MAX_CONCURRENT_STEPS", "many", "expected a whole number, 1 or more"),
        ("ORDERFLOW_MOCKS_LATENCY_MS", "1.5", "expected a whole number, 0 or more"),
        ("ORDERFLOW_HTTP_PORT", "http", "expected a TCP port from 0 to 65535"),
        ("ORDERFLOW_RETRY_DELAYS_S", "1,x,4", "expected comma-separated seconds"),
        ("ORDERFLOW_CHAIN_STEPS", "yes", "expected 1 (on) or 0 (off)"),
        ("ORDERFLOW_HEARTBEAT_S", "45", "expected fewer seconds than ORDERFLOW_LEASE_S (30)"),
        ("ORDERFLOW_MOCKS_STATE", "/no/such/dir/state.jsonl", "existing directory"),
    ],
)
def test_a_bad_value_says_what_was_given_and_what_is_expected(
    variable: str, value: str, expected: str
) -> None:
    done = run_cli(["migrate"], base_env(**{variable: value}))
    assert done.returncode == 2
    line = _assert_one_clean_line(output_lines(done), "configuration error", variable, expected)
    assert value in line  # not a secret: shown so the user sees the typo


@pytest.mark.parametrize("variable", ["ORDERFLOW_CUSTOMER_TOKEN", "ORDERFLOW_OPERATOR_TOKEN"])
def test_a_rejected_token_is_never_echoed(variable: str) -> None:
    token = "too short Secret9"  # has a space: refused
    done = run_cli(["migrate"], base_env(**{variable: token}))
    assert done.returncode == 2
    line = _assert_one_clean_line(output_lines(done), variable, "17 characters", "16 to 255")
    assert "Secret9" not in line


def test_a_database_url_with_a_bad_port_is_shown_without_its_password() -> None:
    url = f"postgresql://alice:{PASSWORD}@db.example:54x32/orders"
    done = run_cli(["migrate"], base_env(ORDERFLOW_DATABASE_URL=url))
    assert done.returncode == 2
    _assert_one_clean_line(
        output_lines(done), "postgresql://alice:***@db.example:54x32/orders", "'54x32'"
    )


def test_a_misspelt_variable_draws_a_warning_naming_the_closest_known_one(
    procs: list[Proc],
) -> None:
    port = free_port()
    env = base_env(ORDERFLOW_MOCKS_PORT=str(port), ORDERFLOW_MOCKS_LATENCY=str(50))
    env["ORDERFLOW_TOTALLY_UNKNOWN"] = "1"
    proc = Proc("mocks", env)
    procs.append(proc)
    proc.wait_for("listening")
    warning = proc.wait_for("ORDERFLOW_MOCKS_LATENCY ").string
    assert "ignored" in warning
    assert "did you mean ORDERFLOW_MOCKS_LATENCY_MS?" in warning
    unknown = proc.wait_for("ORDERFLOW_TOTALLY_UNKNOWN").string
    assert "did you mean" not in unknown
    assert proc.terminate() == 0


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_orderflow_mocks_on_a_port_in_use_names_the_variable_to_change(busy_port: int) -> None:
    done = run_cli(["mocks"], base_env(ORDERFLOW_MOCKS_PORT=str(busy_port)))
    assert done.returncode == 2
    lines = output_lines(done)
    _assert_one_clean_line(lines, f"127.0.0.1:{busy_port}", "set ORDERFLOW_MOCKS_PORT")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("command", "variable"),
    [
        ("api", "ORDERFLOW_HTTP_PORT"),
        ("serve", "ORDERFLOW_HTTP_PORT"),
        ("serve", "ORDERFLOW_MOCKS_PORT"),
    ],
)
def test_a_service_port_in_use_names_the_variable_to_change(
    pg_url: str, busy_port: int, command: str, variable: str
) -> None:
    ports = {"ORDERFLOW_HTTP_PORT": "0", "ORDERFLOW_MOCKS_PORT": str(free_port())}
    ports[variable] = str(busy_port)
    done = run_cli([command], base_env(ORDERFLOW_DATABASE_URL=pg_url, **ports))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"orderflow: cannot listen on 127.0.0.1:{busy_port}: the port is in use by another "
        f"program; set {variable} to a free port (0 picks one)"
    ]


@pytest.mark.postgres
def test_every_busy_port_is_reported_at_once_before_anything_is_printed(pg_url: str) -> None:
    # Two real listeners hold the API's and the simulated services' ports. No token in the
    # environment: a start that got as far as seeding would print generated tokens "once".
    with (
        socket.create_server(("127.0.0.1", 0)) as api,
        socket.create_server(("127.0.0.1", 0)) as mocks,
    ):
        api_port, mocks_port = api.getsockname()[1], mocks.getsockname()[1]
        env = {k: v for k, v in base_env(ORDERFLOW_DATABASE_URL=pg_url).items() if "TOKEN" not in k}
        env.update(ORDERFLOW_HTTP_PORT=str(api_port), ORDERFLOW_MOCKS_PORT=str(mocks_port))
        done = run_cli(["serve"], env)
    assert done.returncode == 2
    assert done.stdout == ""  # no token, no migration, no banner
    assert done.stderr.strip().splitlines() == [
        f"orderflow: cannot listen on 127.0.0.1:{api_port}: the port is in use by another "
        "program; set ORDERFLOW_HTTP_PORT to a free port (0 picks one)",
        f"orderflow: cannot listen on 127.0.0.1:{mocks_port}: the port is in use by another "
        "program; set ORDERFLOW_MOCKS_PORT to a free port (0 picks one)",
    ]
    with psycopg.connect(pg_url) as conn:  # nothing was seeded either
        assert conn.execute("SELECT count(*) FROM users").fetchone() == (0,)


def test_the_same_port_for_two_servers_is_refused_before_anything_starts() -> None:
    port = str(free_port())
    done = run_cli(["serve"], base_env(ORDERFLOW_HTTP_PORT=port, ORDERFLOW_MOCKS_PORT=port))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"orderflow: ORDERFLOW_MOCKS_PORT and ORDERFLOW_HTTP_PORT are both {port}; "
        "set one of them to another port"
    ]


@pytest.mark.parametrize("module", ["orderflow", "orderflow.cli"])
def test_version_prints_the_installed_version(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        env=base_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"orderflow {metadata.version('durable-orderflow')}"


@pytest.fixture
def without_service_extras(tmp_path: Path) -> dict[str, str]:
    """An environment in which aiohttp cannot be imported, as after a bare `pip install .`."""
    stub = tmp_path / "bare" / "aiohttp"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'aiohttp\'", name="aiohttp")\n'
    )
    return base_env(PYTHONPATH=str(stub.parent))


@pytest.mark.parametrize("args", [["--help"], ["serve"], ["mocks", "--help"]])
def test_without_the_service_extras_the_command_says_which_extra_to_install(
    without_service_extras: dict[str, str], args: list[str]
) -> None:
    done = run_cli(args, without_service_extras)
    assert done.returncode == 2
    _assert_one_clean_line(
        output_lines(done), "aiohttp is not installed", "pip install 'durable-orderflow[all]'"
    )


def test_without_the_service_extras_version_still_answers(
    without_service_extras: dict[str, str],
) -> None:
    done = run_cli(["--version"], without_service_extras)
    assert done.returncode == 0
    assert done.stdout.strip() == f"orderflow {metadata.version('durable-orderflow')}"


@pytest.mark.postgres
def test_an_address_this_machine_does_not_have_names_the_host_variable(pg_url: str) -> None:
    env = base_env(
        ORDERFLOW_DATABASE_URL=pg_url, ORDERFLOW_HTTP_HOST="192.0.2.1", ORDERFLOW_HTTP_PORT="0"
    )
    done = run_cli(["api"], env)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "orderflow: cannot listen on 192.0.2.1:0: this machine has no such address; "
        "check ORDERFLOW_HTTP_HOST"
    ]

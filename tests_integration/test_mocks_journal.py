"""`ORDERFLOW_MOCKS_STATE`: a real `orderflow mocks` process, killed with SIGKILL and restarted
on the same journal, still knows what it charged and reserved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from processes import Proc, base_env, free_port, http, output_lines, run_cli

CHARGE = {"order_id": "o-journal", "amount_minor": 4200, "currency": "RUB"}
RESERVE = {
    "order_id": "o-journal",
    "items": [{"sku": "book", "quantity": 1, "unit_price_minor": 4200}],
}


def _headers(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key, "X-Order-Id": "o-journal", "X-Step-Id": "s-1"}


def _mocks(procs: list[Proc], state: Path | None) -> str:
    env = base_env(ORDERFLOW_MOCKS_PORT=str(free_port()))
    if state is not None:
        env["ORDERFLOW_MOCKS_STATE"] = str(state)
    proc = Proc("mocks", env)
    procs.append(proc)
    return proc.wait_for(r"listening on (http://\S+)").group(1)


def _charge_and_reserve(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    status, charge = http("POST", f"{url}/payments/v1/charges", CHARGE, **_headers("charge-1"))
    assert status == 201, charge
    status, held = http("POST", f"{url}/warehouse/v1/reservations", RESERVE, **_headers("res-1"))
    assert status == 201, held
    return charge, held


def test_a_restart_after_sigkill_on_the_same_journal_keeps_charges_and_reservations(
    procs: list[Proc], tmp_path: Path
) -> None:
    state = tmp_path / "mocks-state.jsonl"
    url = _mocks(procs, state)
    charge, held = _charge_and_reserve(url)
    procs[-1].kill()  # SIGKILL: no chance to flush or close anything

    url = _mocks(procs, state)
    assert http("GET", f"{url}/payments/v1/charges/charge-1") == (
        200,
        {"status": "succeeded", "payment_reference": charge["payment_reference"]},
    )
    again = http("POST", f"{url}/payments/v1/charges", CHARGE, **_headers("charge-1"))
    assert again == (201, charge)  # the stored answer, not a second charge
    _, ledger = http("GET", f"{url}/_control/ledger?order_id=o-journal")
    assert [c["idempotency_key"] for c in ledger["effects"]["charges"]] == ["charge-1"]
    assert [(r["reservation_id"], r["status"]) for r in ledger["effects"]["reservations"]] == [
        (held["reservation_id"], "held")
    ]
    replays = [c for c in ledger["calls"] if c["operation"] == "charge"]
    assert [(c["effect_applied"], c["replayed"]) for c in replays] == [(True, False), (False, True)]


def test_without_a_journal_a_restart_forgets_every_effect(
    procs: list[Proc], tmp_path: Path
) -> None:
    url = _mocks(procs, None)
    _charge_and_reserve(url)
    procs[-1].kill()
    url = _mocks(procs, None)
    assert http("GET", f"{url}/payments/v1/charges/charge-1")[0] == 404


def test_a_write_cut_short_is_dropped_and_the_rest_is_kept(
    procs: list[Proc], tmp_path: Path
) -> None:
    state = tmp_path / "mocks-state.jsonl"
    url = _mocks(procs, state)
    charge, _ = _charge_and_reserve(url)
    procs[-1].kill()
    with state.open("a") as journal:
        journal.write('[{"table":"charges","key":"torn"')  # no end, no newline
    url = _mocks(procs, state)
    assert (
        http("GET", f"{url}/payments/v1/charges/charge-1")[1]["payment_reference"]
        == (charge["payment_reference"])
    )
    assert http("GET", f"{url}/payments/v1/charges/torn")[0] == 404
    assert state.read_text().endswith("\n")


def test_a_second_process_on_the_same_journal_is_refused_with_one_line(
    procs: list[Proc], tmp_path: Path
) -> None:
    state = tmp_path / "mocks-state.jsonl"
    _mocks(procs, state)
    env = base_env(ORDERFLOW_MOCKS_PORT=str(free_port()), ORDERFLOW_MOCKS_STATE=str(state))
    done = run_cli(["mocks"], env)
    assert done.returncode == 2
    assert output_lines(done) == [
        f"orderflow: ORDERFLOW_MOCKS_STATE: {state} is in use by another orderflow mocks process"
    ]


def test_a_damaged_journal_is_refused_with_one_line(tmp_path: Path) -> None:
    state = tmp_path / "mocks-state.jsonl"
    state.write_text("not json\n[]\n")
    env = base_env(ORDERFLOW_MOCKS_PORT=str(free_port()), ORDERFLOW_MOCKS_STATE=str(state))
    done = run_cli(["mocks"], env)
    assert done.returncode == 2
    assert output_lines(done) == [
        f"orderflow: ORDERFLOW_MOCKS_STATE: {state} line 1 is not JSON: the file is damaged"
    ]


@pytest.mark.postgres
def test_serve_with_a_damaged_journal_stops_with_one_line_naming_the_variable(
    pg_url: str, tmp_path: Path
) -> None:
    state = tmp_path / "mocks-state.jsonl"
    state.write_text('{"not": "a journal line"}\n')
    env = base_env(
        ORDERFLOW_DATABASE_URL=pg_url,
        ORDERFLOW_HTTP_PORT="0",
        ORDERFLOW_MOCKS_PORT=str(free_port()),
        ORDERFLOW_MOCKS_STATE=str(state),
    )
    done = run_cli(["serve"], env)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"orderflow: ORDERFLOW_MOCKS_STATE: {state} line 1 is not a journal line"
    ]

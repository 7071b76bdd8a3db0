"""The six rules after every step of random commands, outcomes, crashes, stalls and clock jumps
against two executors on one store: the kit's machine (`orderflow_testing`) on the in-memory
store, once per process version (the orders it creates run that version to the end).

Version 3 is the test-only one of `tests_core/fraud_check.py` (a step inserted between
`reserved` and `paying`), known while this module's tests run.

`tests_integration/test_stateful_pg.py` runs the same machine on PostgreSQL; the sequences a
deep run ever found are replayed in `test_stateful_regressions.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orderflow_core.process import NEWEST, PROCESSES
from orderflow_testing import OrderflowMachine as KitMachine
from tests_core import fraud_check


@pytest.fixture(autouse=True)
def _version_3() -> Iterator[None]:
    with fraud_check.registered():
        yield


class OrderflowMachine(KitMachine):
    """The kit's machine on a fresh `InMemoryOrderStore` per example (the newest version)."""


class OrderflowMachineV1(KitMachine):
    """The same machine creating version-1 orders."""

    process_version = 1


class OrderflowMachineV3(KitMachine):
    """The same machine creating version-3 orders: the fraud check between reserved and
    paying (orders above its limit are refused and their stock released)."""

    process_version = fraud_check.VERSION


MACHINES = {1: OrderflowMachineV1, NEWEST: OrderflowMachine, 3: OrderflowMachineV3}

TestOrderflow = OrderflowMachine.TestCase
TestOrderflowV1 = OrderflowMachineV1.TestCase
TestOrderflowV3 = OrderflowMachineV3.TestCase


def test_a_machine_runs_for_every_process_version() -> None:
    assert {v: m.process_version for v, m in MACHINES.items()} == {v: v for v in PROCESSES}

"""The six rules after every step of random commands, outcomes, crashes, stalls and clock jumps
against two executors on one store: the kit's machine (`orderflow_testing`) on the in-memory
store, once per process version (the orders it creates run that version to the end).

`tests_integration/test_stateful_pg.py` runs the same machine on PostgreSQL; the sequences a
deep run ever found are replayed in `test_stateful_regressions.py`.
"""

from __future__ import annotations

from orderflow_core.process import NEWEST, PROCESSES
from orderflow_testing import OrderflowMachine as KitMachine


class OrderflowMachine(KitMachine):
    """The kit's machine on a fresh `InMemoryOrderStore` per example (the newest version)."""


class OrderflowMachineV1(KitMachine):
    """The same machine creating version-1 orders."""

    process_version = 1


MACHINES = {1: OrderflowMachineV1, NEWEST: OrderflowMachine}

TestOrderflow = OrderflowMachine.TestCase
TestOrderflowV1 = OrderflowMachineV1.TestCase


def test_a_machine_runs_for_every_process_version() -> None:
    assert {v: m.process_version for v, m in MACHINES.items()} == {v: v for v in PROCESSES}

"""The six rules after every step of random commands, outcomes, crashes, stalls and clock jumps
against two executors on one store: the kit's machine (`orderflow_testing`) on the in-memory
store.

`tests_integration/test_stateful_pg.py` runs the same machine on PostgreSQL; the sequences a
deep run ever found are replayed in `test_stateful_regressions.py`.
"""

from __future__ import annotations

from orderflow_testing import OrderflowMachine as KitMachine


class OrderflowMachine(KitMachine):
    """The kit's machine on a fresh `InMemoryOrderStore` per example."""


TestOrderflow = OrderflowMachine.TestCase

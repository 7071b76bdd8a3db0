"""The property-testing example of the guide "Write and property-test your own store"
(docs/how-to/own-store.md), run as written against both shipped stores: the code block is read
from the page and executed with `open_my_store`/`close_my_store` supplied."""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings

from orderflow_core.ports import OrderStore
from orderflow_core.testing import InMemoryOrderStore
from orderflow_pg import PgOrderStore
from tests_integration.test_stateful_pg import TABLES

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "own-store.md"
SMALL = settings(
    max_examples=10,
    stateful_step_count=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def readme_example() -> str:
    section = GUIDE.read_text(encoding="utf-8").split("## Prove it with the kit")[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "the guide's kit section has no python example"
    return found.group(1)


def run_readme_example(open_store: Callable[[], Any], close_store: Callable[[Any], Any]) -> int:
    """Execute the guide's block, run the machine it defines; returns how many stores it
    opened."""
    opened: list[OrderStore] = []

    async def open_my_store() -> OrderStore:
        store: OrderStore = await open_store()
        opened.append(store)
        return store

    namespace: dict[str, Any] = {"open_my_store": open_my_store, "close_my_store": close_store}
    exec(compile(readme_example(), str(GUIDE), "exec"), namespace)  # our own documentation
    case = namespace["TestMyStore"]
    case.settings = SMALL
    case("runTest").runTest()
    return len(opened)


def test_readme_kit_example_runs_on_the_in_memory_store() -> None:
    async def open_store() -> InMemoryOrderStore:
        return InMemoryOrderStore()

    async def close_store(store: InMemoryOrderStore) -> None:
        del store

    assert run_readme_example(open_store, close_store) >= SMALL.max_examples


@pytest.mark.postgres
def test_readme_kit_example_runs_on_postgresql(pg_url: str) -> None:
    stacks: dict[int, AsyncExitStack] = {}

    async def open_store() -> PgOrderStore:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")  # fixed names
        stack = AsyncExitStack()
        store = await stack.enter_async_context(PgOrderStore.open(pg_url, max_size=8))
        stacks[id(store)] = stack
        return store

    async def close_store(store: PgOrderStore) -> None:
        await stacks.pop(id(store)).aclose()

    assert run_readme_example(open_store, close_store) >= SMALL.max_examples
    assert not stacks

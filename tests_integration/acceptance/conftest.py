"""A fresh `Stack` per scenario on its own database; the criteria are checked after each one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acceptance.stack import Stack


@pytest.fixture
def stack(pg_url: str) -> Iterator[Stack]:
    """The whole orderflow on this test's database; after the test, every criterion holds."""
    s = Stack(pg_url)
    try:
        yield s
        s.hook = None
        s.check_criteria()
    finally:
        s.close()

"""Which event loop the processes run on: uvloop where it is installed (the default), or
asyncio's own (`ORDERFLOW_EVENT_LOOP=asyncio`). uvloop's loop costs less CPU per socket
operation, and an order is mostly socket operations (PostgreSQL and the three services)."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

CHOICES = ("uvloop", "asyncio")


def loop_factory(choice: str = "uvloop") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory if asked for and installed; None means asyncio's default."""
    if choice != "uvloop":
        return None
    module = importlib.util.find_spec("uvloop")
    if module is None:  # an install without it runs on asyncio's loop
        return None
    uvloop = importlib.import_module("uvloop")
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], choice: str = "uvloop") -> T:
    """`asyncio.run` on the chosen loop."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)


"""The processes run on uvloop where it is installed, unless ORDERFLOW_EVENT_LOOP=asyncio."""

from __future__ import annotations

import asyncio

import pytest

from orderflow import eventloop
from orderflow.config import ConfigError, load_settings


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_is_the_default_and_asyncio_can_be_chosen() -> None:
    pytest.importorskip("uvloop")
    assert load_settings({}).event_loop == "uvloop"
    assert eventloop.run(_loop_module()).startswith("uvloop")
    chosen = load_settings({"ORDERFLOW_EVENT_LOOP": "asyncio"}).event_loop
    assert chosen == "asyncio"
    assert eventloop.run(_loop_module(), chosen).startswith("asyncio")


def test_an_unknown_event_loop_is_a_configuration_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="ORDERFLOW_EVENT_LOOP"):
        load_settings({"ORDERFLOW_EVENT_LOOP": "trio"})

"""The processes run on uvloop where it is installed, unless ORDERFLOW_EVENT_LOOP=asyncio."""

from __future__ import annotations

import asyncio

import pytest

from orderflow import cli, eventloop
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


@pytest.mark.parametrize("chosen", ["uvloop", "asyncio"])
def test_the_simulated_services_run_on_the_chosen_loop_too(
    chosen: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("uvloop")
    seen: list[str] = []

    def run_mocks(*args: object, loop_factory: object = None, **kwargs: object) -> None:
        del args, kwargs
        with asyncio.Runner(loop_factory=loop_factory) as runner:  # type: ignore[arg-type]
            seen.append(runner.run(_loop_module()))

    monkeypatch.setattr(cli, "run_mocks", run_mocks)
    assert cli._mocks(load_settings({"ORDERFLOW_EVENT_LOOP": chosen})) == 0
    assert len(seen) == 1
    assert seen[0].startswith(chosen)

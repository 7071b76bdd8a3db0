"""The simulated warehouse, payments and shipping services: the pure simulator (`simulation`,
`sim_*`, standard library and attrs only) and its aiohttp server (`server`, `app`, needs
`durable-orderflow[http]`, imported on first use so the simulator runs without aiohttp)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orderflow_mocks.app import create_mocks_app
    from orderflow_mocks.server import RunningMocks, run_mocks, running_mocks, serve_mocks

__all__ = ["RunningMocks", "create_mocks_app", "run_mocks", "running_mocks", "serve_mocks"]

_HOMES = {
    "create_mocks_app": "orderflow_mocks.app",
    "RunningMocks": "orderflow_mocks.server",
    "run_mocks": "orderflow_mocks.server",
    "running_mocks": "orderflow_mocks.server",
    "serve_mocks": "orderflow_mocks.server",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'orderflow_mocks' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)

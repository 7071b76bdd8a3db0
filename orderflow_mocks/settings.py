"""What the mocks application holds: the simulator and how the server wraps it."""

from __future__ import annotations

import attrs
from aiohttp import web

from orderflow_mocks.simulation import Simulator


@attrs.frozen
class MockSettings:
    """Injected latency before each service call, and how long `timeout` holds a request."""

    latency_ms: int = 0
    hold_s: float = 5.0


SIM_KEY = web.AppKey("orderflow_mocks.sim", Simulator)
SETTINGS_KEY = web.AppKey("orderflow_mocks.settings", MockSettings)

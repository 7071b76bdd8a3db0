"""The aiohttp application of the simulated services.

Why: `orderflow mocks`, `orderflow serve` and the integration tests all serve one `Simulator`
over real sockets, so a client is tested against the wire it will really see.
"""

from __future__ import annotations

from aiohttp import web

from orderflow_mocks import control
from orderflow_mocks.problems import problems_middleware
from orderflow_mocks.services import SERVICE_ROUTES, service_handler
from orderflow_mocks.settings import SETTINGS_KEY, SIM_KEY, MockSettings
from orderflow_mocks.simulation import Simulator

MAX_BODY_BYTES = 64 * 1024


def create_mocks_app(
    sim: Simulator | None = None, *, latency_ms: int = 0, hold_s: float = 5.0
) -> web.Application:
    """The three simulated services and their control API on one application."""
    if latency_ms < 0 or hold_s < 0:
        raise ValueError("latency_ms and hold_s must not be negative")
    app = web.Application(middlewares=[problems_middleware], client_max_size=MAX_BODY_BYTES)
    app[SIM_KEY] = sim if sim is not None else Simulator()
    app[SETTINGS_KEY] = MockSettings(latency_ms=latency_ms, hold_s=hold_s)
    for method, path, service, operation in SERVICE_ROUTES:
        app.router.add_route(method, path, service_handler(service, operation))
    app.router.add_post("/_control/scripts", control.post_scripts)
    app.router.add_post("/_control/payments/settle", control.post_settle)
    app.router.add_get("/_control/ledger", control.get_ledger)
    app.router.add_post("/_control/reset", control.post_reset)
    return app

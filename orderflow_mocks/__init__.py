"""The simulated warehouse, payments and shipping services over HTTP."""

from __future__ import annotations

from orderflow_mocks.app import create_mocks_app
from orderflow_mocks.server import RunningMocks, run_mocks, running_mocks, serve_mocks

__all__ = ["RunningMocks", "create_mocks_app", "run_mocks", "running_mocks", "serve_mocks"]

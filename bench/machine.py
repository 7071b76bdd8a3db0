"""What the figures were measured on: cores, memory, load, the PostgreSQL server."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

from bench import pgadmin


def _meminfo_mib(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# The libraries a run's figures depend on most (the peers' own are in `peer_env.versions`).
LIBRARIES = ("aiohttp", "psycopg", "uvloop", "orjson")


def libraries() -> dict[str, str]:
    """Installed versions of LIBRARIES in the environment orderflow runs from."""
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def facts(server_url: str) -> dict[str, Any]:
    """The machine and server the numbers belong to."""
    return {
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "ram_mib": _meminfo_mib("MemTotal"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "libraries": libraries(),
        "load_average_at_start": load_average(),
        "postgresql": pgadmin.server_facts(server_url),
    }

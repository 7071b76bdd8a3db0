"""What the figures were measured on: cores, memory, load, the PostgreSQL server."""

from __future__ import annotations

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
        "load_average_at_start": load_average(),
        "postgresql": pgadmin.server_facts(server_url),
    }

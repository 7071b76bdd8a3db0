"""Percentiles the way the report states them: nearest rank, milliseconds."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank p-th percentile (0 < p <= 100), or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    """p50/p95/p99/max of durations given in seconds, as milliseconds."""
    out: dict[str, float | None] = {}
    for name, p in (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("max", 100.0)):
        value = percentile(seconds, p)
        out[name] = None if value is None else round(value * 1000, 1)
    return out

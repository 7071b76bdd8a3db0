"""The soak: resident memory of every process sampled through a long open-loop run.

A peak (VmHWM) cannot tell a leak from a burst, so the soak reads VmRSS on a schedule and
compares the last reading with one taken after a warm-up (imports, pools and caches filled).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import attrs

from bench import cpu, launch, load

SAMPLE_EVERY_S = 10.0
WARMUP_MAX_S = 60.0
WARMUP_FRACTION = 0.2
# The simulated services keep every call and every idempotency key in memory (their journal),
# so they grow with the orders by design: sampled and shown, but not orderflow's memory.
NOT_IN_TARGET = ("mocks",)


@attrs.frozen
class Sample:
    """The resident set of each process (`api`, `worker0…`, `mocks`) at `t_s` into the load."""

    t_s: float
    rss_mib: dict[str, float]


def warmup_s(seconds: float) -> float:
    """min(60 s, 20 % of the soak): long enough for start-up allocations to settle, short
    enough that most of a short soak still counts."""
    return round(min(WARMUP_MAX_S, WARMUP_FRACTION * seconds), 1)


async def sample_rss(
    nodes: dict[str, launch.Node], every_s: float, stop: asyncio.Event
) -> list[Sample]:
    """A sample at once, then one per `every_s` on a fixed schedule (deadlines, so a late
    wake-up does not push the later samples back), and a last one when `stop` is set."""
    start = time.monotonic()
    due = start
    samples: list[Sample] = []
    while True:
        samples.append(Sample(round(time.monotonic() - start, 1),
                              {role: node.rss_mib() for role, node in nodes.items()}))
        if stop.is_set():
            return samples
        due = max(due + every_s, time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=due - time.monotonic())


def _growth(baseline: float, end: float) -> float | None:
    return round((end - baseline) / baseline * 100, 1) if baseline > 0 else None


def _processes(samples: list[dict[str, Any]], warmup: float) -> dict[str, dict[str, Any]]:
    """Per process: the first sample at or after the warm-up, the last one, the growth in %.

    No growth when the baseline is the last sample too (a soak shorter than one interval
    after its warm-up): a difference of a reading with itself says nothing."""
    after = [s for s in samples if s["t_s"] >= warmup]
    if not after:
        return {}
    first, last = after[0], after[-1]
    return {
        role: {
            "baseline_mib": base,
            "end_mib": last["rss_mib"][role],
            "growth_pct": None if last is first else _growth(base, last["rss_mib"][role]),
        }
        for role, base in first["rss_mib"].items()
    }


def summary(figures: dict[str, Any], *, seconds: float, fraction: float) -> dict[str, Any]:
    """The `soak` section of the results from the scenario's figures and its RSS samples."""
    samples = figures["rss_samples"]
    warmup = warmup_s(seconds)
    processes = _processes(samples, warmup)
    counted = [role for role in processes if role not in NOT_IN_TARGET]
    growths = [processes[r]["growth_pct"] for r in counted
               if processes[r]["growth_pct"] is not None]
    states = figures["states"]
    return {
        "seconds": seconds,
        "fraction_of_max": fraction,
        "offered_per_s": figures["offered_rate"],
        "mocks_latency_ms": figures["mocks_latency_ms"],
        "workers": figures["workers"],
        "achieved_orders_per_s": figures["orders_per_s"],
        "post_latency_ms": figures["post_latency_ms"],
        "created_to_shipped_ms": figures["created_to_shipped_ms"],
        "xacts_per_order": figures["xacts_per_order"],
        "orders_posted": figures["orders_posted"],
        "orders_accepted": figures["orders_accepted"],
        "orders_completed": sum(states.get(s, 0) for s in load.TERMINAL),
        "all_stopped": figures["completed"],
        "post_errors": figures["post_errors"],
        "states": states,
        "warmup_s": warmup,
        "sample_every_s": SAMPLE_EVERY_S,
        "samples": samples,
        "processes": processes,
        "max_growth_of": counted,
        "max_growth_pct": max(growths, default=None),
        **{k: figures[k] for k in cpu.FIELDS if k in figures},
    }

"""Sampling a worker under load with py-spy (from the bench venv) and naming the top costs."""

from __future__ import annotations

import re
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from bench import peer_env

FRAME = re.compile(r"^(?P<func>.*) \((?P<path>[^()]*?)(?::(?P<line>\d+))?\)$")
TOP = 15
# Where a frame's file lives decides the area its time is charged to.
AREAS = (
    ("orderflow_core", "orderflow_core"),
    ("orderflow_pg", "orderflow_pg"),
    ("orderflow_http", "orderflow_http"),
    ("orderflow/", "orderflow (CLI)"),
    ("bench/", "bench fallback"),
    ("psycopg_pool", "psycopg_pool"),
    ("psycopg", "psycopg"),
    ("aiohttp", "aiohttp"),
    ("yarl", "aiohttp"),
    ("multidict", "aiohttp"),
    ("attr", "attrs"),
    ("asyncio", "asyncio"),
    ("json", "json"),
    ("uuid", "uuid"),
    ("logging", "logging"),
)


def start(pid: int, out: str) -> subprocess.Popen[bytes] | None:
    """py-spy recording `pid` into `out` (raw collapsed stacks) until `finish`."""
    spy = peer_env.tool("py-spy")
    if spy is None:
        print("  (py-spy not installed in the bench venv: no profile)")
        return None
    argv = [str(spy), "record", "--pid", str(pid), "--rate", "200", "--format", "raw",
            "--output", out]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    proc.args_out = out  # type: ignore[attr-defined]  # remembered for finish()
    return proc


def finish(proc: subprocess.Popen[bytes] | None) -> dict[str, Any] | None:
    """Stop py-spy, read what it sampled: top functions by own and by inclusive time."""
    if proc is None:
        return None
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None
    out = Path(proc.args_out)  # type: ignore[attr-defined]
    if not out.exists():
        print(f"  py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
        return None
    return summarize(out.read_text())


def _frame(raw: str) -> tuple[str, str]:
    found = FRAME.match(raw.strip())
    if found is None:
        return raw.strip(), ""
    path = found.group("path")
    short = "/".join(path.split("/")[-2:])
    return f"{found.group('func')} ({short}:{found.group('line') or '?'})", path


def _area(path: str) -> str:
    for needle, area in AREAS:
        if needle in path:
            return area
    return "other (stdlib, interpreter)"


def summarize(raw: str) -> dict[str, Any]:
    """Own time per function (leaf frame), inclusive time per function, own time per area."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_frame(f) for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        leaf_name, leaf_path = frames[-1]
        own[leaf_name] += count
        areas[_area(leaf_path)] += count
        for name in {name for name, _ in frames}:
            inclusive[name] += count

    def share(counter: Counter[str], n: int) -> list[dict[str, Any]]:
        return [{"what": k, "samples": v, "pct": round(100 * v / total, 1)}
                for k, v in counter.most_common(n)] if total else []

    return {
        "samples": total,
        "own_by_area": share(areas, len(areas)),
        "own_top": share(own, TOP),
        "inclusive_top": share(inclusive, TOP + 10),
    }

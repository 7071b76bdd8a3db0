"""`python bench/plot.py latest.json latest.png`: throughput and latency against offered load.

A standalone script so that matplotlib is needed only by whichever interpreter runs it (the
bench venv has it); orderflow never depends on it.
"""

from __future__ import annotations

import json
import sys

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt


def main(src: str, dst: str) -> None:
    results = json.load(open(src))  # noqa: SIM115  (a script: closed at exit)
    sweep = [p for p in results["sweep"] if p.get("orders_per_s") is not None]
    offered = [p["offered_rate"] for p in sweep]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(offered, [p["orders_per_s"] for p in sweep], "o-", label="achieved orders/s")
    left.plot(offered, offered, ":", color="grey", label="offered = achieved")
    for run in results["runs"]:
        left.axhline(run["orders_per_s"], linestyle="--", linewidth=0.8,
                     label=f"closed loop, {run['mocks_latency_ms']} ms, {run['workers']} w")
    for peer in results["peers"].get("runs", []):
        if peer.get("chains_per_s"):
            left.axhline(peer["chains_per_s"], color="red", linestyle="-.", linewidth=0.8,
                         label=f"{peer['system']} chains/s ({peer['mocks_latency_ms']} ms)")
    left.set_xlabel("offered orders/s")
    left.set_ylabel("orders/s")
    left.set_title("throughput")
    left.legend(fontsize=7)
    for key, label in (("post_latency_ms", "POST /orders"),
                       ("created_to_shipped_ms", "created→shipped")):
        for pct in ("p50", "p99"):
            right.plot(offered, [p[key][pct] for p in sweep], "o-", label=f"{label} {pct}")
    right.set_yscale("log")
    right.set_xlabel("offered orders/s")
    right.set_ylabel("ms (log)")
    right.set_title("latency")
    right.legend(fontsize=7)
    m = results["machine"]
    pg = m["postgresql"]["server_version"]
    floors = ", ".join(f"{f['mocks_latency_ms']} ms {f.get('chains_per_s')}/s"
                       for f in results.get("floor") or [])
    fig.suptitle(f"orderflow, {m['cores']} cores, PostgreSQL {pg}"
                 + (f", cost floor {floors}" if floors else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

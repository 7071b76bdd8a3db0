"""Derived figures (ratios, targets) and the three outputs: JSON, a Markdown table, a PNG."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import cpu, peer_env

PLOT = Path(__file__).resolve().parent / "plot.py"


def _floor_ratio(run: dict[str, Any], floors: list[dict[str, Any]]) -> None:
    """Our orders/s ÷ the floor's at the same mocks latency (≤ 1: the share of the bare job's
    rate we reach), and our CPU per order ÷ the floor's (≥ 1: what everything we add costs)."""
    floor = next((f for f in floors if f.get("mocks_latency_ms") == run.get("mocks_latency_ms")
                  and f.get("chains_per_s")), None)
    if floor is None:
        return
    if run.get("orders_per_s"):
        run["floor_ratio"] = round(run["orders_per_s"] / floor["chains_per_s"], 2)
    if run.get("cpu_total_ms_per_order") and floor.get("cpu_total_ms_per_order"):
        run["floor_cpu_ratio"] = round(
            run["cpu_total_ms_per_order"] / floor["cpu_total_ms_per_order"], 2)


def pair_key(system: str) -> str:
    """The name of a system's figures in a pairs entry: `peer` is pgqueuer-asyncpg (the first
    paired peer, and the key of every earlier run's pairs), `dbos`, `floor`, or its own."""
    if system == "pgqueuer-asyncpg":
        return "peer"
    return "dbos" if system.startswith("dbos") else system


def _cpu_capacity(run: dict[str, Any], cores: int | None, rate: float | None) -> None:
    if "cpu_ms_per_order" in run:
        run["cpu_capacity_ms_per_order"] = cpu.capacity_ms_per_order(cores, rate)


def derive(results: dict[str, Any]) -> None:
    """Floor ratios and CPU capacity per order per run, our orders/s over each peer's
    chains/s, the alternated pairs' ratios, the issue's targets."""
    cores, floors = results["machine"]["cores"], results.get("floor") or []
    for run in [*results["runs"], *results["sweep"], results.get("profile_run") or {}]:
        _floor_ratio(run, floors)
        _cpu_capacity(run, cores, run.get("orders_per_s"))
    if results.get("soak"):
        _cpu_capacity(results["soak"], cores, results["soak"]["achieved_orders_per_s"])
    for peer_run in results["peers"].get("runs", []):
        ours = [r for r in results["runs"] if r["mocks_latency_ms"] == peer_run["mocks_latency_ms"]]
        if ours and peer_run.get("chains_per_s"):
            one = min(ours, key=lambda r: r["workers"])
            peer_run["our_orders_per_s_same_workers"] = one["orders_per_s"]
            peer_run["our_ratio"] = round(one["orders_per_s"] / peer_run["chains_per_s"], 2)
    for against in PAIRED:
        results[f"pair_summary_{against}"] = pair_summary(results.get("pairs") or [], against)
    results["pair_summary"] = results.pop("pair_summary_peer")
    results["pair_cpu_summary"] = pair_cpu_summary(results.get("pairs") or [])
    results["targets"] = _targets(results)


PAIRED = ("peer", "dbos", "floor")


def pair_summary(pairs: list[dict[str, Any]], against: str = "peer") -> list[dict[str, Any]]:
    """Per mocks latency: the ratio of each alternated round (our orders/s ÷ the chains/s of
    `against`: `peer` = pgqueuer-asyncpg, `dbos`, `floor`), their mean, lowest and highest. A
    round with a run that failed is left out."""
    summary = []
    for latency in sorted({p["mocks_latency_ms"] for p in pairs}):
        ratios = [round(p["ours"] / p[against], 2) for p in pairs
                  if p["mocks_latency_ms"] == latency and p.get("ours") and p.get(against)]
        if ratios:
            summary.append({"mocks_latency_ms": latency, "ratios": ratios,
                            "mean": round(sum(ratios) / len(ratios), 2),
                            "min": min(ratios), "max": max(ratios)})
    return summary


def pair_cpu_summary(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per mocks latency and system: the mean total CPU per order over the rounds (ms, all
    processes: for ours API, worker, mocks, PostgreSQL and the load generator; for a peer or
    the floor its process, the mocks and PostgreSQL)."""
    summary = []
    for latency in sorted({p["mocks_latency_ms"] for p in pairs}):
        rounds = [p for p in pairs if p["mocks_latency_ms"] == latency]
        row: dict[str, Any] = {"mocks_latency_ms": latency}
        for key in ("ours", *PAIRED):
            values = [v for p in rounds
                      if (v := (p.get("cpu_total_ms_per_order") or {}).get(key)) is not None]
            if values:
                row[key] = round(sum(values) / len(values), 2)
        summary.append(row)
    return summary


def _targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    runs = results["runs"]
    half = next((p for p in results["sweep"] if p.get("fraction_of_max") == 0.5), None)
    # One entry per peer run: each peer runs once per mocks latency.
    ratios = [(p["system"], p.get("our_ratio")) for p in results["peers"].get("runs", [])]
    soak = results.get("soak")
    rows = [
        ("≤ 10 transactions per order",
         max((r.get("xacts_per_order") or 0 for r in runs), default=None), lambda v: v <= 10),
        ("POST /orders p99 ≤ 20 ms at half the max throughput",
         half["post_latency_ms"]["p99"] if half else None, lambda v: v <= 20),
        ("orders/s ≥ pgqueuer chains/s (ratio ≥ 1)",
         min((v for k, v in ratios if k.startswith("pgqueuer") and v), default=None),
         lambda v: v >= 1),
        ("the same, mean of the alternated pairs at each latency",
         min((p["mean"] for p in results.get("pair_summary") or []), default=None),
         lambda v: v >= 1),
        ("orders/s ≥ 1.3 × pgqueuer-asyncpg chains/s, mean of the alternated pairs",
         min((p["mean"] for p in results.get("pair_summary") or []), default=None),
         lambda v: v >= 1.3),
        ("orders/s ≥ 4 × DBOS workflows/s, mean of the alternated rounds",
         min((p["mean"] for p in results.get("pair_summary_dbos") or []), default=None),
         lambda v: v >= 4),
        ("total CPU per order ≤ 6 ms (1 worker, closed loop, every process)",
         max((r.get("cpu_total_ms_per_order") or 0 for r in runs if r["workers"] == 1),
             default=None), lambda v: v <= 6),
        ("orders/s ≥ 3 × procrastinate chains/s",
         min((v for k, v in ratios if k == "procrastinate" and v), default=None),
         lambda v: v >= 3),
        ("RSS growth < 10 % over the soak", soak["max_growth_pct"] if soak else None,
         lambda v: v < 10),
    ]
    targets = [{"target": t, "worst_measured": v, "met": None if v is None else bool(ok(v))}
               for t, v, ok in rows]
    if soak is None:
        targets[-1]["note"] = "not run"  # `--soak-seconds 0` (the --quick default)
    return targets


def _ms(d: dict[str, Any] | None, *keys: str) -> str:
    d = d or {}
    return " / ".join("–" if d.get(k) is None else f"{d[k]:g}" for k in keys)


def _kb(value: float | None) -> str:
    return "–" if value is None else f"{value / 1000:.1f}"


def _rss(rss: dict[str, float]) -> str:
    workers = [v for k, v in rss.items() if k.startswith("worker")]
    return f"{rss.get('api', 0):g} / {max(workers, default=0):g} / {rss.get('mocks', 0):g}"


def _prefilled(results: dict[str, Any]) -> str:
    orders = results.get("options", {}).get("prefill")
    if not orders:
        return "each run on a fresh database; "
    return (f"each run's database held {orders} finished orders (vacuumed, analyzed) before "
            "its load; ")


def _wal_lines(results: dict[str, Any]) -> list[str]:
    """Where the first closed-loop run's WAL went, per order, by relation and record kind."""
    run = next((r for r in results["runs"] if r.get("wal_records_per_order")), None)
    if run is None:
        return []
    lines = ["", f"WAL per order by relation and record (`pg_waldump`; the run with "
             f"{run['mocks_latency_ms']} ms mocks and {run['workers']} worker(s)):", "",
             "| relation | record | records | bytes | of it full-page images |",
             "|---|---|---|---|---|"]
    lines += [f"| {w['relation']} | {w['record']} | {w['records']} | {w['bytes']} | "
              f"{w['image_bytes']} |" for w in run["wal_records_per_order"]]
    return lines


def _libraries(machine: dict[str, Any]) -> str:
    found = machine.get("libraries")  # runs before it was recorded have none
    return f"; orderflow's libraries {found}" if found else ""


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    pg = m["postgresql"]
    lines = [
        "# orderflow benchmark — latest run", "",
        f"Machine: {m['cores']} cores ({m['cpu']}), {m['ram_mib']} MiB RAM, PostgreSQL "
        f"{pg['server_version']} (synchronous_commit={pg['synchronous_commit']}, "
        f"fsync={pg['fsync']}, autovacuum={pg.get('autovacuum', '?')}); "
        f"{_prefilled(results)}"
        f"load average {m['load_average_at_start']} → "
        f"{m.get('load_average_at_end')}; launcher `{results['launcher']}`; wall time "
        f"{results['wall_time_s']} s{_libraries(m)}.", "",
        *_floor_lines(results),
        "| mocks ms | workers × conc. | orders/s | steps/s (per worker) | xacts/order | "
        "statements/order | WAL KB/order (full-page images) | rows written/order | "
        "POST p50 / p95 / p99 ms | created→shipped p50 / p95 / p99 ms | peak RSS MiB api / "
        "worker / mocks | floor ratio: orders/s (CPU/order) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        lines.append(  # noqa: PERF401  (one table row per run reads better as a loop)
            f"| {r['mocks_latency_ms']} | {r['workers']} × {r['concurrency_per_worker']} | "
            f"**{r['orders_per_s']}** | {r['steps_per_s']} ({r['steps_per_s_per_worker']}) | "
            f"{r['xacts_per_order']} | {r.get('statements_per_order') or '–'} | "
            f"{_kb(r.get('wal_bytes_per_order'))} "
            f"({_kb(r.get('wal_fpi_bytes_per_order'))}) | "
            f"{r.get('rows_written_per_order', '–')} | "
            f"{_ms(r['post_latency_ms'], 'p50', 'p95', 'p99')} | "
            f"{_ms(r['created_to_shipped_ms'], 'p50', 'p95', 'p99')} | {_rss(r['peak_rss_mib'])} "
            f"| {r.get('floor_ratio', '–')} ({r.get('floor_cpu_ratio', '–')}×) |")
    lines += _cpu_lines(results)
    lines += _wal_lines(results)
    lines += ["", "Offered load (open loop) — "
              f"{results['sweep'][0]['mocks_latency_ms'] if results['sweep'] else '–'} ms mocks:",
              "", "| offered/s | achieved orders/s | POST p50 / p99 ms | "
              "created→shipped p50 / p99 ms | xacts/order |", "|---|---|---|---|---|"]
    for p in results["sweep"]:
        lines.append(f"| {p['offered_rate']} ({p['fraction_of_max']:g}×) | {p['orders_per_s']} | "
                     f"{_ms(p['post_latency_ms'], 'p50', 'p99')} | "
                     f"{_ms(p['created_to_shipped_ms'], 'p50', 'p99')} | {p['xacts_per_order']} |")
    lines += _soak_lines(results.get("soak"))
    lines += ["", "Peers (same server, same simulated services, 1 process, concurrency "
              f"{results['options']['concurrency']}; versions {results['peers'].get('versions')}):",
              "", "| peer | mocks ms | chains/s | xacts/chain | chain p50 / p99 ms | RSS MiB | "
              "CPU ms/chain (its process / mocks / postgres) | our orders/s ÷ its chains/s |",
              "|---|---|---|---|---|---|---|---|"]
    for p in results["peers"].get("runs", []):
        lines.append(f"| {_peer_name(p)} | {p.get('mocks_latency_ms')} | "
                     f"{p.get('chains_per_s')} | {p.get('xacts_per_chain')} | "
                     f"{_ms(p.get('chain_latency_ms'), 'p50', 'p99')} | {p.get('peak_rss_mib')} | "
                     f"{_cpu_split(p)} | {p.get('our_ratio')} |")
    lines += _pair_lines(results)
    lines += ["", "Targets of issue 8 (reported, never asserted):", "",
              "| target | worst measured | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t.get('note', t['worst_measured'])} | {t['met']} |"
              for t in results["targets"]]
    lines += _profile_lines(results.get("profile_run"))
    return "\n".join(lines) + "\n"


def _peer_name(run: dict[str, Any]) -> str:
    opts = run.get("options") or {}
    if not run.get("system", "").startswith("dbos") or not opts:
        return str(run.get("system"))
    return (f"{run['system']} ({opts.get('dbos_mode')}, polling {opts.get('dbos_polling_s'):g} s"
            f", enqueue {opts.get('dbos_enqueue_batch')} per transaction)")


def _cpu_split(run: dict[str, Any]) -> str:
    per = run.get("cpu_ms_per_order") or {}
    if not per:
        return "–"
    return (f"{run.get('cpu_total_ms_per_order')} ({per.get('worker', '–')} / "
            f"{per.get('mocks', '–')} / {per.get(cpu.POSTGRES, '–')})")


FLOOR_NOTE = ("Cost floor (`bench/floor.py`, the same orders, mocks and concurrency: per order the "
              "three calls and one group-committed durable write of each result, nothing else; "
              "docs/benchmark.md):")


def _floor_lines(results: dict[str, Any]) -> list[str]:
    floors = results.get("floor") or []
    if not floors:
        return ["Cost floor: not measured (`--no-floor`).", ""]
    lines = [FLOOR_NOTE, "", "| mocks ms | orders/s | CPU ms/order (its process / mocks / "
             "postgres) | order p50 / p99 ms | xacts/order |", "|---|---|---|---|---|"]
    lines += [f"| {f['mocks_latency_ms']} | **{f.get('chains_per_s')}** | {_cpu_split(f)} | "
              f"{_ms(f.get('chain_latency_ms'), 'p50', 'p99')} | {f.get('xacts_per_chain')} |"
              for f in floors]
    return [*lines, ""]


PAIR_NAMES = {"peer": "pgqueuer-asyncpg", "dbos": "DBOS", "floor": "the floor"}


def _pair_lines(results: dict[str, Any]) -> list[str]:
    if not results.get("pairs"):
        return []
    lines = ["", "Alternated rounds (ours with 1 worker, then each other system, the same number "
             "of orders and chains, one round after the other): our orders/s ÷ its chains/s", "",
             "| against | mocks ms | ours orders/s | its chains/s | ratio of each round | "
             "mean (min–max) |", "|---|---|---|---|---|---|"]
    for against in PAIRED:
        summary = results.get("pair_summary" if against == "peer" else f"pair_summary_{against}")
        for row in summary or []:
            rounds = [p for p in results["pairs"]
                      if p["mocks_latency_ms"] == row["mocks_latency_ms"]]
            lines.append(
                f"| {PAIR_NAMES[against]} | {row['mocks_latency_ms']} | "
                f"{' / '.join(str(p['ours']) for p in rounds)} | "
                f"{' / '.join(str(p.get(against)) for p in rounds)} | "
                f"{' / '.join(str(r) for r in row['ratios'])} | "
                f"**{row['mean']}** ({row['min']}–{row['max']}) |")
    cpu_rows = results.get("pair_cpu_summary") or []
    if cpu_rows:
        lines += ["", "CPU per order in the same rounds (ms, mean; every process of each system, "
                  "PostgreSQL included):", "",
                  "| mocks ms | ours | pgqueuer-asyncpg | DBOS | floor | ours ÷ floor |",
                  "|---|---|---|---|---|---|"]
        for row in cpu_rows:
            ratio = (round(row["ours"] / row["floor"], 2)
                     if row.get("ours") and row.get("floor") else "–")
            lines.append(f"| {row['mocks_latency_ms']} | "
                         + " | ".join(str(row.get(k, "–")) for k in ("ours", *PAIRED))
                         + f" | {ratio} |")
    return lines


def _cpu_row(label: str, run: dict[str, Any], rate: float | None) -> str:
    per = run.get("cpu_ms_per_order") or {}
    workers = [v for k, v in per.items() if k.startswith("worker")]
    cells = [per.get("api"), round(sum(workers), 2) if workers else None, per.get("mocks"),
             per.get(cpu.POSTGRES), per.get(cpu.LOAD_GENERATOR),
             run.get("cpu_total_ms_per_order"), run.get("cpu_capacity_ms_per_order")]
    return (f"| {label} | {rate} | "
            + " | ".join("–" if v is None else f"{v:g}" for v in cells) + " |")


def _cpu_lines(results: dict[str, Any]) -> list[str]:
    """One row per closed-loop run, sweep point and the soak: CPU ms per accepted order by
    process, their total, and what the cores offer per order at the rate reached."""
    rows = [_cpu_row(f"closed, {r['mocks_latency_ms']} ms mocks, {r['workers']} worker(s)", r,
                     r["orders_per_s"]) for r in results["runs"]]
    rows += [_cpu_row(f"sweep {p['fraction_of_max']:g}× ({p['offered_rate']}/s offered)", p,
                      p["orders_per_s"]) for p in results["sweep"]]
    soak = results.get("soak")
    if soak:
        rows.append(_cpu_row(f"soak ({soak['offered_per_s']}/s offered)", soak,
                             soak["achieved_orders_per_s"]))
    notes = sorted({r["cpu_note"] for r in [*results["runs"], *results["sweep"], soak or {}]
                    if r.get("cpu_note")})
    return ["", f"CPU per order (ms; utime + stime from the start of the load to its end ÷ "
            f"accepted orders; capacity = {results['machine']['cores']} cores × 1000 ÷ "
            "orders/s):", "",
            "| run | orders/s | api | worker(s) | mocks | postgres | load generator | total | "
            "capacity |", "|---|---|---|---|---|---|---|---|---|", *rows,
            *(["", *notes] if notes else [])]


def _soak_lines(soak: dict[str, Any] | None) -> list[str]:
    if soak is None:
        return ["", "Soak: not run (`--soak-seconds 0`)."]
    lines = ["", f"Soak (open loop) — {soak['offered_per_s']}/s offered "
             f"({soak['fraction_of_max']:g}× max), {soak['seconds']:g} s, "
             f"{soak['mocks_latency_ms']} ms mocks, {soak['workers']} worker(s): "
             f"{soak['achieved_orders_per_s']} orders/s achieved, POST p50 / p99 "
             f"{_ms(soak['post_latency_ms'], 'p50', 'p99')} ms, {soak['orders_completed']} of "
             f"{soak['orders_accepted']} orders completed. Resident set (VmRSS) sampled every "
             f"{soak['sample_every_s']:g} s ({len(soak['samples'])} samples); baseline after "
             f"{soak['warmup_s']:g} s warm-up:", "",
             "| process | baseline MiB | end MiB | growth % |", "|---|---|---|---|"]
    lines += [f"| {role} | {p['baseline_mib']} | {p['end_mib']} | {p['growth_pct']} |"
              for role, p in soak["processes"].items()]
    left_out = [r for r in soak["processes"] if r not in soak["max_growth_of"]]
    lines += ["", f"Largest growth of {', '.join(soak['max_growth_of'])}: "
              f"**{soak['max_growth_pct']} %**"
              + (f" ({', '.join(left_out)}: the simulated services, which keep every call in "
                 "memory by design, not counted)." if left_out else ".")]
    return lines


def _profile_lines(run: dict[str, Any] | None) -> list[str]:
    prof = (run or {}).get("profile")
    if not prof:
        return []
    lines = ["", f"Profile of worker 0 (py-spy, {prof['samples']} samples, own time):", "",
             "| area | % |", "|---|---|"]
    lines += [f"| {a['what']} | {a['pct']} |" for a in prof["own_by_area"]]
    lines += ["", "| function (own time) | % |", "|---|---|"]
    lines += [f"| `{a['what']}` | {a['pct']} |" for a in prof["own_top"][:12]]
    return lines


def write(results: dict[str, Any], out: Path) -> list[Path]:
    """latest.json, latest.md and (if matplotlib can be found) latest.png under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "latest.json", out / "latest.md"]
    paths[0].write_text(json.dumps(results, indent=2, default=str) + "\n")
    paths[1].write_text(markdown(results))
    png = out / "latest.png"
    for python in (sys.executable, str(peer_env.python())):
        if not Path(python).exists():
            continue
        done = subprocess.run([python, str(PLOT), str(paths[0]), str(png)],
                              capture_output=True, text=True, timeout=120, check=False)
        if done.returncode == 0:
            paths.append(png)
            break
    else:
        print("  (no matplotlib importable: no PNG; `pip install matplotlib` to get one)")
    return paths

"""`python -m bench.telemetry`: what metrics and tracing cost, off and on in one run.

The same load as `python -m bench.worker_only` (N orders run to `shipped` by one executor
against the simulated services) is run with the telemetry off and on in two processes at the
same time, `--repeat` times, so that whatever else loads a shared machine loads both sides.
"On" is what a deployment runs with an OTLP endpoint set: Prometheus metrics, and spans made by
the SDK as `orderflow.tracing` configures it (the BatchSpanProcessor, the OTLP/HTTP exporter
encoding and posting every batch) to a local sink in another process that accepts and drops
them. Modes: `otlp` (orderflow's default sampler, or `--sampler`), `otlp-all` (every span
recorded: parentbased_always_on), `metrics` (no spans); `--ratio` sets the share of orders
traced. Each order is created under a request span as the API makes one, so its steps follow
that request's sampling decision. Reported per mode: median orders/s and worker CPU ms per
order (the exporter's thread and its final export included), and the median of the on/off
ratios of the pairs. `--micro` instead times the observer alone, per step attempt with one
external call.
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from bench import launch, worker_only
from bench.run import DEFAULT_URL

SINK = """
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
"""
SAMPLERS = {"otlp": None, "otlp-all": "parentbased_always_on"}


def _start(
    mode: str, side: int, args: argparse.Namespace, env: dict[str, str]
) -> subprocess.Popen[str]:
    """`python -m bench.worker_only` for one mode, in its own process and database."""
    env = dict(env)
    if mode in SAMPLERS:
        sampler = args.sampler if mode == "otlp" else SAMPLERS[mode]
        if sampler:
            env["OTEL_TRACES_SAMPLER"] = sampler
        if mode == "otlp" and args.ratio is not None:
            env["OTEL_TRACES_SAMPLER_ARG"] = str(args.ratio)
    argv = [
        sys.executable, "-m", "bench.worker_only", "--database-url", args.database_url,
        "--orders", str(args.orders), "--concurrency", str(args.concurrency),
        "--database", f"{worker_only.DATABASE}_{side}",
        "--telemetry", "otlp" if mode in SAMPLERS else mode,
    ]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, cwd=launch.REPO)


def _result(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = process.communicate(timeout=900)
    if process.returncode != 0:
        raise SystemExit(f"bench.worker_only failed ({process.returncode})")
    result: dict[str, Any] = ast.literal_eval(out.strip().splitlines()[-1])
    return result


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """Each repeat runs `off` and each mode side by side (two processes at the same time, so
    whatever else loads the machine loads both), one pair after the other."""
    port = launch.free_port()
    sink = subprocess.Popen([sys.executable, "-c", SINK, str(port)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_TRACES_SAMPLER")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    named = {mode: mode if mode != "off" else "off-again" for mode in args.modes}  # A/A: off
    runs: dict[str, list[dict[str, Any]]] = {"off": [], **{named[m]: [] for m in args.modes}}
    ratios: dict[str, list[tuple[float, float]]] = {named[m]: [] for m in args.modes}
    try:
        for i in range(args.repeat):
            for mode in args.modes:
                pair = [_start("off", 0, args, env), _start(mode, 1, args, env)]
                off, on = (_result(p) for p in pair)
                runs["off"].append(off)
                runs[named[mode]].append(on)
                ratios[named[mode]].append(
                    (
                        on["orders_per_s"] / off["orders_per_s"],
                        on["worker_cpu_ms_per_order"] / off["worker_cpu_ms_per_order"],
                    )
                )
                for name, result in (("off", off), (named[mode], on)):
                    print(
                        f"run {i + 1} {name:9s} {result['orders_per_s']:7.1f} orders/s "
                        f"{result['worker_cpu_ms_per_order']:6.2f} worker CPU ms/order",
                        flush=True,
                    )
    finally:
        sink.terminate()
        sink.wait(timeout=10)
    summary: dict[str, Any] = {}
    for mode, results in runs.items():
        summary[mode] = {
            "orders_per_s": statistics.median(r["orders_per_s"] for r in results),
            "worker_cpu_ms_per_order": statistics.median(
                r["worker_cpu_ms_per_order"] for r in results
            ),
        }
    for mode, pairs in ratios.items():  # the median of the paired ratios
        summary[mode]["orders_per_s_ratio"] = round(statistics.median(r for r, _ in pairs), 3)
        summary[mode]["cpu_per_order_ratio"] = round(statistics.median(c for _, c in pairs), 3)
    return summary


def micro(iterations: int) -> None:
    """µs of the observer per step attempt with one external call (and its `inject`)."""
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from orderflow import tracing  # noqa: PLC0415
    from orderflow_core.model import Claim  # noqa: PLC0415
    from orderflow_core.observe import NullObserver  # noqa: PLC0415
    from orderflow_core.ports import CallContext  # noqa: PLC0415
    from orderflow_core.states import StepKind  # noqa: PLC0415
    from orderflow_http.telemetry import Telemetry  # noqa: PLC0415

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    def sdk(sampler: Any = None) -> TracerProvider:
        provider = TracerProvider(sampler=sampler)  # None: the SDK's, every span recorded
        provider.add_span_processor(BatchSpanProcessor(Dropping()))
        return provider

    ratio = tracing.DEFAULT_SAMPLE_RATIO
    default = tracing.default_sampler(ratio)
    claim = Claim(uuid.uuid4(), uuid.uuid4(), StepKind.RESERVE, 1, "w", datetime.now(UTC))
    call = CallContext(claim.order_id, claim.step_id, "key")
    observers: list[tuple[str, Any]] = [
        ("no observer (the core's default)", NullObserver()),
        ("telemetry, metrics and tracing off", Telemetry(metrics=False, tracing=False)),
        ("tracing API without an SDK", Telemetry(metrics=False)),
        ("metrics", Telemetry(tracing=False)),
        ("spans recorded (SDK)", Telemetry(metrics=False, tracer_provider=sdk())),
        (f"metrics + {ratio:.0%} sampled (the default)", Telemetry(tracer_provider=sdk(default))),
        ("metrics + spans recorded", Telemetry(tracer_provider=sdk())),
    ]
    for label, observer in observers:
        best = float("inf")
        for _ in range(5):
            began = time.process_time()
            for _ in range(iterations):
                with observer.step_attempt(claim, "w", None) as attempt:
                    if isinstance(observer, Telemetry):
                        with observer.external_call("warehouse", "reserve", call) as called:
                            observer.inject({})
                            called.finished("succeeded")
                    attempt.finished("succeeded")
            best = min(best, time.process_time() - began)
        print(f"{label:36s} {1e6 * best / iterations:7.2f} µs per attempt with one call")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.telemetry", description=__doc__)
    p.add_argument(
        "--database-url", default=os.environ.get("ORDERFLOW_BENCH_DATABASE_URL", DEFAULT_URL)
    )
    p.add_argument("--orders", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3, help="off/on pairs, each run side by side")
    p.add_argument(
        "--modes",
        type=lambda text: text.split(","),
        default=["otlp"],
        help="comma list of otlp, otlp-all, metrics (each compared with off)",
    )
    p.add_argument(
        "--sampler",
        default=None,
        help="OTEL_TRACES_SAMPLER for the `otlp` mode (default: orderflow's)",
    )
    p.add_argument(
        "--ratio",
        type=float,
        default=None,
        help="OTEL_TRACES_SAMPLER_ARG for the `otlp` mode: the share of orders traced (default: "
        "orderflow's, 0.01)",
    )
    p.add_argument("--micro", action="store_true", help="time the observer alone")
    p.add_argument("--iterations", type=int, default=20000)
    args = p.parse_args()
    if args.micro:
        micro(args.iterations)
        return
    for mode in args.modes:
        if mode not in (*SAMPLERS, "metrics", "off"):  # off: an A/A check of the pairing
            p.error(f"unknown mode {mode!r}")
    summary = compare(args)
    for mode, row in summary.items():
        print(mode, row)


if __name__ == "__main__":
    main()

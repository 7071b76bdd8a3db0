"""The benchmark's alternated pairs: each pair's ratio, their mean and spread per mocks latency,
and the line the report prints for them."""

from __future__ import annotations

from bench import report
from bench.run import parse_args


def test_each_pair_gives_a_ratio_and_the_pairs_of_a_latency_their_mean_and_spread() -> None:
    pairs = [
        {"mocks_latency_ms": 0, "ours": 300.0, "peer": 400.0},
        {"mocks_latency_ms": 20, "ours": 180.0, "peer": 200.0},
        {"mocks_latency_ms": 0, "ours": 360.0, "peer": 400.0},
        {"mocks_latency_ms": 0, "ours": 330.0, "peer": None},  # the peer's run failed
    ]
    assert report.pair_summary(pairs) == [
        {"mocks_latency_ms": 0, "ratios": [0.75, 0.9], "mean": 0.82, "min": 0.75, "max": 0.9},
        {"mocks_latency_ms": 20, "ratios": [0.9], "mean": 0.9, "min": 0.9, "max": 0.9},
    ]
    lines = report._pair_lines({"pairs": pairs, "pair_summary": report.pair_summary(pairs)})
    row = ("| pgqueuer-asyncpg | 0 | 300.0 / 360.0 / 330.0 | 400.0 / 400.0 / None | 0.75 / 0.9 | "
           "**0.82** (0.75–0.9) |")
    assert row in lines


def test_pairs_run_by_default_and_not_in_the_quick_run() -> None:
    assert parse_args([]).pairs == 3
    assert parse_args(["--quick"]).pairs == 0
    assert report.pair_summary([]) == []

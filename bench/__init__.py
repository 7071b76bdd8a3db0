"""The benchmark of issue 8: `python -m bench` (see docs/benchmark.md)."""

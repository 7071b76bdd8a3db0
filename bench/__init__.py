"""The benchmark: `python -m bench` runs it whole; its method and latest results are in
docs/benchmark.md (the site's performance page)."""

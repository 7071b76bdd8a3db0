"""Hypothesis profiles, chosen by `HYPOTHESIS_PROFILE` (default `dev`):

- `dev` — quick local runs; `ci` — the stateful suite with 200 examples;
- `long` — the deep run: 20,000 examples of the in-memory stateful machine (the PostgreSQL
  machine reads the profile name and runs 300); run before resolving any change to the core or
  a store (docs/how-to/testing.md, "The deep run");
- `mutation` — what mutmut runs under (selected by itself whenever `MUTANT_UNDER_TEST` is set):
  derandomized and with no example database, so every mutant meets the same examples and a
  saved failing example of one mutant cannot kill another.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("long", settings.get_profile("ci"), max_examples=20_000)
settings.register_profile(
    "mutation", settings.get_profile("ci"), derandomize=True, database=None, print_blob=False
)
settings.load_profile(
    "mutation"
    if "MUTANT_UNDER_TEST" in os.environ
    else os.environ.get("HYPOTHESIS_PROFILE", "dev")
)

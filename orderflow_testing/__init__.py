"""orderflow's property-testing kit (`pip install orderflow[testing]`): a store wrapper that
records who wrote what, hypothesis strategies, and the six-rule stateful machine, reusable
against any `OrderStore`."""

from __future__ import annotations

"""orderflow's property-testing kit (`pip install 'durable-orderflow[testing]'`).

- `machine_for(fresh_store)` / `OrderflowMachine`: the six-rule stateful machine (two
  executors, crashes, stalls, clock jumps, every scripted fault, random commands) against any
  `OrderStore` an embedder writes;
- `orderflow_testing.strategies`: states, allowed and refused edges of a process version,
  order lines, commands, scripted outcomes, faults and checkpoints;
- `RecordingStore`: a store wrapper that logs who wrote what (rule 6 is about writers);
- `orderflow_testing.rules`: the six rules as checks over a snapshot taken through the port.
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401  # the kit's one dependency beyond the core
except ModuleNotFoundError as missing:  # pragma: no cover - only without the extra
    raise ImportError(
        "orderflow_testing needs hypothesis: pip install 'durable-orderflow[testing]'"
    ) from missing

from orderflow_testing.machine import OrderflowMachine, in_memory_store, machine_for
from orderflow_testing.recording import RecordingStore, Write

__all__ = ["OrderflowMachine", "RecordingStore", "Write", "in_memory_store", "machine_for"]

"""The allowed transitions of the order lifecycle, per process version (see process.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from orderflow_core.errors import InvalidTransition
from orderflow_core.process import NEWEST, PROCESSES
from orderflow_core.states import OrderState as S

Table = Mapping[tuple[S, S], str]


class _Tables(Mapping[int, Table]):
    """The transition tables of the known process versions, read live from `PROCESSES` (so a
    version added later has its table here too)."""

    def __getitem__(self, version: int) -> Table:
        return PROCESSES[version].transitions

    def __iter__(self) -> Iterator[int]:
        return iter(PROCESSES)

    def __len__(self) -> int:
        return len(PROCESSES)


# (from, to) -> what triggers it, by process version. Every state change goes through `check`.
TRANSITIONS: Mapping[int, Table] = _Tables()

# The version new orders get unless configured otherwise (ORDERFLOW_PROCESS_VERSION): the newest.
PROCESS_VERSION = NEWEST


def is_allowed(current: S, requested: S, version: int = PROCESS_VERSION) -> bool:
    """Whether the table of `version` has the edge current -> requested."""
    return (current, requested) in TRANSITIONS[version]


def check(current: S, requested: S, version: int = PROCESS_VERSION) -> str:
    """Return the trigger of an allowed edge, or raise `InvalidTransition`."""
    trigger = TRANSITIONS[version].get((current, requested))
    if trigger is None:
        raise InvalidTransition(current.value, requested.value)
    return trigger

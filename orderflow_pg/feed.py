"""Where the relay may publish the outbox through: a seq no running transaction can undercut.

Outbox seqs are handed out before commit, so a row with a smaller seq than one already visible
can still commit. The feed is the rows up to one position (`outbox_feed`), and it must only
grow at its end, so the relay advances the position to a seq `top` only once every
transaction that was writing events when `top` was seen has ended. Each relay pass observes
the newest visible seq and the transaction ids of this database's writers then running
(`feed_horizon`: the holders of the writers' shared advisory lock, which `apply_changes` takes
with its transaction id before it numbers an event); an observation becomes safe on a later
pass that no longer sees any of its transactions (or at once, when none was running).
Transaction ids are not reused within the lifetime of a pass. A writer stalled between its
events and its COMMIT holds the feed back until it ends (commit, rollback, or its session
closed); the feed is append-only at that price.
"""

from __future__ import annotations

from collections.abc import Iterable

KEPT_OBSERVATIONS = 64  # at most this many pending observations; older ones are dropped


class FeedHorizon:
    """The newest seq known to be safe, from successive observations (one per relay pass)."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, frozenset[str]]] = []
        self._safe: int | None = None

    def observe(self, top: int | None, writing: Iterable[str]) -> int | None:
        """Record one observation; return the newest seq that no running transaction undercuts.

        `top` is the newest committed seq (None: no event yet), `writing` the transaction ids
        running when it was read. None until some seq is safe.
        """
        running = frozenset(writing)
        still: list[tuple[int, frozenset[str]]] = []
        for seen, waited_for in self._pending:
            if waited_for & running:
                still.append((seen, waited_for))
            else:
                self._advance(seen)
        if top is not None:
            if running:
                still.append((top, running))
            else:
                self._advance(top)
        self._pending = [p for p in still if self._safe is None or p[0] > self._safe]
        del self._pending[: max(0, len(self._pending) - KEPT_OBSERVATIONS)]
        return self._safe

    def _advance(self, seq: int) -> None:
        if self._safe is None or seq > self._safe:
            self._safe = seq

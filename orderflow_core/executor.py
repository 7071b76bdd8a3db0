"""The executor: claims due steps, commits the intent, calls out under a deadline while renewing
the lease, and commits the result only under the generation it claimed (lifecycle rule 6)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random as _random
from collections.abc import Awaitable, Callable, Sequence
from uuid import UUID

import attrs

from orderflow_core import ids, logfields, saga
from orderflow_core.commits import CommitQueue
from orderflow_core.context import Context, Timing
from orderflow_core.errors import ConcurrentUpdate, NotFound, StoreUnavailable
from orderflow_core.model import Change, Claim, OrderAggregate
from orderflow_core.observe import NULL_OBSERVER, AttemptObservation, Observer
from orderflow_core.outcomes import Outcome, Succeeded, UnknownOutcome, outcome_name
from orderflow_core.ports import ClaimsWithStarts, Clock, Services, UnitOfWork
from orderflow_core.steps.definition import CallPlan
from orderflow_core.steps.registry import perform

log = logging.getLogger("orderflow.executor")

# A hook called at `before_call`, `after_call` and `after_commit`; tests stop or crash it there.
Checkpoint = Callable[[str, Claim], Awaitable[None]]


async def _no_checkpoint(name: str, claim: Claim) -> None:
    del name, claim


class LeaseLost(Exception):
    """The step's lease was taken or ran out while the call was in flight."""


@attrs.frozen
class _OrderFacts:
    """What the executor keeps of a step's order between deciding and the call, read from the
    aggregate while it was locked: the creating request's trace context (for the attempt
    span's link) and the process version (whether a success ends the main sequence,
    `saga.success_ends_sequence`)."""

    trace_parent: str | None
    process_version: int | None

    @classmethod
    def of(cls, agg: OrderAggregate) -> _OrderFacts:
        return cls(agg.order.trace_parent, agg.order.process_version)


_NO_FACTS = _OrderFacts(None, None)


@attrs.frozen
class _Started:
    """What deciding a claim's start found, for the executor to act on once the store returned
    it: the call to make (None: none), whether an earlier attempt of the step never reported
    back (a takeover), and the order's facts."""

    plan: CallPlan | None
    taken_over: bool = False
    facts: _OrderFacts = _NO_FACTS


@attrs.frozen
class _Decided:
    """What deciding an attempt's result found, acted on once the store returned it: the step
    it chained (None: none), why the result was rejected as stale (None: it was not), the
    outcome its change records for the attempt, and the order's facts."""

    following: tuple[Claim, CallPlan] | None
    rejected: str | None
    recorded: str | None
    facts: _OrderFacts


class Executor:
    """Runs steps for one worker; any number of executors may share one store."""

    def __init__(
        self,
        *,
        store: UnitOfWork,
        services: Services,
        clock: Clock,
        worker_id: str,
        timing: Timing | None = None,
        checkpoint: Checkpoint | None = None,
        new_id: Callable[[], UUID] = ids.uuid7,
        random: Callable[[], float] = _random.random,
        observer: Observer = NULL_OBSERVER,
    ) -> None:
        self.store = store
        # Claims and their starts in one store call, when the store offers it.
        self._batched = store if isinstance(store, ClaimsWithStarts) else None
        # Results and the intents they chain commit through one writer, grouped (group commit).
        self.commits = CommitQueue(store, observer=observer)
        self.services = services
        self.clock = clock
        self.worker_id = worker_id
        self.timing = timing or Timing()
        self._checkpoint = checkpoint or _no_checkpoint
        self._new_id = new_id
        self._random = random
        self.observer = observer
        # The facts of the order of each step about to run, by step id, from its start's or
        # its chaining result's decision until its attempt begins.
        self._facts: dict[UUID, _OrderFacts] = {}
        self._in_flight: set[asyncio.Task[None]] = set()
        # Tasks whose slot was given back when their last result was decided: they only wait
        # for its commit (a new claim may use the slot meanwhile); `stop` still waits for them.
        self._finishing: set[asyncio.Task[None]] = set()
        # The run loop's claim under way (None between claims), and the slots it holds until
        # the steps it starts are tasks of their own.
        self._claiming: asyncio.Task[None] | None = None
        self._reserved = 0
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        # Whether another claim may find work before the next poll: the last claim was cut
        # off by the free slots (a backlog), or a wake-up came in since it ran.
        self._backlog = False
        self._notified = False

    def _ctx(self) -> Context:
        return Context(self.clock.now(), self.worker_id, self.timing, self._new_id, self._random)

    @property
    def free_slots(self) -> int:
        return self.timing.max_concurrent - len(self._in_flight) - self._reserved

    def wake(self) -> None:
        """Work may be waiting: claim now instead of at the next poll (a LISTEN/NOTIFY hook
        calls this).

        While busy, claims batch themselves as commits do: the run loop claims for every free
        slot at once, and the slots that free while a claim and its start are under way go
        into the next claim. No slot waits for others to free (a slot left idle until a
        quarter of them were free cost ~10 % of the throughput at 20 ms calls).
        """
        self._notified = True
        self._wake_if_room()

    def _wake_if_room(self) -> None:
        if self.free_slots > 0:
            self._wake.set()

    def _wanted(self, limit: int | None) -> int:
        """How many steps a claim asks for: `limit`, at most the free slots."""
        return self.free_slots if limit is None else min(limit, self.free_slots)

    async def claim(self, limit: int | None = None) -> list[Claim]:
        """Lease up to `limit` (default: the free slots) due steps."""
        wanted = self._wanted(limit)
        if wanted <= 0:
            return []
        claims = await self.store.claim_due(
            owner=self.worker_id, now=self.clock.now(), limit=wanted, lease_s=self.timing.lease_s
        )
        self.observer.claimed(len(claims))
        return claims

    async def claim_and_start(
        self, limit: int | None = None
    ) -> tuple[int, list[tuple[Claim, CallPlan]]]:
        """Lease up to `limit` (default: the free slots) due steps and commit the intents they
        start: in the same store call when the store offers it
        (`ClaimsWithStarts.claim_and_start`: one transaction on PostgreSQL, so a claim never
        stands without its intent), else the claim and then each start; how many were
        claimed, and those that have a call to make, with their plans."""
        wanted = self._wanted(limit)
        if wanted <= 0:
            return 0, []
        return await self._claim_started(wanted)

    async def _claim_started(self, wanted: int) -> tuple[int, list[tuple[Claim, CallPlan]]]:
        now = self.clock.now()
        results: Sequence[tuple[Claim, _Started | BaseException]]
        if self._batched is not None:
            results = await self._batched.claim_and_start(
                owner=self.worker_id,
                now=now,
                limit=wanted,
                lease_s=self.timing.lease_s,
                start=self._decide_start,
            )
        else:  # the contract alone: the claim, then its starts through the writer
            claims = await self.store.claim_due(
                owner=self.worker_id, now=now, limit=wanted, lease_s=self.timing.lease_s
            )
            results = await self._decide_starts(claims)
        self.observer.claimed(len(results))
        return len(results), self._started(results)

    async def run_once(self, limit: int | None = None) -> int:
        """Claim due steps and run them to the end; returns how many were claimed."""
        claimed, started = await self.claim_and_start(limit)
        await asyncio.gather(*(self._guarded(c, p) for c, p in started))
        return claimed

    async def run_claimed(self, claims: list[Claim]) -> None:
        """Start steps claimed elsewhere (`claim`) through the executor's writer, their intents
        in one store call, and run each to the end: call, result, and, when chaining, the
        steps those results made due."""
        started = await self._start(claims)
        await asyncio.gather(*(self._guarded(c, p) for c, p in started))

    async def _start(self, claims: list[Claim]) -> list[tuple[Claim, CallPlan]]:
        """Record the intents of a claim batch (`decide_start`) through the executor's one
        writer, so they share group commits with the results under way; the claims that have
        a call to make, with their plans. What failed is left to lease expiry."""
        return self._started(await self._decide_starts(claims))

    async def _decide_starts(
        self, claims: list[Claim]
    ) -> list[tuple[Claim, _Started | BaseException]]:
        if not claims:
            return []
        results = await asyncio.gather(
            *(
                self.commits.update(c.order_id, functools.partial(self._decide_start, c))
                for c in claims
            ),
            return_exceptions=True,
        )
        return list(zip(claims, results, strict=True))

    def _started(
        self, results: Sequence[tuple[Claim, _Started | BaseException]]
    ) -> list[tuple[Claim, CallPlan]]:
        """The started claims with a call to make; the others logged (what failed is left to
        lease expiry). What the starts found is acted on here, once their store call returned:
        a decision may be taken more than once (a store may decide again on a fresh read), so
        it changes nothing itself."""
        unavailable = [r for _, r in results if isinstance(r, StoreUnavailable)]
        if unavailable:
            log.warning(
                "%d claimed steps left to lease expiry: %s", len(unavailable), unavailable[0]
            )
        started: list[tuple[Claim, CallPlan]] = []
        for claim, result in results:
            if isinstance(result, NotFound | ConcurrentUpdate):
                log.warning("step %s left to lease expiry: %s", claim.step_id, result)
            elif isinstance(result, StoreUnavailable | asyncio.CancelledError):
                pass  # counted above, or the writer was stopped: the lease runs out
            elif isinstance(result, BaseException):  # a bug must not stop the executor
                log.error("step %s failed to start", claim.step_id, exc_info=result)
            else:
                if result.taken_over:
                    self.observer.lease_taken_over(claim)
                if result.plan is not None:
                    self._facts[claim.step_id] = result.facts
                    started.append((claim, result.plan))
        return started

    def _decide_start(self, claim: Claim, agg: OrderAggregate) -> tuple[Change, _Started]:
        """`saga.decide_start`, with what the executor acts on once it is committed: a
        takeover (an earlier attempt of the step never reported back) for the observer, and
        the order's facts. Free of side effects: a store may call it twice."""
        ctx = self._ctx()
        change, plan = saga.decide_start(agg, claim, ctx)
        step = agg.step(claim.step_id)
        if step is None or not saga.guard_holds(agg, claim, ctx):
            return change, _Started(plan)
        taken_over = any(a.outcome is None and a.attempt < claim.attempt for a in step.attempts)
        return change, _Started(plan, taken_over, _OrderFacts.of(agg))

    async def run(self) -> None:
        """Claim and run steps until `stop()`; polls, and wakes early on `wake()`."""
        while not self._stopping.is_set():
            self._wake.clear()  # before claiming: a wake-up during the claim is not lost
            self._notified = False
            # A task of its own, so `stop` waits for the claim under way and the steps it
            # starts (their intents are committed with it) instead of reporting them finished.
            self._claiming = asyncio.create_task(self._claim_and_spawn(self.free_slots))
            try:
                await self._claiming
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                # `stop` cancelled a claim that outlasted its grace period: the loop ends
            finally:
                self._claiming = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.timing.poll_interval_s):
                    await _first(self._wake.wait(), self._stopping.wait())

    async def _claim_and_spawn(self, wanted: int) -> None:
        """One claim for the free slots; each started step runs in a task of its own, which
        holds its slot from here on."""
        if wanted <= 0:
            return
        self._reserved = wanted  # the claim's slots, held while its intents are committed
        try:
            claimed, started = await self._claim_started(wanted)
        except StoreUnavailable as exc:
            log.warning("claim failed: %s", exc)
            return
        finally:
            self._reserved = 0
        self._backlog = claimed >= wanted
        for claim, plan in started:
            task = asyncio.create_task(self._guarded(claim, plan))
            self._in_flight.add(task)
            task.add_done_callback(self._forget)

    async def stop(self, grace_s: float = 10.0) -> int:
        """Stop claiming; let in-flight steps finish within `grace_s`, then abandon them to
        lease expiry (another executor takes them over; nothing half-done is committed).
        Returns how many were abandoned."""
        self._stopping.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        abandoned = 0
        claiming = self._claiming
        if claiming is not None:  # its steps run in tasks of their own once it returns
            reserved = self._reserved
            await asyncio.wait({claiming}, timeout=grace_s)
            if not claiming.done():  # its intents may be committed: their leases run out
                claiming.cancel()
                await asyncio.gather(claiming, return_exceptions=True)
                abandoned += reserved
        running = self._in_flight | self._finishing
        if running:
            _, pending = await asyncio.wait(running, timeout=max(deadline - loop.time(), 0))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            abandoned += len(pending)
        # A commit under way finishes (or is abandoned at the deadline, as a crash would).
        try:
            async with asyncio.timeout_at(max(deadline, loop.time() + 0.001)):
                await self.commits.drain()
        except TimeoutError:
            self.commits.cancel()
        return abandoned

    async def _guarded(self, claim: Claim, plan: CallPlan) -> None:
        """Call, commit the result, and go on with each step that result chained; what fails
        is logged and left to lease expiry."""
        # The attempt under way: a chain goes on from the claimed step to the ones its results
        # made due, and a warning must name the step abandoned, not the chain's first.
        current: tuple[Claim, CallPlan] | None = (claim, plan)
        try:
            while current is not None:
                claim = current[0]
                current = await self._attempt(*current)
        except (StoreUnavailable, NotFound, LeaseLost, ConcurrentUpdate) as exc:
            log.warning(
                "step %s (%s) attempt %s of order %s left to lease expiry: %s",
                claim.step_id,
                claim.kind.value,
                claim.attempt,
                claim.order_id,
                exc,
            )
        except Exception:
            log.exception("step %s attempt %s failed unexpectedly", claim.step_id, claim.attempt)
        finally:
            # Leave the in-flight set before waking, so the wake-up counts this slot as free
            # (the done-callback would discard it only after this returns).
            task = asyncio.current_task()
            if task is not None:
                self._forget(task)
            self._slot_freed()

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._finishing.discard(task)

    def _slot_freed(self) -> None:
        # A slot is free: claim again if work may be waiting. When chaining, without a
        # backlog or a wake-up a claim would find nothing (the step a result made due was
        # chained here; other new steps are announced by NOTIFY or found by the poll), so
        # it is not worth a transaction.
        if self._backlog or self._notified or not self.timing.chain_steps:
            self._wake_if_room()

    def _give_back_slot(self, task: asyncio.Task[None]) -> None:
        """`task` holds no slot from now on: it only waits for its last commit."""
        if task in self._in_flight:
            self._in_flight.discard(task)
            self._finishing.add(task)
            self._slot_freed()

    async def _attempt(self, claim: Claim, plan: CallPlan) -> tuple[Claim, CallPlan] | None:
        logfields.bind_step(claim, self.worker_id)  # log lines from here on name this attempt
        facts = self._facts.pop(claim.step_id, _NO_FACTS)
        with self.observer.step_attempt(claim, self.worker_id, facts.trace_parent) as observed:
            return await self._observed_attempt(claim, plan, observed, facts.process_version)

    async def _observed_attempt(
        self, claim: Claim, plan: CallPlan, observed: AttemptObservation, version: int | None
    ) -> tuple[Claim, CallPlan] | None:
        await self._checkpoint("before_call", claim)
        if self.clock.now() >= claim.lease_expires_at:
            # Stalled between intent and call: another executor may own the step by now.
            raise LeaseLost(f"lease of step {claim.step_id} ran out before the call")
        outcome = await self._call_with_lease(claim, plan)
        await self._checkpoint("after_call", claim)
        chain = (
            self.timing.chain_steps
            and not self._stopping.is_set()
            and not _ends_sequence(version, claim, outcome)
        )
        observed.finished(outcome_name(outcome))
        if not chain:
            # This result chains nothing (chaining off, stopping, or a success that ends the
            # main sequence), so it is the task's last commit: its slot is given back now,
            # free for a claim while the commit runs. Decided with `chain` false, it cannot
            # chain however often the store decides it.
            task = asyncio.current_task()
            if task is not None:
                self._give_back_slot(task)

        def decide(agg: OrderAggregate) -> tuple[Change, _Decided]:
            # Free of side effects: a store may decide again (on a fresh read, on a retry), so
            # what the decision found is acted on below, once the store returned it.
            ctx = self._ctx()
            rejected = None if saga.guard_holds(agg, claim, ctx) else _why_stale(agg, claim)
            change, following = saga.decide_result(agg, claim, outcome, ctx, chain=chain)
            recorded = _recorded_outcome(change, claim)
            return change, _Decided(following, rejected, recorded, _OrderFacts.of(agg))

        try:
            decided = await self.commits.update(claim.order_id, decide)
        except ConcurrentUpdate:
            self.observer.stale_result_rejected(claim)  # fenced off when written
            raise
        # The attempt is observed under the outcome it is recorded with: a step may read an
        # answer that went through as no success (a status check finding the charge still
        # pending is recorded `pending`), and the counters say what the rows say.
        if decided.recorded is not None:
            observed.finished(decided.recorded)
        if decided.rejected is not None:
            self.observer.stale_result_rejected(claim)
            log.warning(
                "result of step %s attempt %s rejected (%s), not stored: %s",
                claim.step_id,
                claim.attempt,
                decided.rejected,
                outcome_name(outcome),
            )
        following = decided.following
        if following is not None:
            self._facts[following[0].step_id] = decided.facts
        await self._checkpoint("after_commit", claim)
        # `decide_result` chains only while the claim's guard holds on the locked aggregate it
        # was given; a store that fences such a change off after all raises instead of
        # returning (what `update` promises), so a following claim here was committed.
        return following

    async def _call_with_lease(self, claim: Claim, plan: CallPlan) -> Outcome:
        remaining_s = (claim.lease_expires_at - self.clock.now()).total_seconds()
        if self.timing.call_timeout_s < min(remaining_s, self.timing.heartbeat_s):
            # The call's own deadline ends before the lease does and before the first
            # heartbeat would fire: renewing could not matter, so spare the extra task.
            return await self._call(plan)
        call = asyncio.create_task(self._call(plan))
        heartbeat = asyncio.create_task(self._heartbeat(claim, call))
        try:
            return await call
        except asyncio.CancelledError:
            if heartbeat.done() and not heartbeat.cancelled() and heartbeat.result():
                raise LeaseLost(f"lease of step {claim.step_id} lost during the call") from None
            raise
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat

    async def _call(self, plan: CallPlan) -> Outcome:
        try:
            async with asyncio.timeout(self.timing.call_timeout_s):
                return await perform(plan, self.services)
        except TimeoutError:
            return UnknownOutcome(f"no answer within {self.timing.call_timeout_s:g} s")
        except Exception as exc:  # an adapter bug must not lose the step: the outcome is unknown
            log.exception("call of %s raised", plan.kind.value)
            return UnknownOutcome(f"call raised {type(exc).__name__}")

    async def _heartbeat(self, claim: Claim, call: asyncio.Task[Outcome]) -> bool:
        """Renew the lease every heartbeat; cancel the call when it is lost. True if lost."""
        while not call.done():
            await self.clock.sleep(self.timing.heartbeat_s)
            try:
                held = await self.store.renew_lease(
                    claim, now=self.clock.now(), lease_s=self.timing.lease_s
                )
            except StoreUnavailable:
                continue  # the lease check at commit time still protects the result
            except Exception:  # a store bug must not end the heartbeat or lose the call
                log.exception("renewing the lease of step %s failed", claim.step_id)
                continue
            if not held:
                call.cancel()
                return True
        return False


def _ends_sequence(version: int | None, claim: Claim, outcome: Outcome) -> bool:
    """The attempt's success ends its order's main sequence (version unknown: not known)."""
    return (
        version is not None
        and isinstance(outcome, Succeeded)
        and saga.success_ends_sequence(version, claim.kind)
    )


def _why_stale(aggregate: OrderAggregate, claim: Claim) -> str:
    """Why a result no longer belongs to the step: taken over, or only the lease ran out."""
    return "lease_expired" if aggregate.holds(claim.guard) else "stale_generation"


async def _first(*aws: Awaitable[object]) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _recorded_outcome(change: Change, claim: Claim) -> str | None:
    """The outcome `change` records for the claim's attempt, if it records one."""
    for step in change.steps:
        if step.step_id == claim.step_id:
            for attempt in step.attempts:
                if attempt.attempt == claim.attempt and attempt.outcome is not None:
                    return str(attempt.outcome)
    return None

"""The per-service bulkhead: admission, cancellation and exactly-once slot release."""

from __future__ import annotations

import asyncio

import pytest

from orderflow_http.bulkhead import Bulkhead, BulkheadBusyError
from tests_core.waiting import until


def test_never_more_than_n_calls_are_in_flight_under_100_concurrent_calls() -> None:
    async def scenario() -> tuple[int, int]:
        bulkhead = Bulkhead(5)
        gate = asyncio.Event()
        peak = 0

        async def one_call() -> None:
            nonlocal peak
            async with bulkhead.slot():
                peak = max(peak, bulkhead.in_flight)
                await gate.wait()
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(one_call()) for _ in range(100)]
        await until(lambda: bulkhead.in_flight == 5 and bulkhead.waiting == 95)
        gate.set()
        await asyncio.gather(*tasks)
        return peak, bulkhead.in_flight

    assert asyncio.run(scenario()) == (5, 0)


def test_a_cancelled_waiter_takes_no_slot() -> None:
    async def scenario() -> None:
        bulkhead = Bulkhead(1)
        release = asyncio.Event()

        async def holder() -> None:
            async with bulkhead.slot():
                await release.wait()

        async def waiter() -> None:
            async with bulkhead.slot():
                pytest.fail("a cancelled waiter must never run")

        held = asyncio.create_task(holder())
        await until(lambda: bulkhead.in_flight == 1)
        waiting = asyncio.create_task(waiter())
        await until(lambda: bulkhead.waiting == 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert (bulkhead.in_flight, bulkhead.waiting) == (1, 0)
        release.set()
        await held
        assert bulkhead.in_flight == 0
        async with bulkhead.slot():
            assert bulkhead.in_flight == 1

    asyncio.run(scenario())


def test_a_waiter_cancelled_just_as_it_is_handed_a_slot_passes_the_slot_on() -> None:
    async def scenario() -> None:
        bulkhead = Bulkhead(1)
        second_ran = asyncio.Event()

        async def first() -> None:
            async with bulkhead.slot():
                pytest.fail("cancelled before it could run")

        async def second() -> None:
            async with bulkhead.slot():
                second_ran.set()

        async with bulkhead.slot():
            a = asyncio.create_task(first())
            b = asyncio.create_task(second())
            await until(lambda: bulkhead.waiting == 2)
        # Leaving the block handed the slot to `first`; cancel it before it resumes.
        a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a
        await b
        assert second_ran.is_set()
        assert (bulkhead.in_flight, bulkhead.waiting) == (0, 0)

    asyncio.run(scenario())


def test_an_exception_inside_the_call_frees_its_slot() -> None:
    async def scenario() -> int:
        bulkhead = Bulkhead(1)
        with pytest.raises(RuntimeError, match="boom"):
            async with bulkhead.slot():
                raise RuntimeError("boom")
        return bulkhead.in_flight

    assert asyncio.run(scenario()) == 0


def test_a_cancellation_inside_the_call_frees_its_slot() -> None:
    async def scenario() -> int:
        bulkhead = Bulkhead(1)
        never = asyncio.Event()

        async def stuck() -> None:
            async with bulkhead.slot():
                await never.wait()

        task = asyncio.create_task(stuck())
        await until(lambda: bulkhead.in_flight == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return bulkhead.in_flight

    assert asyncio.run(scenario()) == 0


def test_reject_answers_busy_at_once_without_queueing() -> None:
    async def scenario() -> None:
        bulkhead = Bulkhead(1, "reject")
        async with bulkhead.slot():
            with pytest.raises(BulkheadBusyError):
                async with bulkhead.slot():
                    pytest.fail("admitted past the limit")
            assert (bulkhead.in_flight, bulkhead.waiting) == (1, 0)
        async with bulkhead.slot():
            assert bulkhead.in_flight == 1

    asyncio.run(scenario())


def test_a_slot_is_released_only_once_and_only_by_the_bulkhead_that_granted_it() -> None:
    async def scenario() -> None:
        bulkhead, other = Bulkhead(1), Bulkhead(1)
        async with bulkhead.slot() as token:
            with pytest.raises(AssertionError, match="granted"):
                other._release(token)
        with pytest.raises(AssertionError, match="exactly once"):
            bulkhead._release(token)

    asyncio.run(scenario())


def test_a_bulkhead_needs_a_positive_limit_and_a_known_policy() -> None:
    with pytest.raises(ValueError, match="limit"):
        Bulkhead(0)
    with pytest.raises(ValueError, match="policy"):
        Bulkhead(1, "drop")  # type: ignore[arg-type]  # the wrong value is the point

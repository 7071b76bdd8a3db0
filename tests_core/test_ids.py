"""Time-ordered ids (orderflow_core.ids): layout, order, and the derived event ids."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import UTC, datetime
from uuid import UUID

from hypothesis import given
from hypothesis import strategies as st

from orderflow_core import Executor, OrderService
from orderflow_core.context import Context
from orderflow_core.ids import event_id, uuid7

T0_NS = 1_764_000_000_123_456_789  # 2025-11-24, in ns


def _fixed(byte: int) -> Callable[[int], bytes]:
    return lambda n: bytes([byte]) * n


def test_a_uuid7_carries_its_millisecond_then_version_7_and_the_rfc_variant() -> None:
    made = uuid7(time_ns=lambda: T0_NS, random_bytes=_fixed(0xFF))
    assert made.version == 7
    assert made.variant == "specified in RFC 4122"
    assert made.int >> 80 == T0_NS // 1_000_000
    low = uuid7(time_ns=lambda: T0_NS, random_bytes=_fixed(0x00))
    assert low.version == 7
    assert low.variant == "specified in RFC 4122"
    assert low.int >> 80 == made.int >> 80
    assert low != made


@given(
    st.integers(0, 2**47),
    st.integers(1, 10**6),
    st.binary(min_size=10, max_size=10),
    st.binary(min_size=10, max_size=10),
)
def test_ids_of_a_later_millisecond_sort_after_those_of_an_earlier_one(
    millis: int, later_by: int, rand_a: bytes, rand_b: bytes
) -> None:
    first = uuid7(time_ns=lambda: millis * 1_000_000, random_bytes=lambda n: rand_a[:n])
    second = uuid7(
        time_ns=lambda: (millis + later_by) * 1_000_000, random_bytes=lambda n: rand_b[:n]
    )
    assert first < second
    assert str(first) < str(second)  # as text too, which is how they reach indexes and logs


def test_ids_drawn_from_the_real_clock_differ_and_do_not_go_back_across_milliseconds() -> None:
    made = [uuid7() for _ in range(2000)]
    assert len(set(made)) == len(made)
    stamps = [u.int >> 80 for u in made]
    assert stamps == sorted(stamps)


def test_an_event_id_is_the_same_for_the_same_order_and_number_and_shares_the_orders_time() -> None:
    order = uuid7(time_ns=lambda: T0_NS)
    first = event_id(order, 1)
    assert first == event_id(order, 1)
    assert first.version == 8
    assert first.variant == "specified in RFC 4122"
    assert first.int >> 80 == order.int >> 80
    numbers = [event_id(order, seq) for seq in range(1, 5001)]
    assert len(set(numbers)) == len(numbers)
    other = uuid7(time_ns=lambda: T0_NS)
    assert event_id(other, 1) != first


def test_event_ids_of_random_order_ids_are_derived_the_same_way() -> None:
    legacy = UUID("5b0e3f8e-52a4-4d5b-9f43-0f3a5b2c9e11")  # an order made before time-ordered ids
    assert event_id(legacy, 7) == event_id(legacy, 7)
    assert event_id(legacy, 7).int >> 80 == legacy.int >> 80


def test_services_executors_and_contexts_draw_time_ordered_ids_by_default() -> None:
    context = Context(datetime(2030, 1, 1, tzinfo=UTC), "test")
    ids = [context.new_id() for _ in range(3)]
    assert all(i.version == 7 for i in ids)
    for made in (OrderService, Executor):
        assert inspect.signature(made).parameters["new_id"].default is uuid7, made

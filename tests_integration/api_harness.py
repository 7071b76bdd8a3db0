"""The REST API over a real socket, wired to in-memory adapters, for the test_api_* tests.

Every answer a test receives is checked against the OpenAPI document on the way: a status the
document does not list for the operation, or a body that does not match its schema, fails the
test that caused it, whatever that test is about.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import Any

import aiohttp
import attrs
import yarl
from jsonschema import (  # type: ignore[import-untyped]  # jsonschema ships no type hints
    Draft202012Validator,
    FormatChecker,
)
from multidict import CIMultiDict
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from orderflow_core.executor import Executor
from orderflow_core.model import Principal
from orderflow_core.ports import OrderStore
from orderflow_core.relay import OutboxRelay
from orderflow_core.service import OrderService, hash_token
from orderflow_core.states import Role
from orderflow_core.testing import FakeClock, InMemoryOrderStore, InMemoryUsers
from orderflow_http.api import create_app, openapi_document
from orderflow_http.api.server import ServerLimits, serving
from orderflow_mocks.sim_adapters import simulated_services
from orderflow_mocks.simulation import Simulator

Run = Callable[[Coroutine[Any, Any, Any]], Any]
TOKENS = {"customer": "tok-customer", "other": "tok-other", "operator": "tok-operator"}
PRINCIPALS = {
    "customer": Principal("order_customer", Role.CUSTOMER),
    "other": Principal("other_customer", Role.CUSTOMER),
    "operator": Principal("order_operator", Role.OPERATOR),
}
ITEMS = [{"sku": "SKU-1", "quantity": 2, "unit_price_minor": 1500}]
ORDER_BODY = {"items": ITEMS, "currency": "RUB"}
DOC = openapi_document()
_DOC_URI = "urn:orderflow:openapi"
_REGISTRY = Registry().with_resource(_DOC_URI, DRAFT202012.create_resource(DOC))
_FORMATS = FormatChecker()


@_FORMATS.checks("date-time", raises=ValueError)  # type: ignore[untyped-decorator]  # as above
def _utc_time(value: object) -> bool:
    """Times on the wire are ISO 8601 in UTC, written with a Z."""
    return not isinstance(value, str) or (
        value.endswith("Z") and datetime.fromisoformat(value).utcoffset() is not None
    )


@attrs.frozen
class Reply:
    """What came back: status, headers and the body (parsed when it is JSON)."""

    status: int
    headers: Mapping[str, str]
    body: Any
    content_type: str

    @property
    def code(self) -> str | None:
        return self.body.get("code") if isinstance(self.body, dict) else None


def _pointer(*parts: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def _operation_of(method: str, path: str) -> tuple[str, dict[str, Any]] | None:
    for template, item in DOC["paths"].items():
        if re.fullmatch(re.sub(r"\{[^/]+\}", "[^/]+", template), path) and method in item:
            return template, item[method]
    return None


def check_conformance(method: str, path: str, reply: Reply) -> None:
    """Fail unless the document lists this status for the operation and the body matches."""
    found = _operation_of(method.lower(), path.partition("?")[0])
    if found is None:
        return
    template, operation = found
    status = str(reply.status)
    assert status in operation["responses"], f"{method} {template} answered undocumented {status}"
    content = operation["responses"][status].get("content", {})
    if not content:
        return
    assert reply.content_type in content, f"{method} {template} {status}: {reply.content_type}"
    pointer = _pointer("paths", template, method.lower(), "responses", status, "content")
    ref = f"{_DOC_URI}#{pointer}{_pointer(reply.content_type, 'schema')}"
    validator = Draft202012Validator({"$ref": ref}, registry=_REGISTRY, format_checker=_FORMATS)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(reply.body)]
    assert not errors, f"{method} {template} {status} does not match the document: {errors}"


@attrs.define
class World:
    """The service and what drives it: the store, a fake clock, simulated services."""

    store: OrderStore
    clock: FakeClock
    sim: Simulator
    service: OrderService
    executor: Executor

    async def drive(self, *, seconds: float = 0.0, rounds: int = 50) -> None:
        """Run every due step until none is left, moving the clock `seconds` between rounds."""
        relay = OutboxRelay(self.store, self.clock)  # type: ignore[arg-type]
        for _ in range(rounds):
            ran = await self.executor.run_once()
            await relay.run_once()
            if not ran:
                if not seconds:
                    return
                self.clock.advance(seconds)

    @property
    def memory(self) -> InMemoryOrderStore:
        assert isinstance(self.store, InMemoryOrderStore)
        return self.store


def make_world(store: OrderStore | None = None) -> World:
    """A service over `store` (default: in memory) with the three test users."""
    clock = FakeClock()
    store = store if store is not None else InMemoryOrderStore()
    users = InMemoryUsers({hash_token(TOKENS[name]): p for name, p in PRINCIPALS.items()})
    sim = Simulator(now=clock.now)
    # On Citus a created order takes the id its key gives (one shard for both)
    service = OrderService(
        store, clock, users, keyed_order_ids=getattr(store, "distributed", False)
    )
    executor = Executor(
        store=store, services=simulated_services(sim), clock=clock, worker_id="test-worker"
    )
    return World(store, clock, sim, service, executor)


@attrs.define
class Api:
    """A client of the live app; `call` returns a conformance-checked `Reply`."""

    base: str
    session: aiohttp.ClientSession

    async def call(
        self,
        method: str,
        path: str,
        *,
        who: str | None = "customer",
        body: object = None,
        raw: bytes | None = None,
        key: str | None = None,
        headers: Mapping[str, str] | CIMultiDict[str] | None = None,
    ) -> Reply:
        """Send one request as `who` (a TOKENS name, or None for no Authorization header)."""
        sent = CIMultiDict(headers or {})
        if who is not None:
            sent.setdefault("Authorization", f"Bearer {TOKENS.get(who, who)}")
        if key is not None:
            sent["Idempotency-Key"] = key
        if body is not None:
            raw = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        url = yarl.URL(self.base + path, encoded=True)
        # The answer itself is what the document describes: a redirect is not followed.
        async with self.session.request(
            method, url, data=raw, headers=sent, allow_redirects=False
        ) as response:
            text = await response.read()
            content_type = response.content_type
            parsed = json.loads(text) if content_type.endswith("json") and text else text
            reply = Reply(response.status, dict(response.headers), parsed, content_type)
        check_conformance(method, path, reply)
        return reply


@asynccontextmanager
async def serve(
    service: OrderService, *, limits: ServerLimits | None = None, **app_options: Any
) -> AsyncIterator[Api]:
    """The app on 127.0.0.1 at a free port (the server `orderflow api` runs, under `limits`),
    and a client session; both closed afterwards."""
    app = create_app(service, **app_options)
    async with (
        serving(app, "127.0.0.1", 0, limits) as (host, port),
        aiohttp.ClientSession() as session,
    ):
        yield Api(f"http://{host}:{port}", session)


@attrs.define
class LiveApi:
    """A synchronous face of `Api` for plain (non-async) tests: one event loop for everything."""

    api: Api
    world: World
    run: Run

    def __call__(self, method: str, path: str, **options: Any) -> Reply:
        reply: Reply = self.run(self.api.call(method, path, **options))
        return reply

    def create(self, who: str = "customer", key: str = "key-1", body: object = None) -> Reply:
        """Create an order; fails the test unless it is accepted."""
        reply = self("POST", "/api/v1/orders", who=who, key=key, body=body or ORDER_BODY)
        assert reply.status == 202, reply.body
        return reply

    def drive(self, *, seconds: float = 0.0) -> None:
        self.run(self.world.drive(seconds=seconds))


@contextmanager
def live(
    world: World | None = None,
    run: Run | None = None,
    **app_options: Any,
) -> Iterator[LiveApi]:
    """Serve `world` (default: a fresh in-memory one) for the duration of a `with` block."""
    world = world or make_world()
    with contextlib.ExitStack() as stack:
        runner: Run = run or stack.enter_context(asyncio.Runner()).run
        context = serve(world.service, **app_options)
        api = runner(context.__aenter__())
        try:
            yield LiveApi(api, world, runner)
        finally:
            runner(context.__aexit__(None, None, None))

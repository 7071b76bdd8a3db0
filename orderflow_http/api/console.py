"""The operator console and the readable API reference: static files shipped in the package.

Nothing here reads data: the pages are plain HTML, CSS and JavaScript that call the REST API
with the operator's token from the browser tab. The Content-Security-Policy lets them load
and call nothing but this server.
"""

from __future__ import annotations

import functools
import importlib.resources
import re

from aiohttp import web

from orderflow_core.errors import NotFound

CONSOLE = "/console"
_ASSET = re.compile(r"^[a-z]+\.(js|css)$")
_TYPES = {"html": "text/html", "js": "text/javascript", "css": "text/css"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@functools.cache
def _read(name: str) -> bytes | None:
    """A file of the console folder, read once; None when there is no such file."""
    path = importlib.resources.files("orderflow_http").joinpath("console", name)
    return path.read_bytes() if path.is_file() else None


def _file(name: str) -> web.Response:
    body = _read(name)
    if body is None:
        raise NotFound(f"no file {name!r} in the console")
    kind = _TYPES[name.rsplit(".", 1)[1]]
    return web.Response(body=body, content_type=kind, charset="utf-8", headers=HEADERS)


async def home(request: web.Request) -> web.Response:
    """GET /: the console is the front page."""
    del request
    raise web.HTTPFound(CONSOLE)


async def console(request: web.Request) -> web.Response:
    """GET /console: the operator console's page."""
    del request
    return _file("index.html")


async def asset(request: web.Request) -> web.Response:
    """GET /console/{asset}: a script or style sheet of the console or the reference page."""
    name = request.match_info["asset"]
    if not _ASSET.match(name):
        raise NotFound(f"no file {name!r} in the console")
    return _file(name)


async def docs(request: web.Request) -> web.Response:
    """GET /api/v1/docs: the OpenAPI document rendered in the browser, from this server only."""
    del request
    return _file("docs.html")


def add_routes(app: web.Application) -> None:
    """The pages' routes (GET only; HEAD is not offered, as for the API)."""
    app.add_routes(
        [
            web.get("/", home, allow_head=False),
            web.get(CONSOLE, console, allow_head=False),
            web.get(CONSOLE + "/{asset}", asset, allow_head=False),
            web.get("/api/v1/docs", docs, allow_head=False),
        ]
    )

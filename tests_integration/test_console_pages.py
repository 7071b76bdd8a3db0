"""The console's pages over a real socket: served from the package, loading nothing from
elsewhere, under a policy that forbids it; `/` leads to the console; unknown files are 404."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest
from api_harness import live

REPO = Path(__file__).resolve().parent.parent
CONSOLE_DIR = REPO / "orderflow_http" / "console"
PAGES = {"/console": "index.html", "/api/v1/docs": "docs.html"}


def test_the_front_page_redirects_to_the_console() -> None:
    with live() as api:
        reply = api("GET", "/", who=None)
        assert reply.status == 302
        assert reply.headers["Location"] == "/console"


@pytest.mark.parametrize("path", sorted(PAGES))
def test_each_page_and_everything_it_loads_is_served_from_this_server(path: str) -> None:
    with live() as api:
        page = api("GET", path, who=None)
        assert page.status == 200
        assert page.content_type == "text/html"
        policy = page.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy
        assert "script-src 'self'" in policy
        assert "connect-src 'self'" in policy
        html = page.body.decode()
        loaded = re.findall(r'(?:src|href)="([^"#]+)"', html)
        assert loaded, "the page loads no script or style"
        for url in loaded:
            assert url.startswith("/"), f"{path} loads {url} from elsewhere"
            if url.startswith("/console/"):
                asset = api("GET", url, who=None)
                assert asset.status == 200, url
                assert asset.content_type in ("text/javascript", "text/css"), url


def test_the_scripts_call_only_this_server() -> None:
    for script in CONSOLE_DIR.glob("*.js"):
        text = script.read_text()
        assert not re.search(r"https?://", text), f"{script.name} names another origin"
        assert "innerHTML" not in text, f"{script.name} writes HTML: server data must be text"


@pytest.mark.parametrize("name", ["nothing.js", "index.html", "..%2Fapi%2Fapp.py", "Console.JS"])
def test_a_file_that_is_not_a_console_asset_is_not_found(name: str) -> None:
    with live() as api:
        reply = api("GET", f"/console/{name}", who=None)
        assert (reply.status, reply.code) == (404, "not_found")


def test_every_console_file_ships_in_the_package() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["orderflow_http"]
    files = [p.name for p in CONSOLE_DIR.iterdir() if p.is_file()]
    assert {"index.html", "docs.html", "console.js", "console.css", "docs.js"} <= set(files)
    for name in files:
        assert any(fnmatch(f"console/{name}", pattern) for pattern in patterns), name


def test_the_sign_in_panel_says_where_an_operator_token_comes_from() -> None:
    with live() as api:
        html = api("GET", "/console", who=None).body.decode()
    panel = html.split('<section id="sign-in"')[1].split("</section>")[0]
    hint = " ".join(panel.split('id="token-hint"')[1].split("</p>")[0].split())
    for source in ("ORDERFLOW_OPERATOR_TOKEN", "orderflow serve", "--role operator"):
        assert source in hint, hint

"""README's code blocks run as written: the embedding snippet in a fresh interpreter, the tour's
curl steps with bash against a real `orderflow serve`. A block is found by the
`<!-- readme-test: NAME -->` comment on the line before its fence."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import citus_fixtures
import psycopg
import pytest
from processes import Proc, base_env, http, serve_as_documented

from orderflow_core import ids

README = Path(__file__).resolve().parent.parent / "README.md"
MARKED_BLOCK = re.compile(
    r"^<!-- readme-test: (?P<name>[\w-]+) -->\n```(?P<lang>\w*)\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)


def readme_block(name: str, lang: str) -> str:
    """The one code block marked `name`; it must directly follow its marker."""
    text = README.read_text()
    markers = text.count(f"<!-- readme-test: {name} -->")
    blocks = [m for m in MARKED_BLOCK.finditer(text) if m["name"] == name]
    assert markers == 1, f"README must mark exactly one block {name!r}, found {markers}"
    assert len(blocks) == 1, f"the marker {name!r} is not directly followed by a code block"
    assert blocks[0]["lang"] == lang, f"block {name!r} is {blocks[0]['lang']!r}, not {lang!r}"
    return blocks[0]["code"]


def test_every_marker_is_directly_followed_by_a_code_block() -> None:
    text = README.read_text()
    markers = re.findall(r"<!-- readme-test: ([\w-]+) -->", text)
    assert set(markers) == {"tour-server", "tour", "embedding", "embedding-output"}
    assert sorted(m["name"] for m in MARKED_BLOCK.finditer(text)) == sorted(markers)


def test_the_embedding_snippet_runs_as_written_and_prints_what_readme_says() -> None:
    code = readme_block("embedding", "python")
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=README.parent.parent,  # not the checkout: the installed package is what runs
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == readme_block("embedding-output", "text")


def _tour_server(procs: list[Proc], pg_url: str) -> tuple[int, int]:
    """`orderflow serve` with the README's exported variables, on free ports."""
    api_port, mocks_port, _ = serve_as_documented(procs, readme_block("tour-server", "sh"), pg_url)
    return api_port, mocks_port


def _run_tour(tour: str, api: str, mocks: str) -> tuple[str, str, str]:
    """Run the tour's block once with bash; checks what it did, returns its three order ids."""
    script = f'set -euo pipefail\n{tour}\nprintf \'\\nTOUR-IDS %s %s %s\\n\' "$ID" "$ID2" "$ID3"\n'
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    ids = re.search(r"^TOUR-IDS (\S+) (\S+) (\S+)$", done.stdout, re.MULTILINE)
    assert ids is not None, done.stdout
    first, unknown, undeliverable = ids.groups()
    assert len({first, unknown, undeliverable}) == 3
    assert "invalid_transition" in done.stdout  # the refused cancel of step 5

    operator = {"Authorization": "Bearer operator-secret-token-1"}
    states = {i: http("GET", f"{api}/orders/{i}", **operator)[1]["state"] for i in ids.groups()}
    assert states == {first: "shipped", unknown: "shipped", undeliverable: "refunded"}
    _, ledger = http("GET", f"{mocks}/_control/ledger?order_id={unknown}")
    charges = ledger["effects"]["charges"]
    assert [c["status"] for c in charges] == ["succeeded"]  # one charge, settled, never repeated
    _, audit = http("GET", f"{api}/orders/{unknown}/audit", **operator)
    assert any(e.get("action") == "manual.reconcile" for e in audit["entries"]), audit
    # Each scripted outcome was used by the tour's own order: none is left for the next order.
    _, everything = http("GET", f"{mocks}/_control/ledger")
    assert everything["scripts"] == []
    return first, unknown, undeliverable


@pytest.mark.postgres
def test_the_tour_runs_as_written_twice_against_one_live_server(
    procs: list[Proc], pg_url: str
) -> None:
    api_port, mocks_port = _tour_server(procs, pg_url)
    tour = readme_block("tour", "sh")
    for documented in ("127.0.0.1:8080", "127.0.0.1:8081"):
        assert documented in tour
    tour = tour.replace("127.0.0.1:8080", f"127.0.0.1:{api_port}")
    tour = tour.replace("127.0.0.1:8081", f"127.0.0.1:{mocks_port}")
    api, mocks = f"http://127.0.0.1:{api_port}/api/v1", f"http://127.0.0.1:{mocks_port}"
    first_run = _run_tour(tour, api, mocks)
    second_run = _run_tour(tour, api, mocks)  # same service, same database: new orders
    assert set(first_run).isdisjoint(second_run)


def _feed(api: str) -> list[dict[str, Any]]:
    """Every event GET /api/v1/events serves, page by page from the start."""
    operator = {"Authorization": "Bearer operator-secret-token-1"}
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        _, page = http("GET", f"{api}/events?after={after}&limit=500", **operator)
        events += page["events"]
        if not page["events"]:
            return events
        after = page["next_after"]


def _each_order_in_the_feed_once_in_its_own_order(api: str, orders: tuple[str, ...]) -> None:
    """Each order's events are in the feed once each, numbered 1..n in feed order (the event id
    is derived from the order and its number), and its state events follow its history."""
    operator = {"Authorization": "Bearer operator-secret-token-1"}
    views = {o: http("GET", f"{api}/orders/{o}", **operator)[1] for o in orders}
    finals = {o: f"order.{views[o]['history'][-1]['to']}" for o in orders}
    deadline = time.monotonic() + 60
    while True:  # the relay publishes below the horizon: poll until each final state is served
        feed = _feed(api)
        served = {(e["order_id"], e["type"]) for e in feed}
        if all((o, finals[o]) in served for o in orders) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    seqs = [e["seq"] for e in feed]
    assert seqs == sorted(set(seqs)), "the feed's numbers are not strictly increasing"
    for order in orders:
        mine = [e for e in feed if e["order_id"] == order]
        expected = [str(ids.event_id(UUID(order), n)) for n in range(1, len(mine) + 1)]
        assert [e["event_id"] for e in mine] == expected, (order, mine)
        transitions = [
            e["payload"]["to"] for e in mine if e["type"] == f"order.{e['payload'].get('to')}"
        ]
        assert transitions == [h["to"] for h in views[order]["history"]], (order, mine)


@pytest.mark.citus
def test_the_tour_runs_as_written_on_a_fresh_distributed_database(
    procs: list[Proc], citus_url: str
) -> None:
    """A fresh coordinator + 2 workers database, `orderflow migrate --distribute`, then the
    tour unchanged against `orderflow serve` on it; the tour's events reach the feed once each,
    each order's in its own order."""
    url = citus_url
    if citus_fixtures.LOCAL:  # the session's own cluster: a database never migrated
        url = citus_fixtures.LOCAL[0].create_database("orderflow_tour")
    migrated = subprocess.run(
        [sys.executable, "-m", "orderflow", "migrate", "--distribute"],
        env=base_env(ORDERFLOW_DATABASE_URL=url, ORDERFLOW_CITUS_SHARD_COUNT="4"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr
    with psycopg.connect(url) as conn:
        distributed = conn.execute(
            "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = 'orders'::regclass"
        ).fetchone()
    assert distributed == (1,)
    api_port, mocks_port = _tour_server(procs, url)
    tour = readme_block("tour", "sh")
    tour = tour.replace("127.0.0.1:8080", f"127.0.0.1:{api_port}")
    tour = tour.replace("127.0.0.1:8081", f"127.0.0.1:{mocks_port}")
    api, mocks = f"http://127.0.0.1:{api_port}/api/v1", f"http://127.0.0.1:{mocks_port}"
    orders = _run_tour(tour, api, mocks)
    _each_order_in_the_feed_once_in_its_own_order(api, orders)

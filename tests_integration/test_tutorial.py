"""The tutorial (docs/tutorial.md) runs as a person types it: its shell blocks after the one that
starts the server, in order, against a real `orderflow serve`. Where a person would look at the
order before going on, the test polls the order for what the text says it shows next."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from processes import Proc, eventually, http, serve_as_documented

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)

# After block N (0 is the one that starts the server), wait until ORDER's FIELD is VALUE: what
# the text says the reader sees before the next block.
WAITS = {
    4: ("$ID", "state", "shipped"),
    6: ("$ID2", "needs_attention", "true"),
    8: ("$ID2", "state", "shipped"),
    10: ("$ID3", "state", "shipping_failed"),
    12: ("$ID3", "state", "refunded"),
}
POLL = """
field() {
  python3 -c 'import json, sys; v = json.load(sys.stdin)
for name in sys.argv[1].split("."): v = v[name]
print(v if isinstance(v, str) else json.dumps(v))' "$1"
}
wait_for() {
  for _ in $(seq 300); do
    [ "$(curl -s "$API/orders/$1" -H "$O" | field "$2")" = "$3" ] && return 0
    sleep 0.2
  done
  echo "order $1: $2 never became $3" >&2; return 1
}
"""


def tutorial_script(api_port: int, mocks_port: int) -> str:
    blocks = SH_BLOCK.findall(TUTORIAL.read_text())
    assert "orderflow serve" in blocks[0]
    assert len(blocks) == 14, f"the tutorial has {len(blocks)} shell blocks; update WAITS"
    parts = ["set -euo pipefail", POLL]
    for index, block in enumerate(blocks[1:], start=1):
        parts.append(block)
        if index in WAITS:
            order, name, value = WAITS[index]
            parts.append(f'wait_for "{order}" {name} {value}')
    parts.append('printf \'\\nTUTORIAL-IDS %s %s %s\\n\' "$ID" "$ID2" "$ID3"')
    script = "\n".join(parts)
    for documented in ("127.0.0.1:8080", "127.0.0.1:8081"):
        assert documented in script
    script = script.replace("127.0.0.1:8080", f"127.0.0.1:{api_port}")
    return script.replace("127.0.0.1:8081", f"127.0.0.1:{mocks_port}")


@pytest.mark.postgres
def test_the_tutorial_runs_as_typed_against_a_live_server(procs: list[Proc], pg_url: str) -> None:
    start = SH_BLOCK.findall(TUTORIAL.read_text())[0]
    api_port, mocks_port, exported = serve_as_documented(procs, start, pg_url)

    done = subprocess.run(
        ["bash", "-c", tutorial_script(api_port, mocks_port)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    # The repeated POST of step 3 is a replay, and says so.
    assert done.stdout.lower().count("idempotent-replayed: true") == 1, done.stdout
    assert "invalid_transition" in done.stdout  # the refused cancel of step 7
    ids = re.search(r"^TUTORIAL-IDS (\S+) (\S+) (\S+)$", done.stdout, re.MULTILINE)
    assert ids is not None, done.stdout
    first, unknown, undeliverable = ids.groups()
    api = f"http://127.0.0.1:{api_port}/api/v1"
    operator = {"Authorization": f"Bearer {exported['ORDERFLOW_OPERATOR_TOKEN']}"}
    states = {i: http("GET", f"{api}/orders/{i}", **operator)[1]["state"] for i in ids.groups()}
    assert states == {first: "shipped", unknown: "shipped", undeliverable: "refunded"}
    _, ledger = http("GET", f"http://127.0.0.1:{mocks_port}/_control/ledger?order_id={unknown}")
    assert [c["status"] for c in ledger["effects"]["charges"]] == ["succeeded"]

    def released() -> bool:  # the refund gave the stock back, through a release step
        _, order = http("GET", f"{api}/orders/{undeliverable}", **operator)
        return bool(order["reservation"]["status"] == "released")

    eventually(released, what="the refunded order's reservation released")

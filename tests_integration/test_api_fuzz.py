"""A property-based fuzzer of the live API, with requests generated from the OpenAPI document.

Each example picks an operation of the document, then a caller, path ids, query parameters, an
Idempotency-Key and a body — drawn from the document's schemas (mostly valid) or from anywhere
(mostly not). The property: never a 5xx, and every answer is one the document lists for the
operation with a body that matches its schema (the harness checks that on every reply).
`ORDERFLOW_API_FUZZ_EXAMPLES` sets the number of examples (default 400).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any
from urllib.parse import quote, urlencode

from api_harness import DOC, ORDER_BODY, TOKENS, LiveApi, live
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("ORDERFLOW_API_FUZZ_EXAMPLES", "400"))
OPERATIONS = [(path, method) for path, item in DOC["paths"].items() for method in item]
SCHEMAS = DOC["components"]["schemas"]
# Printable text the HTTP client will put in a header or a URL (it refuses control characters).
TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=0, max_size=30)
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return _resolve(SCHEMAS[schema["$ref"].rsplit("/", 1)[1]])
    if "allOf" in schema:
        return _resolve(schema["allOf"][0])
    return schema


def _object(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    properties = {k: from_schema(v) for k, v in schema.get("properties", {}).items()}
    required = set(schema.get("required", []))
    return st.fixed_dictionaries(
        {k: v for k, v in properties.items() if k in required},
        optional={k: v for k, v in properties.items() if k not in required},
    )


def _string(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if schema.get("format") == "uuid":
        return st.uuids().map(str)
    low, high = schema.get("minLength", 0), min(schema.get("maxLength", 30), 70)
    if "pattern" in schema:  # the only pattern is the Idempotency-Key's: visible ASCII
        return st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=low)
    return st.text(st.characters(blacklist_categories=("Cs",)), min_size=low, max_size=high)


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that match a (small subset of) JSON Schema: what the document uses."""
    schema = _resolve(schema)
    if "enum" in schema or "const" in schema:
        return st.sampled_from(schema.get("enum") or [schema["const"]])
    if "oneOf" in schema:
        return st.one_of([from_schema(s) for s in schema["oneOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}) for k in kind])
    if kind == "object":
        return _object(schema)
    if kind == "array":
        low, high = schema.get("minItems", 0), min(schema.get("maxItems", 3), 3)
        return st.lists(from_schema(schema["items"]), min_size=low, max_size=max(low, high))
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "string":
        return _string(schema)
    if kind == "boolean":
        return st.booleans()
    return st.none()


def _text_value(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """A query value: from the schema, or any text, or a number far out of range."""
    valid = from_schema(schema).map(str)
    return st.one_of(valid, TEXT, st.integers(-(10**30), 10**30).map(str))


@st.composite
def requests(draw: st.DrawFn, known_ids: list[str]) -> dict[str, Any]:
    """One request for one operation of the document."""
    path, method = draw(st.sampled_from(OPERATIONS))
    op = DOC["paths"][path][method]
    ids = st.sampled_from(known_ids) | st.uuids().map(str) | TEXT.filter(lambda t: t not in ".")
    order_id = draw(ids) or "x"
    url = path.replace("{order_id}", quote(order_id, safe=""))
    query = [
        (param["name"], draw(_text_value(param["schema"])))
        for param in op.get("parameters", [])
        if param["in"] == "query" and draw(st.booleans())
    ]
    if draw(st.integers(0, 9)) == 0:
        query.append((draw(TEXT) or "x", draw(TEXT)))
    if query:
        url = f"{url}?{urlencode(query)}"
    headers = {"Content-Type": draw(st.sampled_from(["application/json"] * 5 + ["text/plain"]))}
    visible_key = _string({"pattern": "visible", "minLength": 1})
    key = draw(st.one_of(visible_key, visible_key, st.none(), TEXT))
    if key is not None:
        headers["Idempotency-Key"] = key
    who = draw(st.sampled_from([None, "no-such-token", *TOKENS, *TOKENS]))
    body_schema = op.get("requestBody", {}).get("content", {}).get("application/json")
    body = draw(from_schema(body_schema["schema"]) | ANY_JSON) if body_schema else None
    raw = json.dumps(body).encode() if body is not None else None
    return {"method": method.upper(), "path": url, "who": who, "raw": raw, "headers": headers}


def _seed(api: LiveApi) -> list[str]:
    """Orders in several states, for two customers, so ids in the fuzz hit real orders."""
    ids = [api.create(key="a").body["order_id"]]
    ids.append(api.create(key="b").body["order_id"])
    api.drive()
    api.world.sim.script("shipping", "ship", ["permanent"])
    ids.append(api.create(key="c").body["order_id"])
    api.drive()
    api.world.sim.script("payments", "charge", ["pending"])
    ids.append(api.create(who="other", key="d", body=ORDER_BODY).body["order_id"])
    api.drive()
    ids.append(api.create(key="e").body["order_id"])
    return ids


def test_fuzzed_requests_never_get_a_5xx_nor_an_undocumented_answer() -> None:
    statuses: Counter[tuple[str, int]] = Counter()
    with live() as api:
        known_ids = _seed(api)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(requests(known_ids))
        def one_request(request: dict[str, Any]) -> None:
            reply = api(**request)
            statuses[(request["path"].split("?")[0].split("/")[-1], reply.status)] += 1
            assert reply.status < 500, (request, reply.body)

        one_request()
    by_status = Counter[int]()
    for (_, status), count in statuses.items():
        by_status[status] += count
    # Shown with `pytest -s`: how many requests were sent and what came back.
    print(f"api fuzz: {sum(by_status.values())} requests, statuses {sorted(by_status.items())}")
    assert any(200 <= status < 300 for _, status in statuses)
    assert any(400 <= status < 500 for _, status in statuses)

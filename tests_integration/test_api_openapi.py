"""The OpenAPI document describes exactly what the app routes, its schemas are valid JSON Schema
2020-12, and the conformance check (which every test_api_* answer passes through) has teeth."""

from __future__ import annotations

import re
from typing import Any

import pytest
from api_harness import DOC, Reply, check_conformance, live, make_world
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]  # no type hints

from orderflow_core import service
from orderflow_http.api import create_app

PUBLIC = {
    "/healthz",
    "/readyz",
    "/api/v1/openapi.json",
    "/",
    "/console",
    "/console/{asset}",
    "/api/v1/docs",
}


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op) for path, item in DOC["paths"].items() for method, op in item.items()
    ]


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


def test_every_route_of_the_app_is_documented_and_every_documented_operation_is_routed() -> None:
    app = create_app(make_world().service)
    routed = {
        (route.resource.canonical, route.method.lower())
        for route in app.router.routes()
        if route.resource is not None
    }
    documented = {(path, method) for path, method, _ in _operations()}
    assert routed == documented


def test_every_reference_in_the_document_resolves() -> None:
    for ref in _refs(DOC):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[1] in DOC["components"]["schemas"], ref


@pytest.mark.parametrize("name", sorted(DOC["components"]["schemas"]))
def test_every_component_schema_is_valid_json_schema(name: str) -> None:
    Draft202012Validator.check_schema(DOC["components"]["schemas"][name])


def test_every_api_operation_documents_authentication_and_unexpected_failures() -> None:
    for path, method, op in _operations():
        if path in PUBLIC:
            assert op["security"] == []
            continue
        assert {"401", "500", "503"} <= set(op["responses"]), (path, method)
        assert any(s.startswith("2") for s in op["responses"]), (path, method)


def test_operation_ids_are_unique_and_path_parameters_are_declared() -> None:
    ids = [op["operationId"] for _, _, op in _operations()]
    assert len(ids) == len(set(ids))
    for path, _, op in _operations():
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"\{(\w+)\}", path))


def test_the_document_lists_every_error_code_the_api_answers() -> None:
    codes = {code for ref in _enums(DOC["paths"]) for code in ref}
    assert codes >= {
        "unauthenticated",
        "forbidden",
        "not_found",
        "invalid_transition",
        "not_retryable",
        "idempotency_key_required",
        "invalid_idempotency_key",
        "idempotency_key_reused",
        "validation_failed",
        "invalid_parameter",
        "malformed_json",
        "unsupported_media_type",
        "payload_too_large",
        "internal_error",
        "not_ready",
    }


def _enums(node: object) -> list[list[str]]:
    if isinstance(node, dict):
        code = node.get("properties", {}).get("code", {}) if "allOf" in node else {}
        own = [code["enum"]] if "enum" in code else []
        return own + [e for value in node.values() for e in _enums(value)]
    if isinstance(node, list):
        return [e for value in node for e in _enums(value)]
    return []


def _problem(status: int, code: str) -> dict[str, object]:
    return {"type": "urn:x", "title": "t", "status": status, "detail": "d", "code": code}


def test_the_conformance_check_refuses_an_undocumented_status() -> None:
    reply = Reply(418, {}, _problem(418, "teapot"), "application/problem+json")
    with pytest.raises(AssertionError, match="undocumented 418"):
        check_conformance("GET", "/api/v1/orders", reply)


def test_the_conformance_check_refuses_an_undocumented_error_code() -> None:
    reply = Reply(404, {}, _problem(404, "gone"), "application/problem+json")
    with pytest.raises(AssertionError, match="does not match"):
        check_conformance("GET", "/api/v1/orders/00000000-0000-4000-8000-000000000000", reply)


def test_the_conformance_check_refuses_an_undocumented_field() -> None:
    body = {"events": [], "next_after": 0, "extra": 1}
    with pytest.raises(AssertionError, match="does not match"):
        check_conformance("GET", "/api/v1/events", Reply(200, {}, body, "application/json"))


def test_the_conformance_check_refuses_a_time_that_is_not_utc() -> None:
    body = {
        "order_id": "00000000-0000-4000-8000-000000000000",
        "entries": [
            {
                "order_id": "00000000-0000-4000-8000-000000000000",
                "at": "2026-01-01T03:00:00+03:00",
                "actor": "a",
                "action": "b",
                "outcome": "c",
                "step_id": None,
                "details": {},
            }
        ],
    }
    path = "/api/v1/orders/00000000-0000-4000-8000-000000000000/audit"
    with pytest.raises(AssertionError, match="does not match"):
        check_conformance("GET", path, Reply(200, {}, body, "application/json"))


def test_an_order_lists_only_the_actions_the_document_names() -> None:
    order = DOC["components"]["schemas"]["Order"]
    assert "allowed_actions" in order["required"]
    assert order["properties"]["allowed_actions"]["items"]["enum"] == list(service.ACTIONS)
    with live() as api:
        reply = api.create()
        assert reply.body["allowed_actions"] == ["cancel"]
        path = f"/api/v1/orders/{reply.body['order_id']}"
        unknown = Reply(200, {}, {**reply.body, "allowed_actions": ["delete"]}, "application/json")
        with pytest.raises(AssertionError, match="does not match"):
            check_conformance("GET", path, unknown)
        missing = {k: v for k, v in reply.body.items() if k != "allowed_actions"}
        with pytest.raises(AssertionError, match="does not match"):
            check_conformance("GET", path, Reply(200, {}, missing, "application/json"))

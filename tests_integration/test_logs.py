"""Log output: ORDERFLOW_LOG_FORMAT=json gives one object per line with the step a line is about;
the API's access log names method, path, status, duration and user, never the token."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from uuid import UUID

import pytest
from api_harness import TOKENS, live

from orderflow import logs
from orderflow.config import ConfigError, load_settings
from orderflow_core import logfields
from orderflow_core.model import Claim
from orderflow_core.states import StepKind
from orderflow_core.testing import FakeClock

CLAIM = Claim(UUID(int=2), UUID(int=1), StepKind.CHARGE, 3, "worker-a", FakeClock().now())


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """Records of the `orderflow` loggers as the json format writes them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.StepFields())
    logger = logging.getLogger("orderflow")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _objects(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_is_one_object_with_time_level_logger_and_message(
    json_lines: io.StringIO,
) -> None:
    logging.getLogger("orderflow.test").warning("two\nlines and a %s", "value")
    [line] = _objects(json_lines)
    assert line["level"] == "WARNING"
    assert line["logger"] == "orderflow.test"
    assert line["message"] == "two\nlines and a value"
    assert str(line["time"]).endswith("+00:00")
    assert "order_id" not in line


def test_lines_logged_while_a_step_runs_name_its_order_step_attempt_and_worker(
    json_lines: io.StringIO,
) -> None:
    async def step() -> None:
        logfields.bind_step(CLAIM, "worker-a")
        logging.getLogger("orderflow.executor").info("inside the step")

    async def elsewhere() -> None:
        logging.getLogger("orderflow.executor").info("outside any step")

    async def both() -> None:
        await asyncio.gather(step(), elsewhere())

    asyncio.run(both())
    inside, outside = _objects(json_lines)
    assert inside["order_id"] == str(CLAIM.order_id)
    assert inside["step_id"] == str(CLAIM.step_id)
    assert (inside["attempt"], inside["worker"]) == (3, "worker-a")
    assert "order_id" not in outside


def test_a_traceback_is_one_field_of_the_same_line(json_lines: io.StringIO) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("orderflow.test").exception("it failed")
    [line] = _objects(json_lines)
    assert "ValueError: boom" in str(line["exception"])


def test_the_access_log_names_the_request_and_user_and_never_the_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="orderflow.http.access"), live() as api:
        api.create()
        api("GET", "/api/v1/events", who="customer")
        api("GET", "/api/v1/orders", who="nobody-knows-this-token")
    lines = [r for r in caplog.records if r.name == "orderflow.http.access"]
    seen = [(r.method, r.path, r.status, r.user) for r in lines]  # type: ignore[attr-defined]
    assert seen == [
        ("POST", "/api/v1/orders", 202, "order_customer"),
        ("GET", "/api/v1/events", 403, "order_customer"),
        ("GET", "/api/v1/orders", 401, "-"),
    ]
    assert all(r.duration_ms >= 0 for r in lines)  # type: ignore[attr-defined]
    text = caplog.text
    assert TOKENS["customer"] not in text
    assert "nobody-knows-this-token" not in text


def test_the_log_format_is_text_unless_set_to_json_and_anything_else_is_refused() -> None:
    assert load_settings({}).log_format == "text"
    assert load_settings({"ORDERFLOW_LOG_FORMAT": "json"}).log_format == "json"
    with pytest.raises(ConfigError, match="ORDERFLOW_LOG_FORMAT"):
        load_settings({"ORDERFLOW_LOG_FORMAT": "yaml"})

"""The API server's limits come from ORDERFLOW_HTTP_* variables, checked at start."""

from __future__ import annotations

import attrs
import pytest

from orderflow.config import ConfigError, HttpLimits, load_settings
from orderflow_http.api.server import ServerLimits


def test_the_defaults_are_the_servers_own() -> None:
    assert attrs.asdict(load_settings({}).http_limits) == attrs.asdict(ServerLimits())
    assert attrs.asdict(HttpLimits()) == attrs.asdict(ServerLimits())


def test_every_limit_is_read_from_its_variable() -> None:
    env = {
        "ORDERFLOW_HTTP_HEADER_TIMEOUT_S": "2.5",
        "ORDERFLOW_HTTP_BODY_TIMEOUT_S": "4",
        "ORDERFLOW_HTTP_KEEPALIVE_S": "7",
        "ORDERFLOW_HTTP_MAX_CONNECTIONS": "12",
        "ORDERFLOW_HTTP_MAX_LINE_BYTES": "4096",
        "ORDERFLOW_HTTP_MAX_HEADERS": "30",
    }
    assert load_settings(env).http_limits == HttpLimits(2.5, 4.0, 7.0, 12, 4096, 30)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ORDERFLOW_HTTP_HEADER_TIMEOUT_S", "0"),
        ("ORDERFLOW_HTTP_BODY_TIMEOUT_S", "-1"),
        ("ORDERFLOW_HTTP_KEEPALIVE_S", "soon"),
        ("ORDERFLOW_HTTP_MAX_CONNECTIONS", "0"),
        ("ORDERFLOW_HTTP_MAX_LINE_BYTES", "10"),
        ("ORDERFLOW_HTTP_MAX_HEADERS", "1.5"),
    ],
)
def test_a_bad_limit_stops_start_up_naming_its_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load_settings({name: value})

"""The ORDERFLOW_NATS_* settings: off unless the URL is set, checked before anything starts,
and a duplicate window never shorter than the relay's worst re-publish delay."""

from __future__ import annotations

import pytest

from orderflow.config import ConfigError, NatsSettings, load_settings


def test_nats_is_off_unless_its_url_is_set_and_has_defaults_when_it_is() -> None:
    assert load_settings({}).nats is None
    assert load_settings({"ORDERFLOW_NATS_STREAM": "X"}).nats is None
    assert load_settings({"ORDERFLOW_NATS_URL": "nats://127.0.0.1:4222"}).nats == NatsSettings(
        url="nats://127.0.0.1:4222",
        subject_prefix="orderflow.events",
        stream="ORDERFLOW_EVENTS",
        duplicate_window_s=120.0,
    )


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("ORDERFLOW_NATS_SUBJECT_PREFIX", "orders.>", "subject tokens"),
        ("ORDERFLOW_NATS_SUBJECT_PREFIX", "orders..events", "subject tokens"),
        ("ORDERFLOW_NATS_STREAM", "my.stream", "stream name"),
        ("ORDERFLOW_NATS_DUPLICATE_WINDOW_S", "30", "at least 63.5 s"),
        ("ORDERFLOW_NATS_DUPLICATE_WINDOW_S", "soon", "ORDERFLOW_NATS_DUPLICATE_WINDOW_S"),
    ],
)
def test_a_bad_nats_setting_is_refused_naming_it(variable: str, value: str, says: str) -> None:
    env = {"ORDERFLOW_NATS_URL": "nats://127.0.0.1:4222", variable: value}
    with pytest.raises(ConfigError) as refused:
        load_settings(env)
    assert variable in str(refused.value)
    assert says in str(refused.value)


def test_a_bad_nats_url_is_refused_without_echoing_its_credentials() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"ORDERFLOW_NATS_URL": "http://relay:s3cret-password@broker:4222"})
    assert "ORDERFLOW_NATS_URL" in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_the_default_window_grows_with_a_slow_poll_and_a_long_call_timeout() -> None:
    env = {
        "ORDERFLOW_NATS_URL": "nats://127.0.0.1:4222",
        "ORDERFLOW_POLL_INTERVAL_S": "30",
        "ORDERFLOW_CALL_TIMEOUT_S": "40",
    }
    nats = load_settings(env).nats
    assert nats is not None
    assert nats.duplicate_window_s == 130.0

"""Configuration from the environment (CONTRACT §5), validated before anything starts."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict

from orderflow_core import RetryPolicy, Timing

T = TypeVar("T")


class ConfigError(Exception):
    """A bad configuration value; the message names the variable."""


@attrs.frozen
class Settings:
    """Everything the processes read from the environment, parsed and checked."""

    database_url: str | None
    home: Path
    http_host: str
    http_port: int
    mocks_port: int
    mocks_latency_ms: int
    mocks_hold_s: float
    warehouse_url: str | None
    payments_url: str | None
    shipping_url: str | None
    customer_token: str | None
    operator_token: str | None
    worker_id: str
    webhook_url: str | None
    shutdown_grace_s: float
    bulkhead_limit: int
    bulkhead_policy: str
    token_cache_s: float
    timing: Timing
    log_format: str = "text"
    metrics: bool = True
    tracing: bool = True
    metrics_port: int = 0

    @property
    def external_services(self) -> bool:
        """Whether all three service URLs are configured (no built-in simulated services)."""
        return bool(self.warehouse_url and self.payments_url and self.shipping_url)

    def service_url(self, configured: str | None) -> str:
        """A configured base URL, or the built-in simulated services' address."""
        return configured or f"http://127.0.0.1:{self.mocks_port}"


def _get(env: Mapping[str, str], name: str, parse: Callable[[str], T], default: T) -> T:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw.strip())
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r}: {exc}") from None


def _positive(value: str) -> float:
    number = float(value)
    if not number > 0 or number == float("inf"):
        raise ValueError("must be a positive number of seconds")
    return number


def _non_negative(value: str) -> float:
    number = float(value)
    if not number >= 0 or number == float("inf"):
        raise ValueError("must be zero or a positive number of seconds")
    return number


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must be a non-negative integer")
    return number


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("must be a positive integer")
    return number


def _port(value: str) -> int:
    number = int(value)
    if not 0 <= number <= 65535:
        raise ValueError("must be a TCP port from 0 to 65535 (0 picks a free one)")
    return number


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")) or len(value) < 10:
        raise ValueError("must be an http:// or https:// base URL")
    return value.rstrip("/")


def _database_url(value: str) -> str:
    try:
        conninfo_to_dict(value)
    except psycopg.ProgrammingError:
        raise ValueError("must be a postgresql:// URL or a libpq connection string") from None
    return value


def _delays(value: str) -> tuple[float, ...]:
    delays = tuple(float(part) for part in value.split(","))
    if not delays or any(d < 0 for d in delays):
        raise ValueError("must be a comma-separated list of non-negative seconds")
    return delays


def _flag(value: str) -> bool:
    if value not in ("0", "1"):
        raise ValueError("must be 1 (on) or 0 (off)")
    return value == "1"


def _policy(value: str) -> str:
    if value not in ("queue", "reject"):
        raise ValueError("must be 'queue' or 'reject'")
    return value


def _log_format(value: str) -> str:
    if value not in ("text", "json"):
        raise ValueError("must be 'text' or 'json'")
    return value


def _token(value: str) -> str:
    if not 16 <= len(value) <= 255 or not all("!" <= ch <= "~" for ch in value):
        raise ValueError("must be 16-255 visible ASCII characters")
    return value


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Parse the environment; `ConfigError` names the first bad variable."""
    env = os.environ if env is None else env
    g = env.get
    timing = _timing(env)
    return Settings(
        database_url=_get(env, "ORDERFLOW_DATABASE_URL", _database_url, None),
        home=Path(g("ORDERFLOW_HOME") or "./.orderflow"),
        http_host=g("ORDERFLOW_HTTP_HOST") or "127.0.0.1",
        http_port=_get(env, "ORDERFLOW_HTTP_PORT", _port, 8080),
        mocks_port=_get(env, "ORDERFLOW_MOCKS_PORT", _port, 8081),
        mocks_latency_ms=_get(env, "ORDERFLOW_MOCKS_LATENCY_MS", _non_negative_int, 0),
        mocks_hold_s=_get(env, "ORDERFLOW_MOCKS_HOLD_S", _positive, 5.0),
        warehouse_url=_get(env, "ORDERFLOW_WAREHOUSE_URL", _http_url, None),
        payments_url=_get(env, "ORDERFLOW_PAYMENTS_URL", _http_url, None),
        shipping_url=_get(env, "ORDERFLOW_SHIPPING_URL", _http_url, None),
        customer_token=_get(env, "ORDERFLOW_CUSTOMER_TOKEN", _token, None),
        operator_token=_get(env, "ORDERFLOW_OPERATOR_TOKEN", _token, None),
        worker_id=g("ORDERFLOW_WORKER_ID") or f"{socket.gethostname()}:{os.getpid()}",
        webhook_url=_get(env, "ORDERFLOW_WEBHOOK_URL", _http_url, None),
        shutdown_grace_s=_get(env, "ORDERFLOW_SHUTDOWN_GRACE_S", _positive, 10.0),
        bulkhead_limit=_get(env, "ORDERFLOW_BULKHEAD_LIMIT", _positive_int, 20),
        bulkhead_policy=_get(env, "ORDERFLOW_BULKHEAD_POLICY", _policy, "queue"),
        token_cache_s=_get(env, "ORDERFLOW_TOKEN_CACHE_S", _non_negative, 5.0),
        timing=timing,
        log_format=_get(env, "ORDERFLOW_LOG_FORMAT", _log_format, "text"),
        metrics=_get(env, "ORDERFLOW_METRICS", _flag, True),
        tracing=_get(env, "ORDERFLOW_TRACING", _flag, True),
        metrics_port=_get(env, "ORDERFLOW_METRICS_PORT", _port, 0),
    )


def _timing(env: Mapping[str, str]) -> Timing:
    lease = _get(env, "ORDERFLOW_LEASE_S", _positive, 30.0)
    heartbeat = _get(env, "ORDERFLOW_HEARTBEAT_S", _positive, 10.0)
    if heartbeat >= lease:
        raise ConfigError(f"ORDERFLOW_HEARTBEAT_S={heartbeat:g}: must be shorter than the lease")
    default: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    delays = _get(env, "ORDERFLOW_RETRY_DELAYS_S", _delays, default)
    return Timing(
        reservation_ttl_s=_get(env, "ORDERFLOW_RESERVATION_TTL_S", _positive, 900.0),
        lease_s=lease,
        heartbeat_s=heartbeat,
        call_timeout_s=_get(env, "ORDERFLOW_CALL_TIMEOUT_S", _positive, 3.0),
        max_concurrent=_get(env, "ORDERFLOW_MAX_CONCURRENT_STEPS", _positive_int, 20),
        poll_interval_s=_get(env, "ORDERFLOW_POLL_INTERVAL_S", _positive, 0.5),
        chain_steps=_get(env, "ORDERFLOW_CHAIN_STEPS", _flag, True),
        retry=RetryPolicy(delays_s=delays, attempts_per_budget=len(delays) + 1),
    )

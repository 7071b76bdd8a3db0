"""Configuration from the environment, validated before anything starts."""

from __future__ import annotations

import difflib
import os
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict

from orderflow_core import RetryPolicy, Timing
from orderflow_core.process import NEWEST, PROCESSES
from orderflow_core.relay import worst_redelivery_delay_s
from orderflow_core.steps.registry import services_needed

T = TypeVar("T")


class ConfigError(Exception):
    """A bad configuration value; the message names the variable."""


# How long one relay batch may take before the relay reads afresh (bounds stale re-publishes).
RELAY_BATCH_S = 5.0


@attrs.frozen
class NatsSettings:
    """Where the relay also publishes events (ORDERFLOW_NATS_*); absent when the URL is unset."""

    url: str
    subject_prefix: str
    stream: str
    duplicate_window_s: float


@attrs.frozen
class HttpLimits:
    """The API server's deadlines and limits against slow or hostile clients (the fields of
    `orderflow_http.api.server.ServerLimits`, read here without importing aiohttp)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 15.0
    keepalive_s: float = 15.0
    max_connections: int = 1000
    max_line_bytes: int = 8190
    max_headers: int = 100
    # At the connection cap an idle connection gives way to a new one after this long.
    pressure_idle_s: float = 1.0


# --- Retention (docs/retention.md) -------------------------------------------------------------
DAY_S = 86400.0


@attrs.frozen
class RetentionSettings:
    """What `orderflow prune` (and the scheduled pruner in `worker` and `serve`) may remove, and
    when (ORDERFLOW_RETENTION_*, ORDERFLOW_PRUNE_*, ORDERFLOW_ARCHIVE_DIR); docs/retention.md.

    Each default, with its reason:
    - orders_s, 90 days: a finished order (terminal state, no open refund, no step left to run,
      not waiting for a person, every event published) stays readable through the API for a
      quarter, long enough for the questions customers and support ask about an order; after
      that it is in the archive. An unfinished or waiting order is never removed.
    - feed_s, 7 days: a published event stays in GET /api/v1/events a week, so a consumer may be
      down over a long weekend and resume from its cursor; an older cursor is answered 410
      `cursor_expired`, never a silent gap. At most orders_s (an order's events go with it).
    - idempotency_s, 24 hours: an Idempotency-Key is remembered a day, the convention of payment
      APIs: a client retries within minutes or hours; after that the key is new again (a POST
      with it creates a new order). At most orders_s.
    - audit_s, 400 days: the audit log is the compliance record, kept longest (a year and an
      annual audit's margin); entries outlive their order's removal (they are archived with it
      too) and are removed by time once their order is gone. At least orders_s.
    - interval_s, 300 s: how often `worker` and `serve` prune (one pruner at a time across every
      process, by an advisory lock); 0 turns scheduled pruning off.
    - batch, 500: orders archived and removed per transaction (rows of other kinds: 10 x this),
      so no prune transaction holds locks or builds WAL for long.
    - archive_dir, unset → ORDERFLOW_HOME/archive: where archived orders are written.
    """

    orders_s: float = 90 * DAY_S
    feed_s: float = 7 * DAY_S
    idempotency_s: float = 1 * DAY_S
    audit_s: float = 400 * DAY_S
    interval_s: float = 300.0
    batch: int = 500
    archive_dir: Path | None = None


_DURATION = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhd])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY_S}
DURATION_EXPECTED = "expected a duration: a number and a unit s, m, h or d, e.g. 30d, 12h, 0s"


def parse_duration(value: str) -> float:
    """Seconds of a duration like `30d`, `12h`, `15m`, `0s`; ValueError says what is expected."""
    match = _DURATION.match(value.strip())
    if not match:
        raise ValueError(DURATION_EXPECTED)
    return float(match["n"]) * _UNIT_S[match["unit"]]


def _retention(env: Mapping[str, str]) -> RetentionSettings:
    d = RetentionSettings()
    kept = RetentionSettings(
        orders_s=_get(env, "ORDERFLOW_RETENTION_ORDERS", parse_duration, d.orders_s),
        feed_s=_get(env, "ORDERFLOW_RETENTION_FEED", parse_duration, d.feed_s),
        idempotency_s=_get(env, "ORDERFLOW_RETENTION_IDEMPOTENCY", parse_duration, d.idempotency_s),
        audit_s=_get(env, "ORDERFLOW_RETENTION_AUDIT", parse_duration, d.audit_s),
        interval_s=_get(env, "ORDERFLOW_PRUNE_INTERVAL_S", _non_negative, d.interval_s),
        batch=_get(env, "ORDERFLOW_PRUNE_BATCH", _positive_int, d.batch),
        archive_dir=_get(env, "ORDERFLOW_ARCHIVE_DIR", Path, None),
    )
    for name, value in (
        ("ORDERFLOW_RETENTION_FEED", kept.feed_s),
        ("ORDERFLOW_RETENTION_IDEMPOTENCY", kept.idempotency_s),
    ):
        if value > kept.orders_s:
            raise ConfigError(
                f"{name}: must be at most ORDERFLOW_RETENTION_ORDERS ({kept.orders_s / DAY_S:g}d),"
                " since what it keeps refers to orders that are removed after that"
            )
    if kept.audit_s < kept.orders_s:
        raise ConfigError(
            f"ORDERFLOW_RETENTION_AUDIT: must be at least ORDERFLOW_RETENTION_ORDERS "
            f"({kept.orders_s / DAY_S:g}d): the audit log is kept longest"
        )
    return kept


# --- end of retention ----------------------------------------------------------------------------


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
    mocks_state: Path | None
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
    event_loop: str = "uvloop"
    log_format: str = "text"
    http_limits: HttpLimits = HttpLimits()
    nats: NatsSettings | None = None
    metrics: bool = True
    tracing: bool = True
    metrics_port: int = 0
    notifications_url: str | None = None
    process_version: int = NEWEST
    # ORDERFLOW_CITUS_SHARD_COUNT (32): how many shards `orderflow migrate --distribute` gives
    # each distributed table (Citus's own default: room to rebalance onto more nodes; shards
    # are the unit Citus moves, so more than nodes, fewer than hundreds; docs/citus.md).
    citus_shard_count: int = 32
    retention: RetentionSettings = RetentionSettings()
    # -- database connections and the request deadline (docs/high-availability.md) --------
    # ORDERFLOW_REQUEST_DEADLINE_S (3): how long one API request may wait for everything it
    # asks the database, together (each statement alone had this long); then 503 + Retry-After.
    request_deadline_s: float = 3.0
    # ORDERFLOW_DATABASE_POOLER (none): `transaction` when ORDERFLOW_DATABASE_URL goes through
    # pgbouncer in transaction mode: no server-side prepared statements, no startup options.
    database_pooler: str = "none"
    # ORDERFLOW_STORE_OPTIMISATIONS (1): 0 runs the PostgreSQL store on its contract alone (no
    # create batcher, no group commit, no claim with its starts, no kept copies).
    store_optimisations: bool = True
    # ORDERFLOW_DIRECT_DATABASE_URL (unset: ORDERFLOW_DATABASE_URL): PostgreSQL itself, not
    # through a transaction pooler, for what needs a session of its own: the workers' LISTEN
    # for wake-ups and the migrations' advisory lock. Required with a transaction pooler.
    direct_database_url: str | None = None

    @property
    def archive_dir(self) -> Path:
        """Where archived orders go: ORDERFLOW_ARCHIVE_DIR, else ORDERFLOW_HOME/archive."""
        return self.retention.archive_dir or self.home / "archive"

    @property
    def external_services(self) -> bool:
        """Whether all three service URLs are configured (no built-in simulated services)."""
        return bool(self.warehouse_url and self.payments_url and self.shipping_url)

    def service_url(self, configured: str | None) -> str:
        """A configured base URL, or the built-in simulated services' address."""
        return configured or f"http://127.0.0.1:{self.mocks_port}"


# The embedded database's folder when ORDERFLOW_HOME is unset: the nearest one in the current
# directory or a parent (so every command run anywhere inside a project finds the database that
# `orderflow serve` made at its top), else one in the current directory.
HOME_FOLDER = ".orderflow"


def find_home(start: Path) -> Path:
    """The nearest `.orderflow` folder in `start` or one of its parents, else `start/.orderflow`
    (where `serve` creates it; `orderflow user` refuses to, see `embedded_database_exists`)."""
    for folder in (start, *start.parents):
        if (folder / HOME_FOLDER).is_dir():
            return folder / HOME_FOLDER
    return start / HOME_FOLDER


def embedded_database_exists(home: Path) -> bool:
    """Whether an embedded database was made under `home` (by `serve`, `migrate`, …)."""
    return (home / "pgdata" / "PG_VERSION").is_file()


@attrs.frozen
class Read:
    """One variable as `load_settings` reads it: its name, its parser and its default (what the
    configuration reference, `orderflow.docgen`, is generated from)."""

    name: str
    parse: Callable[[str], object]
    default: object


_SEEN: ContextVar[list[Read] | None] = ContextVar("_SEEN", default=None)


def _get(
    env: Mapping[str, str],
    name: str,
    parse: Callable[[str], T],
    default: T,
    *,
    show: Callable[[str], str] = repr,
) -> T:
    """The parsed value of `name`, or `default` when unset or empty.

    A parser raises ValueError with what it expects; the message names the variable and shows
    what was given through `show` (secrets pass `hidden`, which never echoes the value).
    """
    seen = _SEEN.get()
    if seen is not None:
        seen.append(Read(name, parse, default))
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw.strip())
    except ValueError as exc:
        raise ConfigError(f"{name}={show(raw)}: {exc}") from None


def hidden(raw: str) -> str:
    """How a rejected secret is shown: its length only."""
    return f"<hidden, {len(raw)} characters>"


def redacted_database_url(raw: str) -> str:
    """A database URL or libpq string with its password replaced by `***`."""
    if "://" in raw:
        parts = urlsplit(raw)
        if parts.password is not None:
            host = parts.netloc.rpartition("@")[2]
            parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
        query = _URL_PASSWORD.sub("password=***", parts.query)
        return repr(urlunsplit(parts._replace(query=query)))
    return repr(_PASSWORD_PARAM.sub("password=***", raw))


_URL_PASSWORD = re.compile(r"password=[^&]*")
_PASSWORD_PARAM = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")


def _number(value: str, kind: Callable[[str], T], expected: str) -> T:
    try:
        return kind(value)
    except ValueError:
        raise ValueError(expected) from None


_SECONDS = "expected a positive number of seconds, e.g. 2.5"


def _positive(value: str) -> float:
    number = _number(value, float, _SECONDS)
    if not number > 0 or number == float("inf"):
        raise ValueError(_SECONDS)
    return number


def _non_negative(value: str) -> float:
    expected = "expected zero or a positive number of seconds, e.g. 5"
    number = _number(value, float, expected)
    if not number >= 0 or number == float("inf"):
        raise ValueError(expected)
    return number


def _non_negative_int(value: str) -> int:
    expected = "expected a whole number, 0 or more, e.g. 20"
    number = _number(value, int, expected)
    if number < 0:
        raise ValueError(expected)
    return number


def _positive_int(value: str) -> int:
    expected = "expected a whole number, 1 or more, e.g. 20"
    number = _number(value, int, expected)
    if number < 1:
        raise ValueError(expected)
    return number


def _port(value: str) -> int:
    expected = "expected a TCP port from 0 to 65535 (0 picks a free one)"
    number = _number(value, int, expected)
    if not 0 <= number <= 65535:
        raise ValueError(expected)
    return number


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")) or len(value) < 10:
        raise ValueError("expected an http:// or https:// base URL, e.g. http://127.0.0.1:8081")
    return value.rstrip("/")


def _database_url(value: str) -> str:
    """A libpq URL or key=value string whose ports are ports (shown without its password)."""
    try:
        params = conninfo_to_dict(value)
    except psycopg.ProgrammingError:
        raise ValueError(
            "expected a postgresql:// URL (postgresql://USER:PASSWORD@HOST:PORT/DATABASE) "
            "or a libpq connection string"
        ) from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"the port {port!r} is not a TCP port (1 to 65535), e.g. 5432")
    return value


def _delays(value: str) -> tuple[float, ...]:
    expected = "expected comma-separated seconds, each 0 or more, e.g. 1,2,4,8"
    delays = tuple(_number(part.strip(), float, expected) for part in value.split(","))
    if not delays or any(not 0 <= d < float("inf") for d in delays):
        raise ValueError(expected)
    return delays


def _flag(value: str) -> bool:
    if value not in ("0", "1"):
        raise ValueError("expected 1 (on) or 0 (off)")
    return value == "1"


def _policy(value: str) -> str:
    if value not in ("queue", "reject"):
        raise ValueError("expected 'queue' or 'reject'")
    return value


def _log_format(value: str) -> str:
    if value not in ("text", "json"):
        raise ValueError("must be 'text' or 'json'")
    return value


def _token(value: str) -> str:
    if not 16 <= len(value) <= 255 or not all("!" <= ch <= "~" for ch in value):
        raise ValueError("expected 16 to 255 visible ASCII characters (no spaces)")
    return value


def _state_file(value: str) -> Path:
    path = Path(value)
    if not path.parent.is_dir() or path.is_dir():
        raise ValueError("expected the path of a file in an existing directory")
    return path


# ORDERFLOW_* variables read by the tests, CI and the benchmark, not by the service.
OTHER_KNOWN_VARIABLES = frozenset(
    {
        "ORDERFLOW_TEST_DATABASE_URL",
        "ORDERFLOW_BENCH_DATABASE_URL",
        "ORDERFLOW_API_FUZZ_EXAMPLES",
        "ORDERFLOW_PG_STATEFUL_EXAMPLES",
        "ORDERFLOW_CHAOS_SEED",
        "ORDERFLOW_CI_VENV",
        "ORDERFLOW_TEST_WHEEL",
        # Read only when ORDERFLOW_NATS_URL is set.
        "ORDERFLOW_NATS_SUBJECT_PREFIX",
        "ORDERFLOW_NATS_STREAM",
        "ORDERFLOW_NATS_DUPLICATE_WINDOW_S",
    }
)


class _ReadNames(Mapping[str, str]):
    """An environment that remembers which names were looked up."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return self._env[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._env)

    def __len__(self) -> int:
        return len(self._env)


def known_variables() -> frozenset[str]:
    """Every ORDERFLOW_* name orderflow reads: those `load_settings` looks up, and the others."""
    reads = _ReadNames({})
    load_settings(reads)
    return frozenset(reads.read) | OTHER_KNOWN_VARIABLES


def unknown_variable_warnings(env: Mapping[str, str] | None = None) -> list[str]:
    """One warning per ORDERFLOW_* variable nothing reads (a typo is otherwise silently
    ignored), naming the closest known name when there is one."""
    env = os.environ if env is None else env
    known = known_variables()
    warnings = []
    for name in sorted(n for n in env if n.startswith("ORDERFLOW_") and n not in known):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else ""
        warnings.append(f"{name} is not a variable orderflow reads, so it is ignored{hint}")
    return warnings


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Parse the environment; `ConfigError` names the first bad variable."""
    env = os.environ if env is None else env
    g = env.get
    timing = _timing(env)
    settings = Settings(
        database_url=_get(
            env, "ORDERFLOW_DATABASE_URL", _database_url, None, show=redacted_database_url
        ),
        home=Path(g("ORDERFLOW_HOME") or find_home(Path.cwd())),
        http_host=g("ORDERFLOW_HTTP_HOST") or "127.0.0.1",
        http_port=_get(env, "ORDERFLOW_HTTP_PORT", _port, 8080),
        mocks_port=_get(env, "ORDERFLOW_MOCKS_PORT", _port, 8081),
        mocks_latency_ms=_get(env, "ORDERFLOW_MOCKS_LATENCY_MS", _non_negative_int, 0),
        mocks_hold_s=_get(env, "ORDERFLOW_MOCKS_HOLD_S", _positive, 5.0),
        mocks_state=_get(env, "ORDERFLOW_MOCKS_STATE", _state_file, None),
        warehouse_url=_get(env, "ORDERFLOW_WAREHOUSE_URL", _http_url, None),
        payments_url=_get(env, "ORDERFLOW_PAYMENTS_URL", _http_url, None),
        shipping_url=_get(env, "ORDERFLOW_SHIPPING_URL", _http_url, None),
        customer_token=_get(env, "ORDERFLOW_CUSTOMER_TOKEN", _token, None, show=hidden),
        operator_token=_get(env, "ORDERFLOW_OPERATOR_TOKEN", _token, None, show=hidden),
        worker_id=g("ORDERFLOW_WORKER_ID") or f"{socket.gethostname()}:{os.getpid()}",
        webhook_url=_get(env, "ORDERFLOW_WEBHOOK_URL", _http_url, None),
        shutdown_grace_s=_get(env, "ORDERFLOW_SHUTDOWN_GRACE_S", _positive, 10.0),
        bulkhead_limit=_get(env, "ORDERFLOW_BULKHEAD_LIMIT", _positive_int, 20),
        bulkhead_policy=_get(env, "ORDERFLOW_BULKHEAD_POLICY", _policy, "queue"),
        token_cache_s=_get(env, "ORDERFLOW_TOKEN_CACHE_S", _non_negative, 5.0),
        timing=timing,
        event_loop=_get(env, "ORDERFLOW_EVENT_LOOP", _event_loop, "uvloop"),
        log_format=_get(env, "ORDERFLOW_LOG_FORMAT", _log_format, "text"),
        http_limits=_http_limits(env),
        nats=_nats(env, timing),
        metrics=_get(env, "ORDERFLOW_METRICS", _flag, True),
        tracing=_get(env, "ORDERFLOW_TRACING", _flag, True),
        metrics_port=_get(env, "ORDERFLOW_METRICS_PORT", _port, 0),
        notifications_url=_get(env, "ORDERFLOW_NOTIFICATIONS_URL", _http_url, None),
        process_version=_get(env, "ORDERFLOW_PROCESS_VERSION", _process_version, NEWEST),
        citus_shard_count=_get(env, "ORDERFLOW_CITUS_SHARD_COUNT", _positive_int, 32),
        request_deadline_s=_get(env, "ORDERFLOW_REQUEST_DEADLINE_S", _positive, 3.0),
        database_pooler=_get(env, "ORDERFLOW_DATABASE_POOLER", _pooler, "none"),
        store_optimisations=_get(env, "ORDERFLOW_STORE_OPTIMISATIONS", _flag, True),
        direct_database_url=_get(
            env, "ORDERFLOW_DIRECT_DATABASE_URL", _database_url, None, show=redacted_database_url
        ),
        retention=_retention(env),
    )
    if settings.database_pooler == "transaction" and settings.direct_database_url is None:
        raise ConfigError(
            "ORDERFLOW_DATABASE_POOLER=transaction: set ORDERFLOW_DIRECT_DATABASE_URL to reach"
            " PostgreSQL without the pooler (LISTEN and the migrations' lock need a session)"
        )
    return _served_process_version(settings, explicit=bool(g("ORDERFLOW_PROCESS_VERSION")))


def _served_process_version(settings: Settings, *, explicit: bool) -> Settings:
    """New orders run a version whose services are all there: with the three services external
    and no notification service, the newest version without a notification step by default,
    and a one-line error for a version that needs one."""
    if not settings.external_services or settings.notifications_url is not None:
        return settings
    # What each version needs is what its step kinds call (their definitions say).
    needs = {v for v in PROCESSES if "notifications" in services_needed(v)}
    if settings.process_version not in needs:
        return settings
    if explicit:
        raise ConfigError(
            f"ORDERFLOW_PROCESS_VERSION={settings.process_version}: this version notifies the "
            "customer, so it needs ORDERFLOW_NOTIFICATIONS_URL when the three service URLs are set"
        )
    return attrs.evolve(settings, process_version=max(set(PROCESSES) - needs))


def _pooler(value: str) -> str:
    if value not in ("none", "transaction"):
        raise ValueError("expected 'none' (direct or session pooling) or 'transaction'")
    return value


def _process_version(value: str) -> int:
    known = ", ".join(str(v) for v in sorted(PROCESSES))
    if not value.isdigit() or int(value) not in PROCESSES:
        raise ValueError(f"unknown process version; known versions: {known}")
    return int(value)


def _nats_url(value: str) -> str:
    for one in value.split(","):
        if not one.strip().startswith(("nats://", "tls://", "ws://", "wss://")):
            raise ValueError("must be a nats://, tls://, ws:// or wss:// URL (comma-separated)")
    return value


def _subject_prefix(value: str) -> str:
    parts = value.split(".")
    if not all(parts) or any(ch in value for ch in " \t*>"):
        raise ValueError("must be dot-separated subject tokens without spaces, * or >")
    return value


def _stream_name(value: str) -> str:
    if any(ch in value for ch in " \t.*>/\\") or len(value) > 255:
        raise ValueError("must be a stream name without spaces, dots, *, >, / or \\")
    return value


def _nats(env: Mapping[str, str], timing: Timing) -> NatsSettings | None:
    raw = (env.get("ORDERFLOW_NATS_URL") or "").strip()
    if not raw:
        return None
    try:
        url = _nats_url(raw)
    except ValueError as exc:  # the URL may carry credentials: not echoed
        raise ConfigError(f"ORDERFLOW_NATS_URL: {exc}") from None
    least = worst_redelivery_delay_s(
        timing.retry, timing.poll_interval_s, timing.call_timeout_s, RELAY_BATCH_S
    )
    window = _get(env, "ORDERFLOW_NATS_DUPLICATE_WINDOW_S", _positive, max(120.0, least))
    if window < least:
        raise ConfigError(
            f"ORDERFLOW_NATS_DUPLICATE_WINDOW_S={window:g}: must be at least {least:g} s, the "
            "longest a running relay may take to publish an event again"
        )
    return NatsSettings(
        url=url,
        subject_prefix=_get(
            env, "ORDERFLOW_NATS_SUBJECT_PREFIX", _subject_prefix, "orderflow.events"
        ),
        stream=_get(env, "ORDERFLOW_NATS_STREAM", _stream_name, "ORDERFLOW_EVENTS"),
        duplicate_window_s=window,
    )


def _event_loop(raw: str) -> str:
    if raw not in ("uvloop", "asyncio"):
        raise ValueError("must be uvloop or asyncio")
    return raw


def _http_limits(env: Mapping[str, str]) -> HttpLimits:
    default = HttpLimits()
    return HttpLimits(
        header_timeout_s=_get(
            env, "ORDERFLOW_HTTP_HEADER_TIMEOUT_S", _positive, default.header_timeout_s
        ),
        body_timeout_s=_get(
            env, "ORDERFLOW_HTTP_BODY_TIMEOUT_S", _positive, default.body_timeout_s
        ),
        keepalive_s=_get(env, "ORDERFLOW_HTTP_KEEPALIVE_S", _positive, default.keepalive_s),
        max_connections=_get(
            env, "ORDERFLOW_HTTP_MAX_CONNECTIONS", _positive_int, default.max_connections
        ),
        max_line_bytes=_get(
            env, "ORDERFLOW_HTTP_MAX_LINE_BYTES", _line_bytes, default.max_line_bytes
        ),
        max_headers=_get(env, "ORDERFLOW_HTTP_MAX_HEADERS", _positive_int, default.max_headers),
        pressure_idle_s=_get(
            env, "ORDERFLOW_HTTP_PRESSURE_IDLE_S", _positive, default.pressure_idle_s
        ),
    )


def _line_bytes(value: str) -> int:
    expected = "expected a number of bytes from 256 to 1048576"
    number = _number(value, int, expected)
    if not 256 <= number <= 1024 * 1024:
        raise ValueError(expected)
    return number


def _timing(env: Mapping[str, str]) -> Timing:
    lease = _get(env, "ORDERFLOW_LEASE_S", _positive, 30.0)
    heartbeat = _get(env, "ORDERFLOW_HEARTBEAT_S", _positive, 10.0)
    if heartbeat >= lease:
        raise ConfigError(
            f"ORDERFLOW_HEARTBEAT_S={heartbeat:g}: expected fewer seconds than "
            f"ORDERFLOW_LEASE_S ({lease:g}), so the lease is renewed before it runs out"
        )
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


# --- The configuration reference (docs/reference/configuration.md, `python -m orderflow.docgen`) --


def reads() -> list[Read]:
    """Every variable `load_settings` reads through `_get`, with its parser and default, in the
    order it reads them (with NATS on, so the NATS variables are read too)."""
    seen: list[Read] = []
    token = _SEEN.set(seen)
    try:
        load_settings({"ORDERFLOW_NATS_URL": "nats://127.0.0.1:4222"})
    finally:
        _SEEN.reset(token)
    return seen


# What each variable is for and why its default is what it is; the reference adds the default
# and the accepted values from `_get`'s own arguments. A variable read without `_get` states its
# default here. Every name `known_variables()` returns has an entry (tests_integration/test_docs).
VARIABLE_HELP: Mapping[str, str] = {
    "ORDERFLOW_CITUS_SHARD_COUNT": "How many shards `orderflow migrate --distribute` gives "
    "each distributed table on a Citus coordinator. Shards are the unit Citus moves between "
    "nodes, so more than the nodes you expect, fewer than hundreds (docs/citus.md).",
    "ORDERFLOW_DATABASE_URL": "The PostgreSQL database, a `postgresql://` URL or a libpq "
    "string. Unset: an embedded PostgreSQL under `ORDERFLOW_HOME` (the fresh-laptop path). "
    "Checked by connecting once before anything else starts.",
    "ORDERFLOW_HOME": "Where the embedded server keeps its data (not under `/root` when run "
    "as root). Default: the nearest `.orderflow` folder in the current directory or above, so "
    "every command run inside a project finds the one `orderflow serve` made at its top; else "
    "`./.orderflow`. `orderflow user` never creates one.",
    "ORDERFLOW_HTTP_HOST": "The address the REST API (and a worker's own `/metrics`) listens "
    "on. Default: `127.0.0.1`, which exposes nothing beyond this machine until asked.",
    "ORDERFLOW_HTTP_PORT": "The REST API's port (`0` picks a free one).",
    "ORDERFLOW_MOCKS_PORT": "The port of the simulated warehouse, payments and shipping "
    "services (`orderflow mocks`, and `serve` when no service URL is set).",
    "ORDERFLOW_MOCKS_LATENCY_MS": "Latency the simulated services add to every answer.",
    "ORDERFLOW_MOCKS_HOLD_S": "How long a scripted `timeout` outcome holds the connection.",
    "ORDERFLOW_MOCKS_STATE": "A journal file that keeps the simulated services' effects "
    "(charges, reservations, shipments, refunds, the ledger) across a restart. Unset: in memory, "
    "and a restart forgets them all "
    "([details](../simulated-services.md#keeping-state-across-a-restart)).",
    "ORDERFLOW_WAREHOUSE_URL": "The warehouse's base URL; the service paths are appended. "
    "Unset: the built-in simulated services.",
    "ORDERFLOW_PAYMENTS_URL": "The payment provider's base URL. Unset: the built-in simulated "
    "services.",
    "ORDERFLOW_SHIPPING_URL": "The carrier's base URL. Unset: the built-in simulated services.",
    "ORDERFLOW_NOTIFICATIONS_URL": "The notification service of process version 2. Unset: the "
    "built-in simulated services, or none when the three URLs above are all set; with none, new "
    "orders run version 1, and a version-2 order in flight has its notification `blocked` "
    "(`notification_failed`).",
    "ORDERFLOW_PROCESS_VERSION": "The process version of new orders. Default: the newest whose "
    "services are all configured, so an upgrade that adds no notification service keeps running "
    "version 1; an unknown version, or one that notifies with external services and no "
    "notification service, stops start-up with one line.",
    "ORDERFLOW_CUSTOMER_TOKEN": "The seeded customer's token, applied at every start (replacing "
    "a different stored token, with a warning naming the user). Unset: generated at the first "
    "seed and printed once. Never shown in an error.",
    "ORDERFLOW_OPERATOR_TOKEN": "The seeded operator's token; as `ORDERFLOW_CUSTOMER_TOKEN`.",
    "ORDERFLOW_WORKER_ID": "The lease owner written on claims and attempts. Default: "
    "`hostname:pid`, unique per process without configuration.",
    "ORDERFLOW_WEBHOOK_URL": "POST every event there too (at least once, with backoff while it "
    "fails). Unset: no webhook.",
    "ORDERFLOW_SHUTDOWN_GRACE_S": "On SIGTERM, how long in-flight steps may finish before they "
    "are left to lease expiry (another worker then retries them with the same key).",
    "ORDERFLOW_BULKHEAD_LIMIT": "Calls in flight per external service, so one slow service "
    "cannot take every slot.",
    "ORDERFLOW_BULKHEAD_POLICY": "A full bulkhead: `queue` waits for a slot, `reject` answers "
    "busy at once (the step is retried later).",
    "ORDERFLOW_TOKEN_CACHE_S": "The API remembers a token's user this long instead of reading it "
    "per request (`0`: never). A rotated-away token or a disabled user is refused within it; "
    "unknown tokens are never remembered, so a new token works at once.",
    "ORDERFLOW_EVENT_LOOP": "The event loop of every command: `uvloop` where it is installed "
    "(it comes with the `http` extra; about 10 % less worker CPU per order), else asyncio's own; "
    "`asyncio` turns it off.",
    "ORDERFLOW_LOG_FORMAT": "`text`: one plain line per record; `json`: one JSON object per line.",
    "ORDERFLOW_HTTP_HEADER_TIMEOUT_S": "The request line and headers must arrive within this, "
    "counted from their first byte, however slowly they trickle; else 408 `request_timeout` and "
    "the connection is closed.",
    "ORDERFLOW_HTTP_BODY_TIMEOUT_S": "The body must arrive within this, counted from the "
    "headers; else 408 `request_timeout`.",
    "ORDERFLOW_HTTP_KEEPALIVE_S": "An idle keep-alive connection (or one that never sends a "
    "byte) is closed after this.",
    "ORDERFLOW_HTTP_MAX_CONNECTIONS": "Open API connections at once; the next is answered 503 "
    "`too_many_connections` and closed.",
    "ORDERFLOW_HTTP_MAX_LINE_BYTES": "The longest request line or header line; beyond, 400 "
    "`bad_request`.",
    "ORDERFLOW_HTTP_MAX_HEADERS": "The most header lines in a request; beyond, 400 `bad_request`.",
    "ORDERFLOW_NATS_URL": "Also publish every event to NATS JetStream (`nats://`, `tls://`, "
    "comma-separated servers; needs the `nats` extra). Default: unset, off. Never echoed in an "
    "error (it may carry credentials).",
    "ORDERFLOW_NATS_SUBJECT_PREFIX": "Subject = prefix + `.` + event type, e.g. "
    "`orderflow.events.order.paid`.",
    "ORDERFLOW_NATS_STREAM": "The stream: created if missing (file storage, subjects "
    "`<prefix>.>`), else checked and used as it is.",
    "ORDERFLOW_NATS_DUPLICATE_WINDOW_S": "The stream's de-duplication window: at least the "
    "relay's worst re-publish delay (its backoff cap + `ORDERFLOW_CALL_TIMEOUT_S` + "
    "`ORDERFLOW_POLL_INTERVAL_S`), so a re-published event is dropped by the broker.",
    "ORDERFLOW_METRICS": "`1`: Prometheus metrics at `GET /metrics` (needs the `metrics` "
    "extra); `0`: none.",
    "ORDERFLOW_TRACING": "`1`: OpenTelemetry spans (needs the `tracing` extra; exported only "
    "with `OTEL_EXPORTER_OTLP_ENDPOINT` and the `otel` extra); `0`: none, and no `traceparent` "
    "is sent.",
    "ORDERFLOW_METRICS_PORT": "`orderflow worker` serves its own `/metrics` on "
    "`ORDERFLOW_HTTP_HOST`:this port; `0`: off (`serve` and `api` answer `/metrics` on the API "
    "port).",
    "ORDERFLOW_LEASE_S": "A running step's lease: a worker that dies holding a step loses it "
    "after this, and another worker takes it over (same idempotency key).",
    "ORDERFLOW_HEARTBEAT_S": "How often a running step's lease is renewed; fewer seconds than "
    "the lease. A call whose deadline ends before both needs no renewal.",
    "ORDERFLOW_RETRY_DELAYS_S": "Delays between attempts of a step; attempts = delays + 1.",
    "ORDERFLOW_RESERVATION_TTL_S": "How long the warehouse holds a reservation.",
    "ORDERFLOW_CALL_TIMEOUT_S": "The deadline of every external call (database statements have "
    "their own 3 s).",
    "ORDERFLOW_MAX_CONCURRENT_STEPS": "Steps in flight per executor.",
    "ORDERFLOW_POLL_INTERVAL_S": "The executor's safety-net poll; LISTEN/NOTIFY wakes it "
    "sooner.",
    "ORDERFLOW_CHAIN_STEPS": "`1`: a worker goes straight on with the step a result makes due, "
    "its intent committed with that result (fewer claims and transactions); `0`: every step is "
    "claimed.",
    # High availability (docs/high-availability.md).
    "ORDERFLOW_REQUEST_DEADLINE_S": "One API request waits at most this long for everything it "
    "asks the database, together; then 503 `store_unavailable` with `Retry-After`.",
    "ORDERFLOW_DATABASE_POOLER": "`transaction` when `ORDERFLOW_DATABASE_URL` goes through "
    "pgbouncer in transaction mode (server-side prepared statements off); `none` otherwise.",
    "ORDERFLOW_STORE_OPTIMISATIONS": "`0`: the PostgreSQL store runs on its contract alone, "
    "each create, start and result its own transaction, every change decided on a locking read "
    "(no create batcher, no group commit, no claim with its starts, no kept copies): slower, "
    "for comparing or ruling the optimisations out. `1` (default): all on.",
    "ORDERFLOW_DIRECT_DATABASE_URL": "PostgreSQL itself, not through the pooler: the workers' "
    "LISTEN for wake-ups and the migrations' advisory lock need a session of their own. Unset: "
    "`ORDERFLOW_DATABASE_URL`; required with `ORDERFLOW_DATABASE_POOLER=transaction`.",
    "ORDERFLOW_HTTP_PRESSURE_IDLE_S": "At `ORDERFLOW_HTTP_MAX_CONNECTIONS`, a connection idle "
    "this long gives way to a new one.",
    # Retention (docs/retention.md; RetentionSettings holds each default's reason).
    "ORDERFLOW_RETENTION_ORDERS": "Finished orders stay readable through the API this long; then "
    "they are archived and removed with their steps, attempts, refunds, events and processed "
    "event ids. An unfinished order or one waiting for a person is never removed.",
    "ORDERFLOW_RETENTION_FEED": "Published events stay in `GET /api/v1/events` this long (a "
    "consumer may be down over a long weekend); an older cursor is answered 410 "
    "`cursor_expired`. At most the orders' retention.",
    "ORDERFLOW_RETENTION_IDEMPOTENCY": "An `Idempotency-Key` is remembered this long, the "
    "convention of payment APIs; at most the orders' retention.",
    "ORDERFLOW_RETENTION_AUDIT": "The audit log is the compliance record, kept longest (a year "
    "and an annual audit's margin); at least the orders' retention.",
    "ORDERFLOW_PRUNE_INTERVAL_S": "How often `orderflow worker` and `orderflow serve` prune (one "
    "pruner at a time across every process); `0` turns scheduled pruning off.",
    "ORDERFLOW_PRUNE_BATCH": "Orders archived and removed per transaction (other kinds: ten "
    "times this per statement), so no prune transaction holds locks or builds WAL for long.",
    "ORDERFLOW_ARCHIVE_DIR": "Where archived orders are written (gzip JSON lines). Unset: "
    "`ORDERFLOW_HOME/archive`.",
    # Read by the tests, CI and the benchmark, not by the service.
    "ORDERFLOW_TEST_DATABASE_URL": "Tests: the PostgreSQL server the test sessions create and "
    "drop their databases on. Unset: an embedded server.",
    "ORDERFLOW_BENCH_DATABASE_URL": "Benchmark: the server `python -m bench` runs against.",
    "ORDERFLOW_API_FUZZ_EXAMPLES": "Tests: how many examples the API fuzz test draws.",
    "ORDERFLOW_PG_STATEFUL_EXAMPLES": "Tests: how many examples the PostgreSQL stateful test "
    "draws.",
    "ORDERFLOW_CHAOS_SEED": "Tests: the chaos test's seed, to replay a failing run.",
    "ORDERFLOW_CI_VENV": "CI: the virtual environment `.ci/run` installs into (default: a fresh "
    "temporary one).",
    "ORDERFLOW_TEST_WHEEL": "Tests: the wheel the release test installs (`.ci/run` passes the "
    "one `python -m build` made; unset, the test builds one).",
}

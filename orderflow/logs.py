"""Log output (ORDERFLOW_LOG_FORMAT): plain text lines, or one JSON object per line.

A JSON line has `time`, `level`, `logger`, `message`, and where known `order_id`, `step_id`,
`attempt`, `worker` (bound by the executor for the step it runs, or passed with the record),
`trace_id`, and the access log's `method`, `path`, `status`, `duration_ms`, `user`.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from orderflow_core import logfields

try:
    from opentelemetry import trace as otel_trace
except ImportError:  # pragma: no cover - tracing is optional
    otel_trace = None  # type: ignore[assignment]

TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# Fields a record may carry (bound for the running step, or given as `extra=`), in line order.
FIELDS = (
    "order_id",
    "step_id",
    "attempt",
    "worker",
    "trace_id",
    "method",
    "path",
    "status",
    "duration_ms",
    "user",
)


def current_trace_id() -> str | None:
    """The trace id (32 hex digits) of the span current where the line is logged, if any."""
    if otel_trace is None:
        return None  # type: ignore[unreachable]  # without opentelemetry-api
    context = otel_trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


class StepFields(logging.Filter):
    """Put the fields bound for the running step, and the current span's trace id, on every
    record that lacks them."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in logfields.current().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        if not hasattr(record, "trace_id") and (trace_id := current_trace_id()):
            record.trace_id = trace_id
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line; a traceback, when there is one, is its `exception` string."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        trace = getattr(record, "otelTraceID", None)  # what OpenTelemetry's logging hook sets
        if trace and trace != "0":
            line["trace_id"] = trace
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value if isinstance(value, int | float) else str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(log_format: str, level: int = logging.INFO) -> None:
    """Send every log record to stderr in `log_format` (`text` or `json`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT))
    handler.addFilter(StepFields())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)

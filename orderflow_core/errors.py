"""One flat tree of errors; each leaf carries the stable `code` clients see.

The core knows no transport: which HTTP status a code answers is the API's choice
(orderflow_http/api/problems.py, `STATUSES`)."""

from __future__ import annotations

from typing import Any, ClassVar


class OrderflowError(Exception):
    """Base of every error the core raises on purpose."""

    code: ClassVar[str] = "orderflow_error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra: dict[str, Any] = extra


class InvalidTransition(OrderflowError):
    """The lifecycle table has no such edge, or the command is not allowed now."""

    code = "invalid_transition"

    def __init__(self, current_state: str, requested: str, detail: str | None = None) -> None:
        super().__init__(
            detail or f"cannot go from {current_state!r} to {requested!r}",
            current_state=current_state,
            requested=requested,
        )
        self.current_state = current_state
        self.requested = requested


class NotRetryable(OrderflowError):
    """Retry was asked for a step that may not be re-armed now."""

    code = "not_retryable"


class NotFound(OrderflowError):
    """No such resource, or not one the caller may see."""

    code = "not_found"


class Forbidden(OrderflowError):
    """The caller's role may not do this."""

    code = "forbidden"


class Unauthenticated(OrderflowError):
    """No credentials, or unknown ones."""

    code = "unauthenticated"


class IdempotencyKeyReused(OrderflowError):
    """The same idempotency key came back with a different request."""

    code = "idempotency_key_reused"


class ValidationFailed(OrderflowError):
    """The request broke an input rule; `errors` lists each field."""

    code = "validation_failed"

    def __init__(self, errors: list[dict[str, str]]) -> None:
        super().__init__("the request does not satisfy the input rules", errors=errors)
        self.errors = errors


class DuplicateIdempotencyKey(OrderflowError):
    """The store refused a second record under one idempotency key (a concurrent request won)."""

    code = "idempotency_conflict"


class StoreUnavailable(OrderflowError):
    """The store could not answer in time or at all: a transient infrastructure error."""

    code = "store_unavailable"


class IdempotencyKeyRequired(OrderflowError):
    """A mutating request came without its Idempotency-Key."""

    code = "idempotency_key_required"


class InvalidIdempotencyKey(OrderflowError):
    """The Idempotency-Key is not 1–255 visible ASCII characters."""

    code = "invalid_idempotency_key"


class InvalidParameter(OrderflowError):
    """A query parameter is out of its range."""

    code = "invalid_parameter"


class ConcurrentUpdate(OrderflowError):
    """Another writer changed the order first; re-read and decide again.

    Not raised by the shipped stores (they lock the order); kept for store adapters that use
    optimistic concurrency, and mapped by the API to 409 `concurrent_update`.
    """

    code = "concurrent_update"


class FeedCursorExpired(OrderflowError):
    """A feed cursor (`after`) older than what the feed keeps: the events after it may have been
    removed by retention (docs/retention.md); `oldest_after` is where the kept feed starts."""

    code = "cursor_expired"

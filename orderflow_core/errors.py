"""One flat tree of errors; each leaf carries the stable `code` clients see."""

from __future__ import annotations

from typing import Any, ClassVar


class OrderflowError(Exception):
    """Base of every error the core raises on purpose."""

    code: ClassVar[str] = "orderflow_error"
    status: ClassVar[int] = 500

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra: dict[str, Any] = extra


class InvalidTransition(OrderflowError):
    """The lifecycle table has no such edge, or the command is not allowed now."""

    code = "invalid_transition"
    status = 409

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
    status = 409


class NotFound(OrderflowError):
    """No such resource, or not one the caller may see."""

    code = "not_found"
    status = 404


class Forbidden(OrderflowError):
    """The caller's role may not do this."""

    code = "forbidden"
    status = 403


class Unauthenticated(OrderflowError):
    """No credentials, or unknown ones."""

    code = "unauthenticated"
    status = 401


class IdempotencyKeyReused(OrderflowError):
    """The same idempotency key came back with a different request."""

    code = "idempotency_key_reused"
    status = 422


class ValidationFailed(OrderflowError):
    """The request broke an input rule; `errors` lists each field."""

    code = "validation_failed"
    status = 422

    def __init__(self, errors: list[dict[str, str]]) -> None:
        super().__init__("the request does not satisfy the input rules", errors=errors)
        self.errors = errors


class DuplicateIdempotencyKey(OrderflowError):
    """The store refused a second record under one idempotency key (a concurrent request won)."""

    code = "idempotency_conflict"
    status = 409


class StoreUnavailable(OrderflowError):
    """The store could not answer in time or at all: a transient infrastructure error."""

    code = "store_unavailable"
    status = 503


class IdempotencyKeyRequired(OrderflowError):
    """A mutating request came without its Idempotency-Key."""

    code = "idempotency_key_required"
    status = 400


class InvalidIdempotencyKey(OrderflowError):
    """The Idempotency-Key is not 1–255 visible ASCII characters."""

    code = "invalid_idempotency_key"
    status = 400


class InvalidParameter(OrderflowError):
    """A query parameter is out of its range."""

    code = "invalid_parameter"
    status = 400


class ConcurrentUpdate(OrderflowError):
    """Another writer changed the order first; re-read and decide again.

    Not raised by the shipped stores (they lock the order); kept for store adapters that use
    optimistic concurrency, and mapped by the API to 409 `concurrent_update`.
    """

    code = "concurrent_update"
    status = 409

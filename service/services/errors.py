"""Outcomes of use cases that are not successes. The HTTP layer maps each to one status, in one place."""

from __future__ import annotations


class ServiceError(Exception):
    """Base of the errors a use case reports to its caller: what went wrong in words (`detail`) and as data
    (`extensions`, e.g. the budget limit a plan broke), never in HTTP's terms."""

    retry_after: int | None = None  # seconds after which the same request may well succeed

    def __init__(self, detail: str, **extensions: object):
        super().__init__(detail)
        self.detail = detail
        self.extensions = extensions


class NotFoundError(ServiceError):
    """The object does not exist (or the caller may not know that it does)."""


class ConflictError(ServiceError):
    """The request is valid but clashes with the current state (a duplicate, a resource in use)."""


class InProgressError(ConflictError):
    """A request with the same Idempotency-Key is being processed right now: retry shortly."""

    retry_after = 1


class KeyReusedError(ServiceError):
    """An Idempotency-Key came back with another request (another body, path or method)."""


# Where a request value is: names (and list indices) from the top of the request, () for the whole of it.
FieldPath = tuple[str | int, ...]


class InvalidFieldError(ServiceError):
    """A request field is valid on its own but not in context (an unknown slug, an impossible target).

    `field` is its path in the request (("shape", "heads"), ("allowed_hardware", 2)); a single name may be
    given as a string. The HTTP layer says where that is (service/web/problems.py: a JSON pointer into the
    body).
    """

    def __init__(self, field: str | FieldPath, detail: str):
        super().__init__(detail)
        self.field: FieldPath = (field,) if isinstance(field, str) else tuple(field)


class InvalidParameterError(InvalidFieldError):
    """A query parameter is valid on its own but not in context (a report that would be too long)."""


class InvalidHeaderError(InvalidFieldError):
    """A request header the operation reads is malformed (a 400: the request itself is not understood);
    `field` is the header's name."""


class PreconditionRequiredError(ServiceError):
    """An update or delete came without If-Match: the caller must say which version it read."""


class PreconditionFailedError(ServiceError):
    """The resource changed since the caller read it (its If-Match names an older version)."""

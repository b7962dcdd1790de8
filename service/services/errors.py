"""Outcomes of use cases that are not successes. The HTTP layer maps each to one status, in one place."""

from __future__ import annotations


class ServiceError(Exception):
    """Base of the errors a use case reports to its caller."""

    headers: dict[str, str] = {}

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

    headers = {"Retry-After": "1"}


class KeyReusedError(ServiceError):
    """An Idempotency-Key came back with another request (another body, path or method)."""


class InvalidFieldError(ServiceError):
    """A request field is valid on its own but not in context (an unknown slug, an impossible target).

    `where` locates it as in a problem's error entry: {"pointer": "#/law"} for the body, {"parameter": ...}
    for the query string.
    """

    def __init__(
        self, pointer: str | None, detail: str, *, parameter: str | None = None, header: str | None = None
    ):
        super().__init__(detail)
        if header:
            self.where = {"header": header}
        else:
            self.where = {"parameter": parameter} if parameter else {"pointer": pointer or "#"}


class InvalidHeaderError(InvalidFieldError):
    """A request header the operation reads is malformed (a 400: the request itself is not understood)."""

    def __init__(self, header: str, detail: str):
        super().__init__(None, detail, header=header)


class PreconditionRequiredError(ServiceError):
    """An update or delete came without If-Match: the caller must say which version it read."""


class PreconditionFailedError(ServiceError):
    """The resource changed since the caller read it (its If-Match names an older version)."""

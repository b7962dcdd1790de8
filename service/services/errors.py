"""Outcomes of use cases that are not successes. The HTTP layer maps each to one status, in one place."""

from __future__ import annotations


class ServiceError(Exception):
    """Base of the errors a use case reports to its caller."""

    def __init__(self, detail: str, **extensions: object):
        super().__init__(detail)
        self.detail = detail
        self.extensions = extensions


class NotFoundError(ServiceError):
    """The object does not exist (or the caller may not know that it does)."""


class ConflictError(ServiceError):
    """The request is valid but clashes with the current state (a duplicate, a resource in use)."""


class InvalidFieldError(ServiceError):
    """A request field is valid on its own but not in context (an unknown slug, an impossible target).

    `where` locates it as in a problem's error entry: {"pointer": "#/law"} for the body, {"parameter": ...}
    for the query string.
    """

    def __init__(self, pointer: str | None, detail: str, *, parameter: str | None = None):
        super().__init__(detail)
        self.where = {"parameter": parameter} if parameter else {"pointer": pointer or "#"}


class PreconditionRequiredError(ServiceError):
    """An update or delete came without If-Match: the caller must say which version it read."""


class PreconditionFailedError(ServiceError):
    """The resource changed since the caller read it (its If-Match names an older version)."""

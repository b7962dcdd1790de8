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

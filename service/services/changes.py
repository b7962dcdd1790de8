"""Requests that set a resource's fields: all of them (POST, PUT) or only some (PATCH)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Changes:
    """Base of such a request: `given` names the fields it sets; one not given is None, and one given as
    None is cleared (where the resource allows it)."""

    given: frozenset[str] = frozenset()

    def sets(self, name: str) -> bool:
        return name in self.given

    def given_or(self, name: str, current: Any) -> Any:
        """The value the request gives `name`, or `current` when it leaves the field alone."""
        return getattr(self, name) if name in self.given else current

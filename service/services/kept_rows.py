"""Rows a process keeps while the database tells it of every change to them
(service/workers/change_listener.py).

A process that reads the same few rows on every request (the key that admits it, a new plan's organisation,
budget and calibration) may keep what it read, as long as it hears of every change to those rows: on
PostgreSQL, triggers NOTIFY a channel as a change commits and a thread of each process LISTENs and has the
cache forget; on SQLite, triggers count the changes and each request reads the counts before it uses the
cache. The cache answers only while it hears (`listening`); a row read while something was being
forgotten is not kept (`ticket`), so a change that commits between a request's read and its keeping is never
lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

CAPACITY = 10_000  # rows kept at most: beyond, the cache starts again

Row = tuple[Any, ...]


class KeptRows:
    """Rows by key, each kept `lifetime` seconds at most and only while `listening`."""

    def __init__(
        self, lifetime: float, capacity: int = CAPACITY, clock: Callable[[], float] = time.monotonic
    ):
        self.lifetime = lifetime
        self.capacity = capacity
        self._clock = clock
        self._rows: dict[Hashable, tuple[float, Row]] = {}
        self._generation = 0  # moves on with every forgetting: a read that straddles one is not kept
        self._listening = False
        self._lock = threading.Lock()

    @property
    def listening(self) -> bool:
        return self._listening

    def get(self, key: Hashable) -> Row | None:
        """The row kept for `key`, if it is still to be trusted."""
        if not self._listening:
            return None
        kept = self._rows.get(key)
        if kept is None or self._clock() - kept[0] > self.lifetime:
            return None
        return kept[1]

    def ticket(self) -> int | None:
        """Taken before a row is read; `keep` keeps the row only if nothing was forgotten since."""
        return self._generation if self._listening else None

    def keep(self, key: Hashable, row: Row, ticket: int | None) -> None:
        with self._lock:
            if ticket is None or ticket != self._generation or not self._listening:
                return
            if len(self._rows) >= self.capacity and key not in self._rows:
                self._rows.clear()
            self._rows[key] = (self._clock(), row)

    def update(self, key: Hashable, row: Row) -> None:
        """Replace the row kept for `key` (a change this process made), keeping when it was read."""
        with self._lock:
            kept = self._rows.get(key)
            if kept is not None:
                self._rows[key] = (kept[0], row)

    def forget(self, key: Hashable | None) -> None:
        """Forget `key`'s row (None: every row): the database says it changed."""
        with self._lock:
            self._generation += 1
            if key is None:
                self._rows.clear()
            else:
                self._rows.pop(key, None)

    def listen(self, listening: bool) -> None:
        """Start answering (empty) once the listener listens; stop (and empty) when it no longer does."""
        with self._lock:
            self._generation += 1
            self._rows.clear()
            self._listening = listening

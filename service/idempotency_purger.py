"""Deleting expired Idempotency-Keys in the background, so that requests never wait for it.

A request with a key reads and writes its own key's record only (services/idempotency.py); an expired one of
its own it replaces. Everyone else's expired keys would otherwise stay forever: each app process runs a
purger thread, started with the first request it serves (after gunicorn forked it), which deletes them every
INTERVAL_SECONDS. Purgers in many processes and hosts do not get in each other's way: a look that writes
nothing comes first (on SQLite it takes no write lock), and PostgreSQL skips the rows another purger holds.
Keys are kept a day, so an interval of minutes keeps the table within a few minutes' keys of that day.

Tests call `purge_expired`.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

import flask
from sqlalchemy.exc import SQLAlchemyError

from service.db import Database, get_db
from service.models import utcnow
from service.services import idempotency

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 600.0
PAUSE_AFTER_ERROR_SECONDS = 60.0
# Rows a transaction deletes: each batch holds SQLite's write lock for a few milliseconds only, so that
# requests waiting for it meanwhile are not held up noticeably.
BATCH = 500
EXTENSION_KEY = "idempotency_purger"


def purge_expired(database: Database, now: datetime | None = None) -> int:
    """Delete every key expired at `now` (default: now), BATCH per transaction; how many were deleted."""
    now = now or utcnow()
    with database.read_sessionmaker() as session:
        if not idempotency.any_expired(session, now):  # as most looks find
            return 0
    count = 0
    while True:
        with database.sessionmaker() as session:
            deleted = idempotency.purge_expired(session, now, BATCH)
            session.commit()
        count += deleted
        if deleted < BATCH:  # the last of them, or rows another purger holds: theirs to delete
            return count


class Purger:
    """A process's purger thread: purges every `interval` seconds, the first time as it starts."""

    def __init__(self, database: Database, interval: float = INTERVAL_SECONDS):
        self.database = database
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread unless it runs (it ends with its process)."""
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._loop, name="idempotency-purger", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """End the thread after the purge under way (for tests: its process normally ends it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            pause = self.interval
            try:
                purged = purge_expired(self.database)
                if purged:
                    log.info("expired idempotency keys purged", extra={"count": purged})
            except SQLAlchemyError as error:  # the database is away, or not migrated yet: try again later
                log.warning("idempotency purger: no database", extra={"error_type": type(error).__name__})
                pause = min(pause, PAUSE_AFTER_ERROR_SECONDS)
            except Exception:
                log.exception("idempotency purger")
                pause = min(pause, PAUSE_AFTER_ERROR_SECONDS)
            self._stop.wait(pause)


def _start_purger() -> None:
    purger = flask.current_app.extensions.get(EXTENSION_KEY)
    if purger is not None:
        purger.start()


def init_app(app: flask.Flask) -> None:
    config = app.extensions["planner.config"]
    # Never in tests, which call purge_expired: a thread would purge databases that tests make and drop.
    app.extensions[EXTENSION_KEY] = None if config.testing else Purger(get_db(app))
    app.before_request(_start_purger)

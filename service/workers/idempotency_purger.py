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
from datetime import datetime, timedelta

import flask
from sqlalchemy import delete

from service.data.models import RateLimitBucket, utcnow
from service.infra.background import Periodic, started_by_requests
from service.infra.db import Database, get_db
from service.services import idempotency

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 600.0
PAUSE_AFTER_ERROR_SECONDS = 60.0
# Rows a transaction deletes: each batch holds SQLite's write lock for a few milliseconds only, so that
# requests waiting for it meanwhile are not held up noticeably.
BATCH = 500
EXTENSION_KEY = "idempotency_purger"
IDLE_BUCKET = timedelta(days=1)


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


class Purger(Periodic):
    """A process's purger thread: purges every `interval` seconds, the first time as it starts."""

    name = "idempotency purger"

    def __init__(self, database: Database, interval: float = INTERVAL_SECONDS):
        super().__init__(interval, min(interval, PAUSE_AFTER_ERROR_SECONDS))
        self.database = database

    def work(self) -> None:
        purged = purge_expired(self.database)
        if purged:
            log.info("expired idempotency keys purged", extra={"count": purged})
        purge_idle_buckets(self.database)


def purge_idle_buckets(database: Database, now: datetime | None = None) -> int:
    """Delete the shared rate-limit buckets not counted for a day (full again long since: as absent)."""
    cutoff = (now or utcnow()) - IDLE_BUCKET
    with database.sessionmaker() as session:
        idle = session.scalars(
            delete(RateLimitBucket).where(RateLimitBucket.counted_at < cutoff).returning(RateLimitBucket.key)
        ).all()
        session.commit()
    return len(idle)


def init_app(app: flask.Flask) -> None:
    config = app.extensions["planner.config"]
    # Never in tests, which call purge_expired: a thread would purge databases that tests make and drop.
    started_by_requests(app, EXTENSION_KEY, None if config.testing else Purger(get_db(app)))

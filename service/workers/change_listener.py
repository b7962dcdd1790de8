"""What a process keeps of rows it reads on every request, while it learns of every change to them (issue
24): the keys it verified lately, and what a new plan reads.

Every /v1 request looks its key up, and every new plan reads its organisation, its budget and the
organisation's calibration for the hardware: a session and a statement each, about 0.2 ms of a worker's CPU
for the key (a fifth of an authenticated GET's) and 0.3 ms for a plan's reads on PostgreSQL, and as much
again on SQLite, where the statement costs no round trip but the session and its transaction do
(bench/RESULTS.md, issue 24). These rows rarely change, so each process keeps them
(services/kept_rows.KeptRows), for KEY_CACHE_SECONDS and PLAN_READS_CACHE_SECONDS at most, and forgets them
as soon as the database says they changed, whoever changed them (the API, the CLI, SQL by hand):

* PostgreSQL: triggers NOTIFY a channel when a row changes: `api_key_changed` with the key's id when a key's
  row changes other than in `last_used_at` or is deleted (migration 0011), `plan_reads_changed` when an
  organisation, a budget's currency, a calibration or a hardware profile's slug changes (migration 0013); an
  empty payload when a table is truncated. Each process runs a `Listener` thread that LISTENs on a
  connection of its own and has the cache of the channel forget the key named (every key, for an empty
  payload). PostgreSQL sends the notification as the change commits, so the other processes forget within
  milliseconds; the process that made the change forgets at once (it revoked the key, or its session wrote
  what a plan reads: `forget_own_writes`), so that the next request to it, which may come before the
  notification, never finds the row it changed. The caches only answer while the listener listens: they
  start empty, once LISTEN has been acknowledged, and are emptied and turned off whenever the listener's
  connection fails (a restart of the database, a network fault), until it listens again.
* SQLite (a file): the same changes add one to the channel's counter in `change_counters` (migration 0014's
  triggers), and every request that uses a cache first reads the counters (`ChangeCounters`): a cache whose
  counter moved forgets every row, before the request looks at it. The processes of one SQLite database
  share its host, so there is nothing to wait for: a change that committed is seen by the next request of
  every process, this one's included.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Mapping

import flask
import psycopg
from sqlalchemy import Engine, event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from service.infra.background import Periodic, started_by_requests
from service.infra.db import get_db, sqlite_file
from service.services import plans
from service.services.kept_rows import KeptRows
from service.services.keys import VerifiedKeys

log = logging.getLogger(__name__)

KEYS_CHANNEL = "api_key_changed"  # migration 0011's trigger notifies it
PLAN_READS_CHANNEL = "plan_reads_changed"  # migration 0013's
KEYS_EXTENSION = "planner.verified_keys"
PLAN_READS_EXTENSION = "planner.plan_reads"
LISTENER_KEY = "change_listener"
COUNTERS_KEY = "change_counters"  # SQLite's
# How often the listener checks that its connection still answers when nothing is notified: a connection
# that died silently must not leave the caches on for long.
HEARTBEAT_SECONDS = 5.0
RECONNECT_SECONDS = 1.0  # after the connection failed; after the database refused a new one, PAUSE_SECONDS
PAUSE_SECONDS = 5.0


class Listener(Periodic):
    """A process's thread that LISTENs on each channel of `caches` on a connection of its own (taken from
    the engine's pool and detached from it, with the engine's settings and bounds) and has the channel's
    cache forget what a notification names."""

    name = "change listener"

    def __init__(
        self,
        engine: Engine,
        caches: Mapping[str, KeptRows],
        answer_timeout: float,
        *,
        heartbeat: float = HEARTBEAT_SECONDS,
        reconnect: float = RECONNECT_SECONDS,
        pause: float = PAUSE_SECONDS,
    ):
        super().__init__(interval=reconnect, pause_after_error=pause)
        self.engine = engine
        self.caches = dict(caches)
        self.answer_timeout = answer_timeout
        self.heartbeat = heartbeat
        self.backend_pid: int | None = None  # its connection's server process while it listens (logs, tests)

    def work(self) -> None:
        """Listen until the connection fails or the thread is stopped; the caches answer meanwhile only."""
        proxied = self.engine.raw_connection()
        proxied.detach()  # the pool forgets it: it is this thread's for as long as it listens
        connection = proxied.dbapi_connection
        assert isinstance(connection, psycopg.Connection)
        try:
            connection.autocommit = True
            # The bound of a pooled connection's ping: a server that stops answering turns the caches off.
            connection.answer_timeout = self.answer_timeout
            for channel in self.caches:
                connection.execute(f"LISTEN {channel}")
            self.backend_pid = connection.info.backend_pid
            self._listen(True)
            while not self._stopped:
                for notification in connection.notifies(timeout=self.heartbeat):
                    cache = self.caches.get(notification.channel)
                    if cache is not None:
                        cache.forget(notification.payload or None)
                connection.execute("SELECT 1")
        except psycopg.Error as error:
            log.warning(f"{self.name}: connection lost", extra={"error_type": type(error).__name__})
        finally:
            self._listen(False)
            self.backend_pid = None
            connection.close()

    def _listen(self, listening: bool) -> None:
        for cache in self.caches.values():
            cache.listen(listening)


class ChangeCounters:
    """SQLite's stand-in for the listener: migration 0014's triggers count each channel's changes in
    `change_counters`, in the transaction of the change. A request reads the counters (`check`) before it
    uses a cache; a cache whose channel's counter moved since the last check forgets every row. A change
    that committed before a request began is therefore never answered from a row read before it, in this
    process or another: about 6 µs a request, on a connection of each thread's own, against the 0.2 ms of a
    session's lookup."""

    def __init__(self, engine: Engine, caches: Mapping[str, KeptRows]):
        self.engine = engine
        self.caches = dict(caches)
        self._seen: dict[str, int | None] = {}  # each channel's count at the last check
        self._lock = threading.Lock()
        self._local = threading.local()  # a connection per thread: sqlite3's are the thread's that made them

    def check(self) -> None:
        """Read the counters; turn the caches on (empty) at the first reading, have those whose counter
        moved forget, and turn every cache off when the counters cannot be read (a database not migrated to
        0014, a broken file): its requests then read what they need."""
        try:
            counts = dict(self._connection().execute(_COUNTED).fetchall())
        except (sqlite3.Error, SQLAlchemyError) as error:
            broken = self._local.__dict__.pop("connection", None)
            if broken is not None:
                broken.close()
            if any(cache.listening for cache in self.caches.values()) or not self._seen:
                # Once as the caches turn off, not on every request while they stay off.
                log.warning("change counters not read", extra={"error_type": type(error).__name__})
            counts = {}
        with self._lock:
            for channel, cache in self.caches.items():
                count = counts.get(channel)
                if count is None or not cache.listening:
                    cache.listen(count is not None)
                elif count != self._seen.get(channel):
                    cache.forget(None)
                self._seen[channel] = count

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            proxied = self.engine.raw_connection()
            proxied.detach()  # the pool forgets it: it is this thread's, configured as the engine's are
            assert isinstance(proxied.dbapi_connection, sqlite3.Connection)
            connection = self._local.connection = proxied.dbapi_connection
        return connection


_COUNTED = "SELECT channel, changes FROM change_counters"  # migration 0014's table


def init_app(app: flask.Flask) -> None:
    """Outside tests, the caches whose lifetime is above 0, and what keeps them true: on PostgreSQL a
    listener, started by the process's first request; on SQLite (a file) the change counters, read by each
    request that uses a cache. Tests that want them build them (`listener_for`, `counters_for`)."""
    config = app.extensions["planner.config"]
    engine = get_db(app).engine
    for extension in (KEYS_EXTENSION, PLAN_READS_EXTENSION, COUNTERS_KEY):
        app.extensions[extension] = None
    keys, plan_reads = config.key_cache_seconds, config.plan_reads_cache_seconds
    if config.testing:
        keys = plan_reads = 0
    wanted = keys > 0 or plan_reads > 0
    on_postgresql = engine.dialect.name == "postgresql"
    listener = listener_for(app, keys=keys, plan_reads=plan_reads) if wanted and on_postgresql else None
    started_by_requests(app, LISTENER_KEY, listener)
    if wanted and not on_postgresql and sqlite_file(engine.url) is not None:
        counters_for(app, keys=keys, plan_reads=plan_reads)


def listener_for(app: flask.Flask, *, keys: float = 0, plan_reads: float = 0, **settings: float) -> Listener:
    """Give `app` the caches of the lifetimes given (seconds; 0: no such cache) and their listener (not yet
    running)."""
    config = app.extensions["planner.config"]
    caches = _caches(app, keys, plan_reads)
    if PLAN_READS_CHANNEL in caches:
        forget_own_writes(get_db(app).sessionmaker, caches[PLAN_READS_CHANNEL])
    return Listener(get_db(app).engine, caches, float(config.db_connect_timeout_seconds), **settings)


def counters_for(app: flask.Flask, *, keys: float = 0, plan_reads: float = 0) -> ChangeCounters:
    """Give `app` (on SQLite) the caches of the lifetimes given (seconds; 0: no such cache) and the change
    counters each request reads before it uses them. The process's own changes move the counters too."""
    counters = ChangeCounters(get_db(app).engine, _caches(app, keys, plan_reads))
    app.extensions[COUNTERS_KEY] = counters
    return counters


def _caches(app: flask.Flask, keys: float, plan_reads: float) -> dict[str, KeptRows]:
    caches: dict[str, KeptRows] = {}
    if keys > 0:
        caches[KEYS_CHANNEL] = app.extensions[KEYS_EXTENSION] = VerifiedKeys(keys)
    if plan_reads > 0:
        caches[PLAN_READS_CHANNEL] = app.extensions[PLAN_READS_EXTENSION] = KeptRows(plan_reads)
    return caches


_WROTE_PLAN_READS = "planner.wrote_plan_reads"


def forget_own_writes(sessions: sessionmaker[Session], reads: KeptRows) -> None:
    """Have `reads` forget everything as a transaction of `sessions` commits that wrote what a plan reads
    (the triggers of migration 0013 say the same, a moment later). A session that writes with the ORM is
    seen; the statements that move a budget's amounts (never kept) are not, and need not be."""

    @event.listens_for(sessions, "after_flush")
    def _flushed(session: Session, _context: object) -> None:
        if plans.writes_what_new_plans_read(session):
            session.info[_WROTE_PLAN_READS] = True

    @event.listens_for(sessions, "after_commit")
    def _committed(session: Session) -> None:
        if session.info.pop(_WROTE_PLAN_READS, False):
            reads.forget(None)

    @event.listens_for(sessions, "after_rollback")
    def _rolled_back(session: Session) -> None:
        session.info.pop(_WROTE_PLAN_READS, None)


def verified_keys() -> VerifiedKeys | None:
    """This app's cache of keys, None where there is none (tests, KEY_CACHE_SECONDS=0, SQLite in memory)."""
    _counters_read()
    keys: VerifiedKeys | None = flask.current_app.extensions.get(KEYS_EXTENSION)
    return keys


def plan_reads() -> KeptRows | None:
    """This app's cache of new plans' reads, None where there is none (tests, PLAN_READS_CACHE_SECONDS=0,
    SQLite in memory)."""
    _counters_read()
    reads: KeptRows | None = flask.current_app.extensions.get(PLAN_READS_EXTENSION)
    return reads


def _counters_read() -> None:
    """On SQLite, the change counters read once per request, before its first use of a cache."""
    counters: ChangeCounters | None = flask.current_app.extensions.get(COUNTERS_KEY)
    if counters is not None and not flask.g.get(_COUNTERS_READ):
        counters.check()
        setattr(flask.g, _COUNTERS_READ, True)


_COUNTERS_READ = "planner_change_counters_read"

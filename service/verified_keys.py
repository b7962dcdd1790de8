"""API keys a process verified lately, kept while it hears of every change to them (PostgreSQL; issue 24).

Every /v1 request looks its key up: on PostgreSQL a statement of its own, about 0.2 ms of a worker's CPU and
a fifth of an authenticated GET's (bench/RESULTS.md, issue 24). A key's row rarely changes (revoked, or
deleted; `last_used_at` aside, which only bookkeeping reads), so each process keeps the rows of the keys it
verified, for KEY_CACHE_SECONDS at most, and forgets one as soon as the database says it changed:

* migration 0011 gives `api_keys` a trigger that NOTIFYs `CHANNEL` with the key's id when a row changes
  other than in `last_used_at` or is deleted (an empty payload when the table is truncated), whoever
  changes it: the API, the CLI, SQL by hand;
* each process runs a `Listener` thread that LISTENs on a connection of its own and forgets the key named
  (every key, for an empty payload). PostgreSQL sends the notification as the change commits, so the
  other processes forget the key within milliseconds; the process that revoked a key forgets it at once.

The cache only answers while its listener listens: it starts empty, once LISTEN has been acknowledged, and
is emptied and turned off whenever the listener's connection fails (a restart of the database, a network
fault), until it listens again. A row read while a notification was being handled is not kept (`ticket`),
so a change that commits between a request's read and its keeping is never lost. Only rows that admitted
their request are kept: an unknown or wrong key is looked up every time, as it always was. The row kept is
the row read, and `keys.authenticate` checks it as it checks a row it reads: the secret's digest, revoked,
expired. SQLite has no notifications, and a lookup there costs no round trip: no cache.
"""

from __future__ import annotations

import logging

import flask
import psycopg
from sqlalchemy import Engine

from service.background import Periodic, started_by_requests
from service.db import get_db
from service.services.keys import VerifiedKeys

log = logging.getLogger(__name__)

CHANNEL = "api_key_changed"  # migration 0011's trigger notifies it
EXTENSION_KEY = "planner.verified_keys"
LISTENER_KEY = "key_change_listener"
# How often the listener checks that its connection still answers when nothing is notified: a connection
# that died silently must not leave the cache on for long.
HEARTBEAT_SECONDS = 5.0
RECONNECT_SECONDS = 1.0  # after the connection failed; after the database refused a new one, PAUSE_SECONDS
PAUSE_SECONDS = 5.0


class Listener(Periodic):
    """A process's thread that LISTENs for changes to keys on a connection of its own (taken from the
    engine's pool and detached from it, with the engine's settings and bounds) and has `keys` forget them."""

    name = "key change listener"

    def __init__(
        self,
        engine: Engine,
        keys: VerifiedKeys,
        answer_timeout: float,
        *,
        heartbeat: float = HEARTBEAT_SECONDS,
        reconnect: float = RECONNECT_SECONDS,
        pause: float = PAUSE_SECONDS,
    ):
        super().__init__(interval=reconnect, pause_after_error=pause)
        self.engine = engine
        self.keys = keys
        self.answer_timeout = answer_timeout
        self.heartbeat = heartbeat
        self.backend_pid: int | None = None  # its connection's server process while it listens (logs, tests)

    def work(self) -> None:
        """Listen until the connection fails or the thread is stopped; the cache answers meanwhile only."""
        proxied = self.engine.raw_connection()
        proxied.detach()  # the pool forgets it: it is this thread's for as long as it listens
        connection = proxied.dbapi_connection
        assert isinstance(connection, psycopg.Connection)
        try:
            connection.autocommit = True
            # The bound of a pooled connection's ping: a server that stops answering turns the cache off.
            connection.answer_timeout = self.answer_timeout
            connection.execute(f"LISTEN {CHANNEL}")
            self.backend_pid = connection.info.backend_pid
            self.keys.listen(True)
            while not self._stopped:
                for notification in connection.notifies(timeout=self.heartbeat):
                    self.keys.forget(notification.payload or None)
                connection.execute("SELECT 1")
        except psycopg.Error as error:
            log.warning(f"{self.name}: connection lost", extra={"error_type": type(error).__name__})
        finally:
            self.keys.listen(False)
            self.backend_pid = None
            connection.close()


def init_app(app: flask.Flask) -> None:
    """On PostgreSQL outside tests, a cache of KEY_CACHE_SECONDS (0: none) and its listener, started by the
    process's first request. Tests that want them build them (`listener_for`)."""
    config = app.extensions["planner.config"]
    engine = get_db(app).engine
    wanted = engine.dialect.name == "postgresql" and config.key_cache_seconds > 0 and not config.testing
    app.extensions[EXTENSION_KEY] = None
    started_by_requests(app, LISTENER_KEY, listener_for(app, config.key_cache_seconds) if wanted else None)


def listener_for(app: flask.Flask, lifetime: float, **settings: float) -> Listener:
    """Give `app` a cache of `lifetime` seconds and its listener (not yet running)."""
    config = app.extensions["planner.config"]
    keys = VerifiedKeys(lifetime)
    app.extensions[EXTENSION_KEY] = keys
    return Listener(get_db(app).engine, keys, float(config.db_connect_timeout_seconds), **settings)


def verified_keys() -> VerifiedKeys | None:
    """This app's cache, None where there is none (SQLite, tests, KEY_CACHE_SECONDS=0)."""
    keys: VerifiedKeys | None = flask.current_app.extensions.get(EXTENSION_KEY)
    return keys

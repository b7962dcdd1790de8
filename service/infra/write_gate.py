"""SQLite's writers queue at a gate rather than poll for the database's write lock (issue 24).

A transaction that may write takes SQLite's one write lock as it begins (BEGIN IMMEDIATE,
service/infra/db.py). A writer that finds the lock taken is put to sleep by SQLite's busy handler, for 1, 2,
5, 10, 15, 20, 25 and up to 100 ms between tries, whatever the holder does meanwhile: under a burst of plans
the lock sat free while its writers slept, the cores idle, and one plan in a hundred took 350-560 ms
(bench/RESULTS.md).

Before its BEGIN IMMEDIATE a connection passes this gate: a lock of its process, whose waiting threads the
kernel wakes as it is released, then an flock of a file beside the database, for writers in other processes
(tried every GATE_POLL_SECONDS). It leaves the gate as its transaction ends: commit, rollback, or the
connection going back to its pool or closed.

The gate only orders writers: SQLite's lock still guards the database. A writer waits at the gate for the busy
timeout at most, the bound it had for SQLite's lock (README, "When the database is in trouble"); if the gate
stays shut that long, it tries SQLite's lock once more without waiting, and fails as before (a 503) if that is
taken. So a release some path missed would cost time, never a hang or a wrong write.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, event

log = logging.getLogger(__name__)

GATE_POLL_SECONDS = 0.0002  # between tries of the file lock another process holds
SUFFIX = "-writers"  # the gate's file: the database's path with this appended


class WriteGate:
    """The gate of the SQLite database at `database`, for the connections of one engine."""

    def __init__(self, database: Path, timeout: float):
        self.path = Path(f"{database}{SUFFIX}")
        self.timeout = timeout
        self._threads = threading.Lock()  # orders this process's writers
        self._holder: object | None = None  # the driver connection inside the gate
        self._file: int | None = None  # this process's descriptor of the gate's file
        self._pid = 0  # the process that opened it: a forked child opens its own
        self._unavailable = False  # its file could not be opened (said once in the log)

    def enter(self, holder: object) -> bool | None:
        """Wait for the gate (`timeout` seconds at most) and hold it for `holder`; False if it stayed shut,
        None if there is no gate (its file could not be opened: the writer waits in SQLite as before)."""
        deadline = time.monotonic() + self.timeout
        if not self._threads.acquire(timeout=self.timeout):
            return False
        try:
            descriptor = self._descriptor()
            if descriptor is None:
                self._threads.release()
                return None
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        self._threads.release()
                        return False
                    time.sleep(GATE_POLL_SECONDS)
        except BaseException:
            self._threads.release()
            raise
        self._holder = holder
        return True

    def leave(self, holder: object) -> None:
        """Let the next writer in, if `holder` is inside (anything else is a no-op: safe on every path)."""
        if self._holder is None or self._holder is not holder:
            return
        self._holder = None
        try:
            if self._file is not None and self._pid == os.getpid():
                fcntl.flock(self._file, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def _descriptor(self) -> int | None:
        # One per process: flock excludes other open file descriptions, and a child forked with its parent's
        # would share the parent's lock. Threads of one process are ordered by _threads instead. Read-only
        # is enough for flock, so that any user who may read the database may queue (another user's
        # `flask` command, say).
        if self._file is None or self._pid != os.getpid():
            try:
                self._file = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)
            except OSError as error:
                if not self._unavailable:
                    log.warning(
                        "no writers' gate: SQLite's busy handler orders writers",
                        extra={"path": str(self.path), "error_type": type(error).__name__},
                    )
                self._unavailable = True
                return None
            self._pid = os.getpid()
        return self._file


def install(engine: Engine, database: Path, timeout: float) -> WriteGate:
    """Make the writing transactions of `engine` (on the SQLite file `database`) pass a gate: its `begin`
    listener begins them with `begin`. The gate is left as soon as the transaction's COMMIT or ROLLBACK has
    run (SQLAlchemy's `commit` and `rollback` events come before them, which would let the next writer in to
    find the lock still taken), and at the latest as its connection goes back to the pool or is closed,
    whatever path took it there."""
    gate = WriteGate(database, timeout)
    dialect = engine.dialect
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def do_commit(dbapi_connection: Any) -> None:
        try:
            commit(dbapi_connection)
        finally:
            gate.leave(_driver(dbapi_connection))

    def do_rollback(dbapi_connection: Any) -> None:
        try:
            rollback(dbapi_connection)
        finally:
            gate.leave(_driver(dbapi_connection))

    # The engine's own dialect instance: no other engine sees these.
    dialect.do_commit = do_commit  # type: ignore[method-assign]
    dialect.do_rollback = do_rollback  # type: ignore[method-assign]
    event.listen(engine, "checkin", lambda dbapi_connection, _record: gate.leave(dbapi_connection))
    event.listen(engine, "close", lambda dbapi_connection, _record: gate.leave(dbapi_connection))
    return gate


def begin(gate: WriteGate, connection: Connection, statement: str) -> None:
    """Begin `connection`'s writing transaction with `statement` (BEGIN IMMEDIATE) once through the gate.
    Past the timeout, the statement tries SQLite's lock once, at once, so that the wait stays within the
    bound it had."""
    if gate.enter(_driver(connection.connection)) is not False:
        connection.exec_driver_sql(statement)
        return
    busy_timeout_ms = round(gate.timeout * 1000)
    connection.exec_driver_sql("PRAGMA busy_timeout = 0")
    try:
        connection.exec_driver_sql(statement)
    finally:
        connection.exec_driver_sql(f"PRAGMA busy_timeout = {busy_timeout_ms}")


def _driver(connection: Any) -> object:
    """The driver's connection, whether given as it is or in the pool's proxy for it."""
    return getattr(connection, "dbapi_connection", connection)

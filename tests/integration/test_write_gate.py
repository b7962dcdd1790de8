"""SQLite's writers queue at a gate (service/infra/write_gate.py): a writer waits there while another writes,
is let in as soon as that one's transaction ends however it ends, and never waits there longer than the busy
timeout."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

from service.infra.config import Config
from service.infra.db import READ_ONLY, create_db_engine
from service.infra.write_gate import SUFFIX

BUSY_TIMEOUT_MS = 1000


@pytest.fixture
def database(tmp_path):
    return tmp_path / "planner.db"


@pytest.fixture
def sqlite_engine(database):
    engine = create_db_engine(
        Config(database_url=f"sqlite:///{database}", sqlite_busy_timeout_ms=BUSY_TIMEOUT_MS)
    )
    with engine.begin() as setup:
        setup.execute(text("CREATE TABLE t (x INTEGER)"))
    yield engine
    engine.dispose()


@pytest.fixture
def begins(sqlite_engine) -> list[tuple[int, float]]:
    """(thread, time) of each BEGIN IMMEDIATE sent to SQLite."""
    sent: list[tuple[int, float]] = []

    def note(_connection, _cursor, statement, *_args) -> None:
        if statement == "BEGIN IMMEDIATE":
            sent.append((threading.get_ident(), time.monotonic()))

    event.listen(sqlite_engine, "before_cursor_execute", note)
    return sent


def write_in_thread(engine, value: int) -> tuple[threading.Thread, threading.Event]:
    """A writer on another thread; `began` is set once its transaction has begun."""
    began = threading.Event()

    def write() -> None:
        with engine.begin() as connection:
            began.set()
            connection.execute(text("INSERT INTO t VALUES (:x)"), {"x": value})

    thread = threading.Thread(target=write)
    thread.start()
    return thread, began


def sent_by(begins: list[tuple[int, float]], thread: threading.Thread) -> list[float]:
    return [at for ident, at in begins if ident == thread.ident]


def rows(engine) -> list[int]:
    with engine.connect() as connection:
        return sorted(connection.execute(text("SELECT x FROM t")).scalars())


@pytest.mark.parametrize("ending", ["commit", "rollback", "close"])
def test_a_writer_waits_for_the_one_inside_and_goes_in_as_its_transaction_ends(sqlite_engine, begins, ending):
    first = sqlite_engine.connect()
    first.begin()
    first.execute(text("INSERT INTO t VALUES (1)"))
    thread, began = write_in_thread(sqlite_engine, 2)

    assert not began.wait(0.3)
    ended = time.monotonic()
    if ending == "commit":
        first.commit()
    elif ending == "rollback":
        first.rollback()
    else:  # neither: the connection goes back to the pool, its transaction undone
        first.close()
    assert began.wait(5)  # let in as the transaction ended, the connection still open
    first.close()
    thread.join(5)

    # It waited at the gate, not in SQLite's busy handler (which sleeps up to 100 ms between tries): its BEGIN
    # was sent once, after the first writer's transaction had ended.
    [sent] = sent_by(begins, thread)
    assert sent > ended
    assert rows(sqlite_engine) == ([1, 2] if ending == "commit" else [2])


def test_readers_do_not_wait_at_the_gate(sqlite_engine):
    sent: list[str] = []
    with sqlite_engine.connect() as writer:
        writer.begin()
        with sqlite_engine.connect().execution_options(**READ_ONLY) as reader:
            event.listen(reader, "before_cursor_execute", lambda *args: sent.append(args[2]))
            started = time.monotonic()
            reader.begin()
            assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 0
            waited = time.monotonic() - started
            reader.rollback()
        writer.rollback()
    # Straight to its BEGIN DEFERRED: a reader at the gate would have waited the busy timeout for the writer
    # of this same thread, then tried SQLite without waiting (PRAGMA busy_timeout = 0 first).
    assert sent == ["BEGIN DEFERRED", "SELECT count(*) FROM t"]
    assert waited < BUSY_TIMEOUT_MS / 1000 / 2


def test_a_writer_of_another_process_keeps_the_gate_until_it_lets_go(sqlite_engine, database, begins):
    # Another open file description of the gate's file: what another process's descriptor is to flock.
    other = os.open(f"{database}{SUFFIX}", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        thread, began = write_in_thread(sqlite_engine, 1)
        assert not began.wait(0.3)
        released = time.monotonic()
        fcntl.flock(other, fcntl.LOCK_UN)
        thread.join(5)
    finally:
        os.close(other)
    assert began.is_set()
    [sent] = sent_by(begins, thread)
    assert sent > released
    assert rows(sqlite_engine) == [1]


def test_a_gate_kept_shut_too_long_is_passed_by_and_sqlite_decides(sqlite_engine, database):
    # A holder that never lets go (a bug, say) while SQLite's own lock is free: writers wait the busy timeout
    # at the gate, then take the free lock and write.
    other = os.open(f"{database}{SUFFIX}", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        started = time.monotonic()
        with sqlite_engine.begin() as connection:
            waited = time.monotonic() - started
            connection.execute(text("INSERT INTO t VALUES (1)"))
    finally:
        os.close(other)
    assert BUSY_TIMEOUT_MS / 1000 <= waited < BUSY_TIMEOUT_MS / 1000 + 3
    assert rows(sqlite_engine) == [1]
    with sqlite_engine.begin() as connection:  # and the gate works as before for the next writers
        connection.execute(text("INSERT INTO t VALUES (2)"))
    assert rows(sqlite_engine) == [1, 2]


def test_one_connection_writes_again_and_again(sqlite_engine):
    with sqlite_engine.connect() as connection:
        for value in range(3):
            started = time.monotonic()
            connection.begin()
            connection.execute(text("INSERT INTO t VALUES (:x)"), {"x": value})
            connection.commit()
            assert time.monotonic() - started < BUSY_TIMEOUT_MS / 1000  # never waiting on itself
    assert rows(sqlite_engine) == [0, 1, 2]


def test_a_writer_gives_up_within_the_busy_timeout_when_gate_and_lock_stay_taken(sqlite_engine, database):
    # The bound a writer had for SQLite's lock holds for the gate and the lock together: a 503, not two waits.
    other = os.open(f"{database}{SUFFIX}", os.O_RDWR)
    holder = sqlite3.connect(database, isolation_level=None)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(OperationalError, match="locked"), sqlite_engine.begin():
            pass
        waited = time.monotonic() - started
    finally:
        holder.close()
        os.close(other)
    assert BUSY_TIMEOUT_MS / 1000 <= waited < 2 * BUSY_TIMEOUT_MS / 1000
    with sqlite_engine.connect() as connection:  # the connection waits as long as before for the next time
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == BUSY_TIMEOUT_MS


def test_without_its_file_there_is_no_gate_and_writers_wait_in_sqlite_as_before(database, caplog):
    # The gate's file cannot be opened (here a directory stands in its place; in production, say, a database
    # directory another user owns): writes go on, ordered by SQLite's busy handler alone, and the log says so.
    (database.parent / f"{database.name}{SUFFIX}").mkdir()
    engine = create_db_engine(Config(database_url=f"sqlite:///{database}"))
    try:
        for value in range(2):
            with engine.begin() as connection:
                if value == 0:
                    connection.execute(text("CREATE TABLE t (x INTEGER)"))
                connection.execute(text("INSERT INTO t VALUES (:x)"), {"x": value})
        assert rows(engine) == [0, 1]
    finally:
        engine.dispose()
    warnings = [record for record in caplog.records if "no writers' gate" in record.getMessage()]
    assert len(warnings) == 1

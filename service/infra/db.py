"""Engine and session lifecycle: one engine per process, one session per request, closed at teardown."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import flask
import psycopg
from sqlalchemy import Connection, Engine, NullPool, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from service.infra import json_provider
from service.infra.actors import act_as
from service.infra.config import Config

EXTENSION_KEY = "planner.db"

log = logging.getLogger(__name__)


def normalise_url(database_url: str) -> URL:
    """Accept the URLs people paste (`postgres://`, `postgresql://`) and pick the psycopg 3 driver."""
    url = make_url(database_url)
    if url.drivername in ("postgres", "postgresql"):
        url = url.set(drivername="postgresql+psycopg")
    return url


SQLITE_SORT_THREADS = 4

# A statement's answer may take this long beyond DB_STATEMENT_TIMEOUT_MS before the service takes the server
# for frozen: a server that runs cancels the statement itself first, and its error arrives well within it.
ANSWER_GRACE_SECONDS = 2
# TCP gives up on a database host that has gone away (a partition, a dead host): data sent and not
# acknowledged within DB_CONNECT_TIMEOUT_SECONDS fails the connection (tcp_user_timeout), and an idle pooled
# connection is probed after this many seconds of silence, then every KEEPALIVE_INTERVAL_SECONDS.
KEEPALIVE_IDLE_SECONDS = 10
KEEPALIVE_INTERVAL_SECONDS = 5
KEEPALIVE_COUNT = 3
# /readyz: connecting, and each answer, within this many seconds (its own connections, never the pool's).
READINESS_TIMEOUT_SECONDS = 2


def create_db_engine(config: Config) -> Engine:
    url = normalise_url(config.database_url)
    if url.get_backend_name() == "sqlite":
        return _create_sqlite_engine(url, config.sqlite_busy_timeout_ms)
    # Database trouble must surface as a prompt error (503 to the caller), never a hung worker: bounded waits
    # to connect, for a pooled connection and for each answer (README, "When the database is in trouble").
    # A connection that broke while idle (a database restart) is found by the pre-ping and replaced.
    statement_timeout_ms = config.db_statement_timeout_ms
    engine = create_engine(
        url,
        json_serializer=json_provider.store,
        json_deserializer=json_provider.load,
        pool_pre_ping=True,
        pool_size=config.db_pool_size,
        max_overflow=config.db_pool_size,
        pool_timeout=config.db_pool_timeout_seconds,
        connect_args=_postgres_connect_args(config.db_connect_timeout_seconds, statement_timeout_ms),
    )
    # Whoever turns the statement timeout off (0) lets statements run as long as they take: answers are then
    # not bounded either. The pre-ping of a pooled connection is answered at once by a server that runs: it
    # gets no longer than connecting does.
    in_use = statement_timeout_ms / 1000 + ANSWER_GRACE_SECONDS if statement_timeout_ms else None
    _bound_answers(engine, in_use=in_use, idle=config.db_connect_timeout_seconds)
    return engine


def create_readiness_engine(config: Config) -> Engine | None:
    """PostgreSQL: connections of /readyz's own, made for each probe, so that it answers within seconds even
    while requests hold every pooled connection or wait for a frozen database. None for SQLite."""
    url = normalise_url(config.database_url)
    if url.get_backend_name() == "sqlite":
        return None
    connect_args = _postgres_connect_args(READINESS_TIMEOUT_SECONDS, READINESS_TIMEOUT_SECONDS * 1000)
    engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
    _bound_answers(engine, in_use=READINESS_TIMEOUT_SECONDS, idle=READINESS_TIMEOUT_SECONDS)
    return engine


def _postgres_connect_args(connect_timeout_seconds: int, statement_timeout_ms: int) -> dict[str, object]:
    return {
        "connect_timeout": connect_timeout_seconds,
        "options": f"-c statement_timeout={int(statement_timeout_ms)}",
        "keepalives": 1,
        "keepalives_idle": KEEPALIVE_IDLE_SECONDS,
        "keepalives_interval": KEEPALIVE_INTERVAL_SECONDS,
        "keepalives_count": KEEPALIVE_COUNT,
        "tcp_user_timeout": connect_timeout_seconds * 1000,
    }


class _BoundedConnection(psycopg.Connection):
    """A psycopg connection that waits for the server's answer `answer_timeout` seconds at most (None: as
    long as it takes).

    A server that is frozen but keeps its connections open (a hung host, a stopped process: the kernel still
    acknowledges what is sent and answers keepalives) never answers, and its statement_timeout cannot fire:
    psycopg alone waits forever, and neither TCP keepalives nor tcp_user_timeout notice (measured on a
    SIGSTOPped server, as tests/reliability/test_frozen_database.py makes one). Past the bound the connection
    is closed, since what the server would still send is unknown; SQLAlchemy takes the error for a disconnect
    and discards the connection with the rest of its pool, and the request gets a 503.
    """

    answer_timeout: float | None = None

    def wait(self, gen: Any, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        # Every wait on an open connection comes here: statements, commit, rollback, the pre-ping.
        if timeout is not None:  # psycopg's own bounded waits (notifies) expect their timeout
            return super().wait(gen, *args, timeout=timeout, **kwargs)
        try:
            return super().wait(gen, *args, timeout=self.answer_timeout, **kwargs)
        except psycopg.errors._WaitTimeout:  # what psycopg's wait() raises when `timeout` runs out
            self.close()
            raise psycopg.OperationalError(
                f"the database did not answer within {self.answer_timeout:g} s; connection closed"
            ) from None


def _bound_answers(engine: Engine, *, in_use: float | None, idle: float) -> None:
    """Connections of `engine` wait `in_use` seconds for an answer while checked out, `idle` seconds for the
    pre-ping that precedes a checkout (the pool pings before its `checkout` event)."""

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> _BoundedConnection:
        connection = _BoundedConnection.connect(*cargs, **cparams)
        connection.answer_timeout = in_use
        return connection

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        dbapi_connection.answer_timeout = in_use

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is not None:  # None: invalidated
            dbapi_connection.answer_timeout = idle


def lift_request_bounds(connection: Connection) -> None:
    """PostgreSQL: no statement timeout for the rest of this transaction, and no bound on answers until the
    connection goes back to its pool. For migrations: a schema change on a large table may take minutes."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("SET LOCAL statement_timeout = 0")
        connection.connection.dbapi_connection.answer_timeout = None


def sqlite_file(url: URL) -> Path | None:
    """The file a SQLite database is kept in, one that several connections (and processes) share; None for
    one in memory."""
    return Path(url.database) if url.database and url.database != ":memory:" else None


def _create_sqlite_engine(url: URL, busy_timeout_ms: int) -> Engine:
    file = sqlite_file(url)
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, json_serializer=json_provider.store, json_deserializer=json_provider.load)

    # The stdlib driver's legacy transaction control emits no BEGIN before SELECT or DDL, which breaks
    # isolation and SAVEPOINTs. SQLAlchemy's documented fix: let the driver autocommit and emit BEGIN
    # ourselves. Transactions that may write take the write lock up front (IMMEDIATE), so two processes
    # never deadlock upgrading a read lock (SQLite would answer SQLITE_BUSY at once instead of waiting for
    # busy_timeout); read-only ones (READ_ONLY options) begin DEFERRED and, under WAL, never wait.
    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        # Sorts too big for the page cache (a cost report's GROUP BY over most of a million plans) may use
        # helper threads: 1.05 s -> 0.7-0.9 s for 800 000 rows on 2 cores (bench/RESULTS.md). Small sorts
        # never start one.
        cursor.execute(f"PRAGMA threads = {SQLITE_SORT_THREADS}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


# Execution options for a transaction that only reads (see the SQLite `begin` listener above).
READ_ONLY = {"sqlite_begin": "DEFERRED"}


def reading(engine: Engine) -> Engine:
    """`engine` as sessions that only read use it. SQLite: a transaction begun DEFERRED (READ_ONLY), which
    never waits for the write lock. PostgreSQL: no transaction, the driver in autocommit. Under READ
    COMMITTED, PostgreSQL's default and the service's, every statement reads a snapshot of its own whether or
    not a transaction is open, so a reading transaction's BEGIN and the ROLLBACK that ends it were two round
    trips that bought nothing: a third of the round trips of a page or a layout search (issue 24). What needs
    one snapshot across statements, or a server-side cursor, writes or takes a transaction of its own."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine.execution_options(**READ_ONLY)


class Database:
    """What a Flask app needs to talk to its database."""

    def __init__(self, engine: Engine, readiness_engine: Engine | None = None):
        self.engine = engine
        self.sessionmaker: sessionmaker[Session] = sessionmaker(bind=engine, expire_on_commit=False)
        # Sessions that only read (`reading`): on SQLite they never wait for the write lock, on PostgreSQL
        # they open no transaction.
        self.read_sessionmaker: sessionmaker[Session] = sessionmaker(
            bind=reading(engine), expire_on_commit=False
        )
        # /readyz's (create_readiness_engine); SQLite's probe reads like any request.
        self.readiness_sessionmaker: sessionmaker[Session] = (
            sessionmaker(bind=readiness_engine) if readiness_engine is not None else self.read_sessionmaker
        )

    def init_app(self, app: flask.Flask) -> None:
        app.extensions[EXTENSION_KEY] = self
        app.teardown_appcontext(_close_session)


def get_db(app: flask.Flask | None = None) -> Database:
    database: Database = (app or flask.current_app).extensions[EXTENSION_KEY]
    return database


READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


View = TypeVar("View", bound=Callable[..., Any])


def only_reads(view: View) -> View:
    """Mark a view that only reads though it arrives by POST (a layout search, say): its request reads
    through a reading session (`reading`) from the key's lookup on, as a GET's does. Innermost of its
    decorators, so that each wrapper copies the mark."""
    view.only_reads = True  # type: ignore[attr-defined]
    return view


def _request_only_reads() -> bool:
    if flask.request.method in READ_METHODS:
        return True
    return getattr(flask.current_app.view_functions.get(flask.request.endpoint or ""), "only_reads", False)


def get_session() -> Session:
    """The request's session, opened on first use: a reading one (`reading`: on SQLite a transaction that
    never waits for the write lock, on PostgreSQL none) for GET, HEAD and OPTIONS and views marked
    `only_reads`."""
    if "db_session" not in flask.g:
        database = get_db()
        session = (database.read_sessionmaker if _request_only_reads() else database.sessionmaker)()
        principal = flask.g.get("principal")
        actor = principal.key_id if principal else "anonymous"
        flask.g.db_session = act_as(session, actor, flask.g.get("request_id"))
    session_of_request: Session = flask.g.db_session
    return session_of_request


def export_session() -> tuple[Session, Callable[[], None]]:
    """A session for an export that streams its rows (a report's CSV, the FOCUS export), and what to call
    when the stream ends (however it ends). A server-side cursor lives in a transaction: the request's
    session where it has one (SQLite's reading transaction, DEFERRED, never waits for the write lock nor
    holds it), which the stream then owns, since teardown runs as the view returns, before a streamed body
    is read (Flask 3.1's stream_with_context pushes the contexts again around the body); else, on
    PostgreSQL, whose reading sessions have none, one of its own. Either holds a pooled connection for as
    long as the client reads."""
    session = get_session()
    if session.connection().get_execution_options().get("isolation_level") != "AUTOCOMMIT":
        flask.g.pop("db_session")
        return session, lambda: _close(session)
    principal = flask.g.get("principal")
    actor = principal.key_id if principal else "anonymous"
    own = act_as(get_db().sessionmaker(), actor, flask.g.get("request_id"))
    return own, lambda: _close(own)


@contextlib.contextmanager
def reading_session() -> Iterator[Session]:
    """A session for what a request reads before it may write (the key's lookup, a plan's evaluation): the
    request's own, except on SQLite for a request that writes, whose transaction holds the database's write
    lock from its first statement. There it is one of its own, begun DEFERRED and closed as the block ends,
    so that no other writer waits while it reads; what it read is then detached, and goes into the request's
    session with what refers to it (a new plan's organisation, say)."""
    database = get_db()
    if database.engine.dialect.name != "sqlite" or _request_only_reads():
        yield get_session()
        return
    with database.read_sessionmaker() as session:
        yield session


def _close_session(_exc: BaseException | None) -> None:
    _close(flask.g.pop("db_session", None))


def _close(session: Session | None) -> None:
    if session is not None:
        try:
            session.close()
        except SQLAlchemyError as error:
            # The rollback at close failed: the database went away mid-request (a restart). The pool has
            # discarded the connection already, and the response, already decided, must not become a 500.
            log.warning("session not closed cleanly", extra={"error_type": type(error).__name__})

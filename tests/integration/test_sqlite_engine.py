"""The embedded SQLite database is set up for several processes writing at once."""

from __future__ import annotations

import pytest
from sqlalchemy import event, text

from service.infra.config import Config
from service.infra.db import READ_ONLY, SQLITE_SORT_THREADS, create_db_engine, get_db, normalise_url
from service.services import keys


@pytest.fixture
def sqlite_engine(tmp_path):
    engine = create_db_engine(Config(database_url=f"sqlite:///{tmp_path / 'sub' / 'planner.db'}"))
    yield engine
    engine.dispose()


def test_the_database_directory_is_created(sqlite_engine, tmp_path):
    with sqlite_engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    assert (tmp_path / "sub" / "planner.db").exists()


def test_connections_use_wal_a_busy_timeout_foreign_keys_and_sort_threads(sqlite_engine):
    with sqlite_engine.connect() as connection:
        pragma = lambda name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()  # noqa: E731
        assert pragma("journal_mode") == "wal"
        assert pragma("busy_timeout") == 5000
        assert pragma("foreign_keys") == 1
        assert pragma("threads") == SQLITE_SORT_THREADS


def test_a_read_transaction_keeps_its_snapshot_while_another_commits(sqlite_engine):
    # Under the stdlib driver's legacy mode no BEGIN precedes a SELECT, so the second read would see the
    # other connection's row: reads inside one transaction would not be repeatable.
    with sqlite_engine.begin() as setup:
        setup.execute(text("CREATE TABLE t (x INTEGER)"))
    with sqlite_engine.connect().execution_options(**READ_ONLY) as reader:
        reader.begin()
        assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 0
        with sqlite_engine.begin() as writer:
            writer.execute(text("INSERT INTO t VALUES (1)"))
        assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 0
        reader.rollback()
        assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 1


def test_writers_take_the_lock_up_front_and_readers_do_not(sqlite_engine):
    with sqlite_engine.begin() as setup:
        setup.execute(text("CREATE TABLE t (x INTEGER)"))
    with sqlite_engine.connect() as writer:
        writer.begin()  # BEGIN IMMEDIATE: holds the write lock before writing anything
        with sqlite_engine.connect().execution_options(**READ_ONLY) as reader:
            reader.begin()  # BEGIN DEFERRED: a WAL reader is never blocked by a writer
            assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 0
        other = sqlite_engine.raw_connection()
        try:
            other.execute("PRAGMA busy_timeout = 0")
            with pytest.raises(Exception, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()


def test_a_savepoint_rolls_back_only_its_own_work(sqlite_engine):
    # With the stdlib driver's legacy transaction handling this silently loses the outer row too.
    with sqlite_engine.connect() as connection:
        connection.begin()
        connection.execute(text("CREATE TABLE t (x INTEGER)"))
        connection.execute(text("INSERT INTO t VALUES (1)"))
        savepoint = connection.begin_nested()
        connection.execute(text("INSERT INTO t VALUES (2)"))
        savepoint.rollback()
        assert connection.execute(text("SELECT x FROM t")).scalars().all() == [1]
        connection.rollback()
        with pytest.raises(Exception, match="no such table"):
            connection.execute(text("SELECT x FROM t"))


def test_postgres_urls_without_a_driver_get_psycopg_3():
    assert normalise_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalise_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalise_url("sqlite:///x.db").drivername == "sqlite"


def test_a_plan_is_evaluated_before_its_transaction_takes_the_write_lock(make_app, tmp_path):
    """What a new plan reads (its organisation, budget and calibration) and the engine's work happen before
    the transaction that stores it begins IMMEDIATE, a revision's as a new plan's: other writers wait only
    for the storing."""
    app = make_app(f"sqlite:///{tmp_path / 'planner.db'}")
    assert app.test_cli_runner().invoke(args=["setup"]).exit_code == 0
    with get_db(app).sessionmaker() as session:
        key = keys.create_key(session, keys.NewKey(role="admin", name="test")).key
    client, auth = app.test_client(), {"Authorization": f"Bearer {key}"}
    client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}, headers=auth)
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_):
        seen.append(" ".join(statement.split()))

    plan = {"organization": "acme", "pf_days": 100, "hardware": "h100-sxm", "accelerators": 64}
    first = client.post("/v1/plans", json=plan, headers=auth)
    assert first.status_code == 201
    event.listen(get_db(app).engine, "before_cursor_execute", record)
    revise = f"/v1/plans/{first.get_json()['id']}/revise"
    for path, body, headers in (
        ("/v1/plans", plan, auth),
        ("/v1/plans", plan, {**auth, "Idempotency-Key": "plan-1"}),
        (revise, {"accelerators": 128}, auth),
        (revise, {"accelerators": 256}, {**auth, "Idempotency-Key": "revision-1"}),
    ):
        seen.clear()
        assert client.post(path, json=body, headers=headers).status_code == 201
        lock = seen.index("BEGIN IMMEDIATE")  # the storing transaction's
        # Reading transactions for the key's lookup and the plan's evaluation (db.reading_session).
        assert seen[:lock].count("BEGIN DEFERRED") == 2
        assert any("FROM api_keys" in statement for statement in seen[:lock])
        assert any("FROM organizations" in statement for statement in seen[:lock])
        assert not any("FROM organizations" in statement for statement in seen[lock:])
        assert any(statement.startswith("INSERT INTO plans") for statement in seen[lock:])

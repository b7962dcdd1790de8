"""The embedded SQLite database is set up for several processes writing at once."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from service.config import Config
from service.db import create_db_engine, normalise_url


@pytest.fixture
def sqlite_engine(tmp_path):
    engine = create_db_engine(Config(database_url=f"sqlite:///{tmp_path / 'sub' / 'planner.db'}"))
    yield engine
    engine.dispose()


def test_the_database_directory_is_created(sqlite_engine, tmp_path):
    with sqlite_engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    assert (tmp_path / "sub" / "planner.db").exists()


def test_connections_use_wal_a_busy_timeout_and_foreign_keys(sqlite_engine):
    with sqlite_engine.connect() as connection:
        pragma = lambda name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()  # noqa: E731
        assert pragma("journal_mode") == "wal"
        assert pragma("busy_timeout") == 5000
        assert pragma("foreign_keys") == 1


def test_a_transaction_does_not_see_what_another_has_not_committed(sqlite_engine):
    with sqlite_engine.begin() as setup:
        setup.execute(text("CREATE TABLE t (x INTEGER)"))
    with sqlite_engine.connect() as writer:
        writer.begin()
        writer.execute(text("INSERT INTO t VALUES (1)"))
        reader = sqlite_engine.raw_connection()  # a plain read outside any transaction
        try:
            assert reader.cursor().execute("SELECT count(*) FROM t").fetchone() == (0,)
        finally:
            reader.close()
        writer.commit()
    with sqlite_engine.connect() as reader:
        assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 1


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

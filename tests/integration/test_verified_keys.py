"""A process answers from the keys it verified lately while it hears of every change to them
(service/verified_keys.py): the cache itself, keys.authenticate with it, and on PostgreSQL the trigger of
migration 0011 and a process's listener."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import psycopg
import pytest
from sqlalchemy import create_engine, event, select, text, update
from sqlalchemy.orm import Session

from service import migrate, verified_keys
from service.config import Config
from service.db import create_db_engine, get_db, normalise_url
from service.models import ApiKey, utcnow
from service.services import keys
from service.services.keys import VerifiedKeys
from tests.commands import scratch_postgres_database
from tests.conftest import BACKENDS, POSTGRES_URL, bearer, build_app, issue_key_in

ROW = ("digest", "planner", None, None, None, None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def listening(lifetime: float = 60, clock: Callable[[], float] = time.monotonic) -> VerifiedKeys:
    known = VerifiedKeys(lifetime, clock=clock)
    known.listen(True)
    return known


# --- The cache ----------------------------------------------------------------------------------------------


def test_nothing_is_kept_or_answered_while_nobody_listens():
    known = VerifiedKeys(60)
    known.keep("alice", ROW, known.ticket())
    assert known.get("alice") is None
    known.listen(True)
    known.keep("alice", ROW, known.ticket())
    assert known.get("alice") == ROW
    known.listen(False)  # the listener's connection failed: nothing kept is trusted any more
    assert known.get("alice") is None
    known.listen(True)
    assert known.get("alice") is None  # it starts again empty


def test_a_row_is_kept_for_its_lifetime():
    clock = Clock()
    known = listening(lifetime=60, clock=clock)
    known.keep("alice", ROW, known.ticket())
    clock.now += 60
    assert known.get("alice") == ROW
    clock.now += 1
    assert known.get("alice") is None


def test_a_row_read_while_a_key_was_forgotten_is_not_kept():
    """The race a ticket closes: read, a change commits and is notified, then the stale row is kept."""
    known = listening()
    ticket = known.ticket()
    known.forget("bob")  # any key: which one changed is not known to the reader
    known.keep("alice", ROW, ticket)
    assert known.get("alice") is None
    known.keep("alice", ROW, known.ticket())
    assert known.get("alice") == ROW


def test_forgetting_one_key_or_every_key():
    known = listening()
    for key_id in ("alice", "bob"):
        known.keep(key_id, ROW, known.ticket())
    known.forget("alice")
    assert (known.get("alice"), known.get("bob")) == (None, ROW)
    known.forget(None)
    assert known.get("bob") is None


def test_a_full_cache_starts_again_and_an_update_keeps_when_the_row_was_read():
    clock = Clock()
    known = VerifiedKeys(60, capacity=2, clock=clock)
    known.listen(True)
    known.keep("alice", ROW, known.ticket())
    clock.now += 50
    known.update("alice", (*ROW[:-1], "used"))
    clock.now += 11
    assert known.get("alice") is None  # read 61 s ago: the update did not extend its life
    known.keep("alice", ROW, known.ticket())
    known.keep("bob", ROW, known.ticket())
    known.keep("carol", ROW, known.ticket())
    assert (known.get("alice"), known.get("bob"), known.get("carol")) == (None, None, ROW)


# --- keys.authenticate with the cache (both databases, on the test's transaction) ---------------------------


@pytest.fixture
def lookups(session) -> list[str]:
    """The statements run on the test's connection that read api_keys."""
    seen: list[str] = []

    def count(_conn, _cursor, statement, *_args) -> None:
        if "FROM api_keys" in statement:
            seen.append(statement)

    connection = session.connection()
    event.listen(connection, "before_cursor_execute", count)
    yield seen
    event.remove(connection, "before_cursor_execute", count)


def test_a_key_that_admitted_a_request_is_answered_from_the_cache(session, lookups):
    key = issue_key_in(session, "planner", "acme")
    known = listening()
    first = keys.authenticate(session, key, known=known)
    assert first is not None
    assert len(lookups) == 1
    assert keys.authenticate(session, key, known=known) == (first[0], False)
    assert len(lookups) == 1
    # The kept row is checked as a row read is: another secret for the same key id is refused.
    key_id, secret = keys.parse(key)
    assert keys.authenticate(session, f"cpk_{key_id}_{'x' * len(secret)}", known=known) is None
    assert len(lookups) == 1


def test_a_kept_key_that_expires_is_refused(session):
    key = issue_key_in(session, "planner", "acme")
    key_id, _ = keys.parse(key)
    expires_at = utcnow() + timedelta(hours=1)
    session.execute(update(ApiKey).where(ApiKey.key_id == key_id).values(expires_at=expires_at))
    known = listening()
    assert keys.authenticate(session, key, known=known) is not None
    assert keys.authenticate(session, key, now=expires_at, known=known) is None


def test_unknown_and_wrong_keys_are_never_kept(session, lookups):
    key = issue_key_in(session, "planner", "acme")
    key_id, secret = keys.parse(key)
    known = listening()
    for attempt in (f"cpk_{key_id}_{'x' * len(secret)}", f"cpk_nosuchkey_{secret}"):
        for _ in range(2):
            assert keys.authenticate(session, attempt, known=known) is None
    assert len(lookups) == 4
    assert known.get(key_id) is None


def test_a_kept_key_records_its_use_once_per_resolution(session):
    key = issue_key_in(session, "planner", "acme")
    known = listening()
    now = utcnow()
    assert keys.authenticate(session, key, now=now, known=known)[1] is True  # never used: record it
    assert keys.authenticate(session, key, now=now, known=known)[1] is False
    later = now + timedelta(seconds=keys.LAST_USED_RESOLUTION + 1)
    assert keys.authenticate(session, key, now=later, known=known)[1] is True


def test_the_suites_apps_keep_no_keys(app):
    """Tests build the app with testing=True: their keys change in transactions that never commit."""
    with app.app_context():
        assert verified_keys.verified_keys() is None


def test_a_process_keeps_keys_only_on_postgresql(database_url):
    """Outside tests: a listener (started by the first request) on PostgreSQL, none on SQLite or with
    KEY_CACHE_SECONDS=0."""
    for seconds, wanted in ((60, database_url.startswith("postgresql")), (0, False)):
        app = build_app(database_url, testing=False, key_cache_seconds=seconds)
        assert (app.extensions[verified_keys.LISTENER_KEY] is not None) == wanted
        get_db(app).engine.dispose()


# --- On PostgreSQL: the trigger and the listener ------------------------------------------------------------

postgresql_only = pytest.mark.skipif("postgresql" not in BACKENDS, reason="needs TEST_DATABASE_URL")


@pytest.fixture(scope="module")
def scratch_url() -> Iterator[str]:
    """A database of the module's own, migrated: the listener needs changes that commit."""
    prefix = f"{normalise_url(POSTGRES_URL).database}_keys"
    with scratch_postgres_database(POSTGRES_URL, prefix) as url:
        engine = create_db_engine(Config(database_url=url))
        migrate.upgrade(engine)
        engine.dispose()
        yield url


@pytest.fixture
def scratch(scratch_url):
    """An engine on the scratch database whose api_keys are emptied after the test."""
    engine = create_engine(normalise_url(scratch_url))
    yield engine
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM api_keys"))
    engine.dispose()


def notified(url: str, change: Callable[[], None]) -> list[str]:
    """The payloads `change` has PostgreSQL notify on the channel."""
    conninfo = normalise_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as listener:
        listener.execute(f"LISTEN {verified_keys.CHANNEL}")
        change()
        return [notification.payload for notification in listener.notifies(timeout=0.5)]


def issued(engine, role: str = "planner") -> str:
    with Session(engine) as session:
        return issue_key_in(session, role, None if role == "admin" else "acme")


@postgresql_only
def test_the_database_notifies_every_change_of_a_key_but_its_last_use(scratch, scratch_url):
    key_id, _ = keys.parse(issued(scratch))

    def run(sql: str) -> Callable[[], None]:
        def change() -> None:
            with scratch.begin() as connection:
                connection.execute(text(sql), {"key_id": key_id})

        return change

    assert notified(scratch_url, run("UPDATE api_keys SET last_used_at = now() WHERE key_id = :key_id")) == []
    assert notified(scratch_url, run("UPDATE api_keys SET revoked_at = now() WHERE key_id = :key_id")) == [
        key_id
    ]
    assert notified(scratch_url, run("UPDATE api_keys SET name = 'renamed' WHERE key_id = :key_id")) == [
        key_id
    ]
    assert notified(scratch_url, run("DELETE FROM api_keys WHERE key_id = :key_id")) == [key_id]
    assert notified(scratch_url, run("TRUNCATE api_keys CASCADE")) == [""]


@pytest.fixture
def listened(scratch_url):
    """An app on the scratch database with its cache and a running listener (heartbeat 0.1 s)."""
    app = build_app(scratch_url)
    listener = verified_keys.listener_for(app, 60, heartbeat=0.1, reconnect=0.1, pause=0.1)
    listener.start()
    known = app.extensions[verified_keys.EXTENSION_KEY]
    wait_for(lambda: known.listening, "the listener never listened")
    yield app, known, listener
    listener.stop()
    get_db(app).engine.dispose()


def wait_for(condition: Callable[[], object], failure: str, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


@postgresql_only
def test_a_key_revoked_by_another_process_is_refused_as_the_revocation_commits(listened, scratch):
    app, known, _ = listened
    key = issued(scratch)
    key_id, _ = keys.parse(key)
    client = app.test_client()
    assert client.get("/v1/organizations", headers=bearer(key)).status_code == 200
    assert known.get(key_id) is not None
    with scratch.begin() as connection:  # another process: SQL by hand
        connection.execute(update(ApiKey).where(ApiKey.key_id == key_id).values(revoked_at=utcnow()))
    wait_for(lambda: known.get(key_id) is None, "the revocation was never heard of", seconds=2)
    assert client.get("/v1/organizations", headers=bearer(key)).status_code == 401


@postgresql_only
def test_a_key_revoked_through_this_process_is_refused_at_once(listened, scratch):
    app, known, listener = listened
    admin, key = issued(scratch, "admin"), issued(scratch)
    client = app.test_client()
    assert client.get("/v1/organizations", headers=bearer(key)).status_code == 200
    key_uuid = _key_uuid(scratch, keys.parse(key)[0])
    listener.keys = VerifiedKeys(
        60
    )  # the listener no longer reaches the app's cache: only the revocation can
    assert client.delete(f"/v1/keys/{key_uuid}", headers=bearer(admin)).status_code == 204
    assert known.get(keys.parse(key)[0]) is None
    assert client.get("/v1/organizations", headers=bearer(key)).status_code == 401


def _key_uuid(engine, key_id: str):
    with engine.connect() as connection:
        return connection.scalar(select(ApiKey.id).where(ApiKey.key_id == key_id))


@postgresql_only
def test_the_cache_is_off_while_the_listener_is_not_listening(listened, scratch):
    app, known, listener = listened
    key = issued(scratch)
    assert app.test_client().get("/v1/organizations", headers=bearer(key)).status_code == 200
    assert known.get(keys.parse(key)[0]) is not None
    with scratch.begin() as connection:  # the listener's connection ends, as in a restart of the database
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": listener.backend_pid})
    wait_for(lambda: not known.listening, "the listener did not notice its connection ended")
    assert known.get(keys.parse(key)[0]) is None
    wait_for(lambda: known.listening, "the listener did not listen again")
    assert known.get(keys.parse(key)[0]) is None  # it starts again empty

"""On PostgreSQL a plan is one statement, committed by itself, with no BEGIN and COMMIT around it (db.alone):
its row and its audit entry, and with an Idempotency-Key the key's claim and record too
(idempotency.claim_and_write). On a database of the module's own: the suite's other tests run inside a
transaction of the test's, which a plan then joins."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import event, func, insert, select
from sqlalchemy.orm import Session

from service.data.models import AuditEntry, IdempotencyRecord, Plan, utcnow
from service.infra.db import get_db, normalise_url
from service.services import idempotency, keys
from service.services.catalog import load_builtin_hardware
from service.services.idempotency import KEY_LIFETIME, RequestKey
from service.workers import change_listener
from tests.commands import scratch_postgres_database
from tests.conftest import POSTGRES_URL, bearer, build_app, issue_key_in, migrated
from tests.integration.test_change_listener import listening

pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="needs TEST_DATABASE_URL")

BODY = {"organization": "acme", "params": 1e9, "tokens": 2e10, "hardware": "h100-sxm", "accelerators": 8}


@pytest.fixture(scope="module")
def app() -> Iterator:
    prefix = f"{normalise_url(POSTGRES_URL).database}_alone"
    with scratch_postgres_database(POSTGRES_URL, prefix) as url:
        app = build_app(migrated(url))
        # As a process outside the tests keeps them (change_listener.py): a plan whose key and reads are kept
        # reads nothing before its INSERT.
        for extension in (change_listener.KEYS_EXTENSION, change_listener.PLAN_READS_EXTENSION):
            app.extensions[extension] = listening()
        with Session(get_db(app).engine) as session:
            load_builtin_hardware(session)
            session.commit()
        yield app
        get_db(app).engine.dispose()


def inserted_in_autocommit(app, headers: dict) -> bool:
    """Whether the request's INSERT of its plan ran on a connection in autocommit (the request's one statement
    but for the connection's ping)."""
    seen: list[tuple[bool, int]] = []

    def note(connection, _cursor, statement, *_args) -> None:
        if "INSERT INTO plans" in statement:
            seen.append((connection.connection.dbapi_connection.autocommit, statement.count("INSERT INTO")))

    engine = get_db(app).engine
    event.listen(engine, "before_cursor_execute", note)
    try:
        response = app.test_client().post("/v1/plans", json=BODY, headers=headers)
    finally:
        event.remove(engine, "before_cursor_execute", note)
    assert response.status_code == 201, response.get_json()
    ((autocommit, inserts),) = seen
    assert inserts == (3 if "Idempotency-Key" in headers else 2)  # the plan, its entry, the key's record
    return autocommit


def stored(app) -> tuple[int, int, int]:
    """Plans, their audit entries and idempotency keys stored."""
    with Session(get_db(app).engine) as session:
        plans = session.scalar(select(func.count()).select_from(Plan))
        entries = session.scalar(select(func.count()).where(AuditEntry.action == "plan.create"))
        records = session.scalar(select(func.count()).select_from(IdempotencyRecord))
        return plans, entries, records


@pytest.fixture
def key(app) -> str:
    with Session(get_db(app).engine) as session:
        key = issue_key_in(session, "planner", "acme")
    inserted_in_autocommit(app, bearer(key))  # reads and keeps the key, the organisation and the catalog
    return key


def test_a_plan_commits_its_one_statement_by_itself_with_a_key_or_without(app, key):
    before = stored(app)
    assert inserted_in_autocommit(app, bearer(key))
    assert inserted_in_autocommit(app, {**bearer(key), "Idempotency-Key": "alone-1"})
    plans, entries, records = stored(app)
    assert (plans - before[0], entries - before[1], records - before[2]) == (2, 2, 1)


def test_a_retry_replays_the_plan_and_another_body_with_its_key_is_refused_both_writing_nothing(app, key):
    client, headers = app.test_client(), {**bearer(key), "Idempotency-Key": "alone-2"}
    first = client.post("/v1/plans", json=BODY, headers=headers)
    assert first.status_code == 201
    before = stored(app)

    retry = client.post("/v1/plans", json=BODY, headers=headers)
    reused = client.post("/v1/plans", json={**BODY, "accelerators": 16}, headers=headers)

    assert (retry.status_code, retry.headers["Idempotent-Replayed"]) == (201, "true")
    assert (retry.get_data(), retry.headers["ETag"]) == (first.get_data(), first.headers["ETag"])
    assert reused.status_code == 422
    assert stored(app) == before


def test_a_key_held_by_another_transaction_is_in_progress_and_nothing_is_written(app, key):
    before = stored(app)
    with get_db(app).engine.connect() as other:
        other.execute(select(func.pg_advisory_xact_lock(_lock(key, "alone-3"))))
        response = app.test_client().post(
            "/v1/plans", json=BODY, headers={**bearer(key), "Idempotency-Key": "alone-3"}
        )
        other.rollback()
    assert response.status_code == 409
    assert stored(app) == before


def test_a_key_whose_record_commits_while_the_plan_is_written_is_in_progress_and_nothing_is_written(app, key):
    # The claim reads with the snapshot its statement began with; a request with the same key that commits
    # after that (here: a record inserted and committed by another connection while the statement waits on
    # it) is found by the record's ON CONFLICT, and the plan is not written.
    before = stored(app)
    key_id, _secret = keys.parse(key)
    now = utcnow()
    record = {
        "principal": key_id,
        "key": "alone-4",
        "fingerprint": "another request",
        "status_code": 201,
        "body": "{}",
        "headers": {},
        "created_at": now,
        "expires_at": now + KEY_LIFETIME,
    }
    responses = []
    with get_db(app).engine.connect() as other:
        other.execute(insert(IdempotencyRecord.__table__).values(id=uuid.uuid4(), **record))
        request = threading.Thread(
            target=lambda: responses.append(
                app.test_client().post(
                    "/v1/plans", json=BODY, headers={**bearer(key), "Idempotency-Key": "alone-4"}
                )
            )
        )
        request.start()
        time.sleep(0.5)  # the plan's statement waits on the uncommitted record
        assert request.is_alive()
        other.commit()
    request.join(timeout=10)
    (response,) = responses
    assert response.status_code == 409, response.get_json()
    plans, entries, records = stored(app)
    assert (plans, entries, records) == (before[0], before[1], before[2] + 1)  # the other's record alone


def _lock(key: str, idempotency_key: str) -> int:
    """The advisory lock a request takes for its Idempotency-Key (the fingerprint plays no part in it)."""
    key_id, _secret = keys.parse(key)
    return idempotency.lock_of(RequestKey(key_id, idempotency_key, fingerprint=""))

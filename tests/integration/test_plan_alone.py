"""On PostgreSQL a plan created without an Idempotency-Key is one statement (its row and its audit entry),
committed by itself, with no BEGIN and COMMIT around it (db.alone); one with a key is a transaction with the
key's claim and record. On a database of the module's own: the suite's other tests run inside a transaction
of the test's, which a plan then joins. A plan that reads anything first (a key or an organisation not
kept) stays in the transaction its read began."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from service import change_listener
from service.db import get_db, normalise_url
from service.models import AuditEntry, Plan
from service.services.catalog import load_builtin_hardware
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
    """Whether the request's INSERT of its plan ran on a connection in autocommit."""
    seen: list[bool] = []

    def note(connection, _cursor, statement, *_args) -> None:
        if "INSERT INTO plans" in statement:
            seen.append(connection.connection.dbapi_connection.autocommit)

    engine = get_db(app).engine
    event.listen(engine, "before_cursor_execute", note)
    try:
        response = app.test_client().post("/v1/plans", json=BODY, headers=headers)
    finally:
        event.remove(engine, "before_cursor_execute", note)
    assert response.status_code == 201, response.get_json()
    assert len(seen) == 1
    return seen[0]


def stored(app) -> tuple[int, int]:
    with Session(get_db(app).engine) as session:
        plans = session.scalar(select(func.count()).select_from(Plan))
        entries = session.scalar(select(func.count()).where(AuditEntry.action == "plan.create"))
        return plans, entries


def test_a_plan_without_a_key_commits_by_itself_and_one_with_a_key_in_its_transaction(app):
    with Session(get_db(app).engine) as session:
        key = issue_key_in(session, "planner", "acme")
    inserted_in_autocommit(app, bearer(key))  # reads and keeps the key, the organisation and the catalog
    before = stored(app)
    assert inserted_in_autocommit(app, bearer(key))
    assert not inserted_in_autocommit(app, {**bearer(key), "Idempotency-Key": "alone-1"})
    plans, entries = stored(app)
    assert (plans - before[0], entries - before[1]) == (2, 2)  # each plan with its audit entry

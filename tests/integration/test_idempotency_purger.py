"""Expired Idempotency-Keys are deleted in the background (service/workers/idempotency_purger.py), never by
the requests themselves."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
from sqlalchemy import event, select

from service.data.models import IdempotencyRecord
from service.infra.db import get_db
from service.workers import idempotency_purger
from service.workers.idempotency_purger import Purger, purge_expired
from tests.conftest import build_app

NOW = datetime.fromisoformat("2026-03-01T12:00:00+00:00")


def key_record(key: str, *, expires_in: timedelta, principal: str = "cpk_alice") -> IdempotencyRecord:
    """A finished record of `principal`'s `key`, expiring `expires_in` after NOW (negative: expired)."""
    expires_at = NOW + expires_in
    return IdempotencyRecord(
        principal=principal,
        key=key,
        fingerprint="0" * 64,
        status_code=201,
        body="{}",
        headers={},
        created_at=expires_at - timedelta(hours=24),
        expires_at=expires_at,
    )


def kept_keys(session) -> list[str]:
    session.expire_all()
    return sorted(session.scalars(select(IdempotencyRecord.key)))


@pytest.fixture
def database(app):
    return get_db(app)


def test_a_purge_deletes_everyones_expired_keys_in_batches_and_keeps_the_live_ones(
    database, session, monkeypatch
):
    monkeypatch.setattr(idempotency_purger, "BATCH", 3)
    session.add_all(
        key_record(f"old-{n}", expires_in=-timedelta(hours=n + 1), principal=f"p{n % 2}") for n in range(7)
    )
    session.add_all(
        [
            key_record("expires-now", expires_in=timedelta(0)),
            key_record("live", expires_in=timedelta(seconds=1)),
            key_record("new", expires_in=timedelta(hours=24), principal="p1"),
        ]
    )
    session.commit()

    assert purge_expired(database, NOW) == 8

    assert kept_keys(session) == ["live", "new"]


def test_a_purge_with_nothing_expired_only_looks(database, session, connection):
    session.add(key_record("live", expires_in=timedelta(hours=1)))
    session.commit()
    sent: list[str] = []

    def note(_connection, _cursor, statement, *_args) -> None:
        sent.append(statement)

    event.listen(connection, "before_cursor_execute", note)
    try:
        assert purge_expired(database, NOW) == 0
    finally:
        event.remove(connection, "before_cursor_execute", note)

    assert [statement.split()[0] for statement in sent if "idempotency_keys" in statement] == ["SELECT"]
    assert kept_keys(session) == ["live"]


def test_the_purger_purges_as_it_starts_and_then_every_interval(database, session, monkeypatch):
    session.add(key_record("old", expires_in=-timedelta(hours=1)))
    session.commit()
    purges: list[int] = []
    purged_twice = threading.Event()

    def counted(database_, now=None) -> int:
        purges.append(purge_expired(database_, NOW))
        if len(purges) == 2:
            purged_twice.set()
        return purges[-1]

    monkeypatch.setattr(idempotency_purger, "purge_expired", counted)
    purger = Purger(database, interval=0.01)

    purger.start()
    assert purged_twice.wait(10)
    purger.stop()  # before this test's thread uses the connection the purger's sessions were on

    assert purges[:2] == [1, 0]
    assert kept_keys(session) == []


def test_an_app_process_starts_its_purger_with_its_first_request_and_never_in_tests(database_url):
    tested = build_app(database_url)
    served = build_app(database_url, testing=False)
    try:
        assert tested.extensions[idempotency_purger.EXTENSION_KEY] is None
        purger = served.extensions[idempotency_purger.EXTENSION_KEY]
        assert isinstance(purger, Purger)
        assert purger._thread is None

        assert served.test_client().get("/healthz").status_code == 200

        assert purger._thread is not None
        assert purger._thread.is_alive()
        purger.stop()
    finally:
        for app in (tested, served):
            get_db(app).engine.dispose()

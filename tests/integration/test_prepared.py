"""Prepared statements (service/infra/prepared.py): what they return and how they fail is what SQLAlchemy's
own execution of the same statement returns and raises; only the Python around the driver is less."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import bindparam, event, insert, literal, select
from sqlalchemy.exc import IntegrityError

from service.data.models import AuditEntry, Budget, Organization, table_of, utcnow
from service.infra.prepared import Prepared

AUDIT_LOG = table_of(AuditEntry)
BUDGETS = table_of(Budget)
# Every kind of column a hot path reads: UUID, text, money (Decimal), times with their zone, JSON, NULL; and
# a literal the statement holds itself.
READ_BUDGET = Prepared(
    select(
        BUDGETS.c.id,
        BUDGETS.c.name,
        BUDGETS.c.amount,
        BUDGETS.c.currency,
        BUDGETS.c.created_at,
        BUDGETS.c.labels,
        BUDGETS.c.max_flops,
        literal("fixed").label("tag"),
    ).where(BUDGETS.c.id == bindparam("id"))
)
INSERT_ENTRY = Prepared(insert(AUDIT_LOG))


@pytest.fixture
def stored_budget(session):
    organization = Organization(slug="prepared", name="Prepared")
    now = utcnow()
    stored = Budget(
        organization=organization,
        name="Q1",
        amount=Decimal("1234.56"),
        currency="EUR",
        period_start=now,
        period_end=now + timedelta(days=90),
        labels={"team": "pretraining"},
    )
    session.add_all([organization, stored])
    session.commit()
    return stored


def test_a_prepared_read_returns_what_sqlalchemy_returns(session, stored_budget):
    statement = READ_BUDGET.statement
    expected = tuple(session.execute(statement, {"id": stored_budget.id}).one())

    row = READ_BUDGET.first(session, {"id": stored_budget.id})

    assert row == expected
    assert [type(value) for value in row] == [type(value) for value in expected]
    assert row[2] == Decimal("1234.56")
    assert row[4].utcoffset() == timedelta(0)  # aware, as the column's type gives it
    assert row[5] == {"team": "pretraining"}
    assert row[6] is None
    assert row[-1] == "fixed"


def test_a_prepared_read_of_nothing_is_none(session):
    assert READ_BUDGET.first(session, {"id": uuid.uuid4()}) is None


def entry(**overrides) -> dict:
    return {
        "id": uuid.uuid4(),
        "created_at": utcnow(),
        "actor": "tester",
        "organization_id": None,
        "action": "plan.create",
        "object_type": "plan",
        "object_id": "x",
        "request_id": None,
        "fields": ["name", "labels"],
        **overrides,
    }


def test_a_prepared_write_stores_what_sqlalchemy_reads_back(session):
    written = entry(organization_id=uuid.uuid4(), request_id="r-1")

    assert INSERT_ENTRY.execute(session, written) == []

    stored = session.get(AuditEntry, written["id"])
    assert stored is not None
    assert {name: getattr(stored, name) for name in written} == written


def test_listeners_see_a_prepared_statement(session, connection):
    seen: list[str] = []

    def note(_connection, _cursor, statement, *_args) -> None:
        seen.append(statement)

    event.listen(connection, "before_cursor_execute", note)
    try:
        INSERT_ENTRY.execute(session, entry())
    finally:
        event.remove(connection, "before_cursor_execute", note)
    assert seen[-1].startswith("INSERT INTO audit_log")  # after the session's SAVEPOINT, in these tests


def test_a_refused_write_raises_sqlalchemy_error_and_the_transaction_goes_on(session):
    first = entry()
    INSERT_ENTRY.execute(session, first)
    session.commit()

    with pytest.raises(IntegrityError):  # the same primary key: SQLAlchemy's error, not the driver's
        INSERT_ENTRY.execute(session, entry(id=first["id"]))
    session.rollback()

    second = entry()
    INSERT_ENTRY.execute(session, second)
    session.commit()
    assert session.get(AuditEntry, second["id"]) is not None


def test_a_parameter_left_out_is_a_programming_error(session):
    written = entry()
    del written["actor"]
    with pytest.raises(KeyError, match="actor"):
        INSERT_ENTRY.execute(session, written)

"""How a use case's transaction ends (service/services/transactions.py): once per idempotency key, committed
with its response or rolled back whole; a constraint that refuses a commit said as the use case's error."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.data.models import IdempotencyRecord, Organization, utcnow
from service.infra.db import get_db, get_session, reading, reading_session
from service.services.errors import ConflictError, InProgressError, KeyReusedError
from service.services.idempotency import KEY_LIFETIME, RequestKey, StoredResponse
from service.services.transactions import commit_new, commit_or, run_once
from tests.conftest import build_app

KEY = RequestKey(principal="cpk_alice", key="create-1", fingerprint="request-1")


def organizations(session) -> list[str]:
    return sorted(session.scalars(select(Organization.slug)))


def claimed_keys(session) -> int:
    return session.scalar(select(func.count()).select_from(IdempotencyRecord))


def created(slug: str) -> StoredResponse:
    return StoredResponse(201, "{}", {"Location": f"/v1/organizations/{slug}"})


def create(session, slug: str = "acme") -> Callable[[], StoredResponse]:
    """A use case: it writes an organisation and answers where it is (as the API's views answer)."""

    def act() -> StoredResponse:
        session.add(Organization(slug=slug, name=slug.title()))
        session.flush()
        return created(slug)

    return act


def run(session, act: Callable[[], StoredResponse], key: RequestKey | None = KEY) -> StoredResponse:
    """As the API runs a view: what it answers is what is stored, and a replay is the stored answer."""
    return run_once(session, act, key=key, record=lambda response: response, replay=lambda stored: stored)


# --- run_once ---------------------------------------------------------------------------------------------


def test_a_use_case_is_committed_with_its_response_stored_under_its_key(session):
    response = run(session, create(session))

    session.rollback()  # what a later request sees: only what was committed
    assert response == created("acme")
    assert organizations(session) == ["acme"]
    record = session.scalars(select(IdempotencyRecord)).one()
    assert (record.principal, record.key, record.fingerprint) == ("cpk_alice", "create-1", "request-1")
    assert (record.status_code, record.body, record.headers) == (
        201,
        "{}",
        {"Location": "/v1/organizations/acme"},
    )


def test_a_retry_replays_the_stored_response_and_writes_nothing(session):
    run(session, create(session))

    def must_not_run() -> StoredResponse:
        raise AssertionError("a retry ran its use case again")

    assert run(session, must_not_run) == created("acme")
    assert (organizations(session), claimed_keys(session)) == (["acme"], 1)


def test_a_retry_rolls_back_whatever_its_transaction_held(session):
    run(session, create(session))
    session.add(Organization(slug="stray", name="Written before the retry"))

    assert run(session, create(session, "other")) == created("acme")
    assert (organizations(session), claimed_keys(session)) == (["acme"], 1)


def test_a_use_case_that_raises_leaves_no_key_claimed_and_nothing_written(session):
    def refused() -> StoredResponse:
        create(session)()
        raise ConflictError("The budget cannot hold it.")

    with pytest.raises(ConflictError, match="cannot hold it"):
        run(session, refused)

    assert (organizations(session), claimed_keys(session)) == ([], 0)
    # Its retry is evaluated afresh, and may pass.
    assert run(session, create(session)) == created("acme")
    assert (organizations(session), claimed_keys(session)) == (["acme"], 1)


def test_a_commit_the_database_refuses_leaves_no_key_claimed_and_nothing_written(session):
    run(session, create(session), key=None)

    def duplicate() -> StoredResponse:
        session.add(Organization(slug="second", name="Second"))
        session.add(Organization(slug="acme", name="Acme again"))  # refused at the commit's flush
        return created("acme")

    with pytest.raises(IntegrityError):
        run(session, duplicate)

    assert (organizations(session), claimed_keys(session)) == (["acme"], 0)


def test_a_response_that_cannot_be_recorded_leaves_nothing_behind(session):
    def unrecordable(_response: StoredResponse) -> StoredResponse:
        raise RuntimeError("no body")

    with pytest.raises(RuntimeError, match="no body"):
        run_once(session, create(session), key=KEY, record=unrecordable, replay=lambda stored: stored)

    assert (organizations(session), claimed_keys(session)) == ([], 0)


def test_a_key_that_came_with_another_request_is_refused_and_writes_nothing(session):
    run(session, create(session))

    with pytest.raises(KeyReusedError):
        run(session, create(session, "other"), key=RequestKey("cpk_alice", "create-1", "request-2"))

    assert (organizations(session), claimed_keys(session)) == (["acme"], 1)


def test_a_key_whose_record_appeared_while_the_use_case_ran_is_in_progress_and_writes_nothing(session):
    # On PostgreSQL the claim reads with the snapshot its statement began with, a moment before it takes the
    # lock: a request with the same key may commit its record in between. Its retry replays that record.
    def raced() -> StoredResponse:
        now = utcnow()
        session.add(
            IdempotencyRecord(
                principal=KEY.principal,
                key=KEY.key,
                fingerprint=KEY.fingerprint,
                status_code=201,
                body="{}",
                headers={},
                created_at=now,
                expires_at=now + KEY_LIFETIME,
            )
        )
        return create(session)()

    with pytest.raises(InProgressError):
        run(session, raced)

    assert (organizations(session), claimed_keys(session)) == ([], 0)


def test_keys_are_the_callers_own(session):
    run(session, create(session))
    run(session, create(session, "other"), key=RequestKey("cpk_bob", "create-1", "request-1"))

    assert (organizations(session), claimed_keys(session)) == (["acme", "other"], 2)


def test_without_a_key_the_use_case_is_committed_and_nothing_is_remembered(session):
    assert run(session, create(session), key=None) == created("acme")

    session.rollback()
    assert (organizations(session), claimed_keys(session)) == (["acme"], 0)


# --- commit_or --------------------------------------------------------------------------------------------


@pytest.fixture
def acme(session):
    session.add(Organization(slug="acme", name="Acme"))
    session.commit()


def test_a_commit_that_passes_says_so(session):
    session.add(Organization(slug="acme", name="Acme"))

    assert commit_or(session, ConflictError("never raised")) is True
    session.rollback()
    assert organizations(session) == ["acme"]


def test_a_refused_commit_raises_the_error_given_and_is_rolled_back(session, acme):
    session.add(Organization(slug="other", name="Other"))
    session.add(Organization(slug="acme", name="Acme again"))

    with pytest.raises(ConflictError, match="taken meanwhile") as refused:
        commit_or(session, ConflictError("taken meanwhile"))

    assert refused.value.__suppress_context__  # the database's message is not the caller's business
    assert organizations(session) == ["acme"]


# What each constraint of the table means, by a word of its name (both databases name it in their message).
def by_constraint(violation: IntegrityError) -> ConflictError | None:
    if "slug_length" in str(violation.orig):
        return ConflictError("A slug takes 2 to 63 characters.")
    return None


def test_a_function_maps_the_constraint_that_refused_the_commit_to_its_error(session):
    session.add(Organization(slug="a", name="Too short"))

    with pytest.raises(ConflictError, match="2 to 63"):
        commit_or(session, by_constraint)

    assert organizations(session) == []


def test_a_violation_the_function_does_not_know_is_raised_as_it_is(session, acme):
    session.add(Organization(slug="acme", name="Acme again"))

    with pytest.raises(IntegrityError):
        commit_or(session, by_constraint)

    assert organizations(session) == ["acme"]


def test_an_expected_violation_is_rolled_back_and_not_raised(session, acme):
    session.add(Organization(slug="acme", name="Acme, bootstrapped twice"))

    assert commit_or(session, on_conflict=None) is False
    assert [o.name for o in session.scalars(select(Organization))] == ["Acme"]


def test_a_new_object_whose_slug_is_taken_is_a_conflict_that_names_it(session, acme):
    session.add(Organization(slug="acme", name="Acme again"))

    with pytest.raises(ConflictError, match="An organization with slug 'acme' already exists"):
        commit_new(session, Organization, "acme", "An organization")

    assert organizations(session) == ["acme"]


def test_a_new_object_refused_for_another_reason_is_not_called_a_duplicate(session):
    session.add(Organization(slug="a", name="Too short"))

    with pytest.raises(IntegrityError):
        commit_new(session, Organization, "a", "An organization")


# --- sessions that only read ------------------------------------------------------------------------------


def in_transaction(session: Session) -> bool:
    """Whether the driver has a transaction open on the session's connection."""
    driver = session.connection().connection.dbapi_connection
    if session.get_bind().dialect.name == "postgresql":
        return driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    return driver.in_transaction


def test_a_reading_session_opens_no_transaction_on_postgresql_and_writing_ones_still_do(engine):
    # PostgreSQL: under READ COMMITTED each statement reads its own snapshot anyway, so a reading session's
    # BEGIN and ROLLBACK were round trips for nothing. SQLite: a DEFERRED transaction, its snapshot shared.
    for _ in range(2):  # a pooled connection used for reading, then for writing, then for reading again
        with Session(reading(engine)) as reader:
            assert reader.execute(text("SELECT 1")).scalar() == 1
            assert in_transaction(reader) == (engine.dialect.name == "sqlite")
        with Session(engine) as writer:
            assert writer.execute(text("SELECT 1")).scalar() == 1
            assert in_transaction(writer)


@pytest.mark.parametrize(
    ("method", "path", "reads_only"),
    [
        ("GET", "/v1/plans", True),
        ("POST", "/v1/allocations", True),  # a layout search: views marked only_reads
        ("POST", "/v1/estimates", True),
        ("POST", "/v1/plans", False),
        ("POST", "/v1/organizations", False),
    ],
)
def test_a_request_reads_through_a_reading_session_when_its_view_only_reads(
    database_url, method, path, reads_only
):
    app = build_app(database_url)  # its own sessions, not the test's transaction
    database = get_db(app)
    try:
        with app.test_request_context(path, method=method):
            with reading_session() as first:  # the key's lookup, then the view's session: a request's order
                pass
            session = get_session()
            assert (first is session) == (reads_only or database.engine.dialect.name != "sqlite")
            expected = database.read_sessionmaker if reads_only else database.sessionmaker
            assert session.get_bind() is expected.kw["bind"]
    finally:
        database.engine.dispose()

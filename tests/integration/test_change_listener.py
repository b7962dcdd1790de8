"""A process answers from rows it read lately while it hears of every change to them
(service/workers/change_listener.py): the cache itself (services/kept_rows.KeptRows), keys.authenticate and a
new plan's reads with it, and on PostgreSQL the triggers of migrations 0011 and 0013 and a process's
listener."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal

import psycopg
import pytest
from sqlalchemy import create_engine, event, select, text, update
from sqlalchemy.orm import Session

from service.data.models import ApiKey, Budget, Calibration, HardwareProfile, Organization, utcnow
from service.infra.db import get_db, normalise_url
from service.services import keys
from service.services.catalog import load_builtin_hardware
from service.services.kept_rows import KeptRows
from service.services.keys import VerifiedKeys
from service.workers import change_listener
from tests import builders
from tests.api.test_plans import (
    allocation_body,
    create_plan,
    make_budget,
    plan_body,
    pointers,
    post_plan,
    statements_of,
    transition,
)
from tests.api.test_plans import world as world  # noqa: PLC0414 -- the fixture, re-exported
from tests.commands import scratch_postgres_database
from tests.conftest import BACKENDS, POSTGRES_URL, bearer, build_app, issue_key_in, migrated

ROW = ("digest", "planner", None, None, None, None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def listening(lifetime: float = 60, clock: Callable[[], float] = time.monotonic) -> KeptRows:
    """A cache as its listener turns it on: of keys (a VerifiedKeys is a KeptRows by another name) or of plan
    reads."""
    known = KeptRows(lifetime, clock=clock)
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


def test_the_suites_apps_keep_nothing(app):
    """Tests build the app with testing=True: their rows change in transactions that never commit."""
    with app.app_context():
        assert change_listener.verified_keys() is None
        assert change_listener.plan_reads() is None


@pytest.mark.parametrize(
    ("keys_seconds", "reads_seconds"),
    [(60, 60), (60, 0), (0, 60), (0, 0)],
    ids=["both", "keys", "reads", "none"],
)
def test_a_process_keeps_rows_while_it_learns_of_their_changes(database_url, keys_seconds, reads_seconds):
    """Outside tests, the caches whose lifetime is above 0, and what keeps them true: on PostgreSQL a listener
    (started by the first request) for them, on SQLite the change counters; with both at 0, nothing."""
    app = build_app(
        database_url,
        testing=False,
        key_cache_seconds=keys_seconds,
        plan_reads_cache_seconds=reads_seconds,
    )
    on_postgresql = database_url.startswith("postgresql")
    keeps = keys_seconds > 0 or reads_seconds > 0
    listener = app.extensions[change_listener.LISTENER_KEY]
    counters = app.extensions[change_listener.COUNTERS_KEY]
    assert (listener is not None, counters is not None) == (
        keeps and on_postgresql,
        keeps and not on_postgresql,
    )
    with app.test_request_context():
        assert (change_listener.verified_keys() is not None) == (keys_seconds > 0)
        assert (change_listener.plan_reads() is not None) == (reads_seconds > 0)
    if keeps:
        assert set((listener or counters).caches) == {
            channel
            for channel, seconds in (
                (change_listener.KEYS_CHANNEL, keys_seconds),
                (change_listener.PLAN_READS_CHANNEL, reads_seconds),
            )
            if seconds > 0
        }
    get_db(app).engine.dispose()


# --- A new plan's reads with the cache (both databases, on the test's transaction) --------------------------


@pytest.fixture
def kept_reads(app, monkeypatch) -> KeptRows:
    """The shared app given a listening cache of plan reads for the test."""
    reads = listening()
    monkeypatch.setitem(app.extensions, change_listener.PLAN_READS_EXTENSION, reads)
    return reads


def reads_of(connection, body: dict, client) -> tuple[int, dict]:
    """How many of the statements a plan's request sent read its organisation, and the plan."""
    answers = []
    sent = statements_of(connection, lambda: answers.append(post_plan(client, body)))
    assert answers[0].status_code == 201, answers[0].get_json()
    return sum("FROM organizations" in statement for statement in sent), answers[0].get_json()


def test_a_new_plan_reads_what_an_earlier_one_read_from_the_cache(client, connection, world, kept_reads):
    budget = make_budget(client)
    body = plan_body(budget_id=budget["id"])
    first_reads, first = reads_of(connection, body, client)
    again_reads, again = reads_of(connection, body, client)
    assert (first_reads, again_reads) == (1, 0)
    assert (again["organization"], again["budget_id"], again["cost"]) == (
        first["organization"],
        first["budget_id"],
        first["cost"],
    )
    assert reads_of(connection, plan_body(), client)[0] == 1  # no budget: another row
    kept_reads.forget(None)  # a change notified
    assert reads_of(connection, body, client)[0] == 1


def test_a_plan_sized_by_its_budgets_remaining_amount_always_reads_it(client, connection, world, kept_reads):
    budget = make_budget(client, amount="1500.00")
    body = allocation_body(budget="remaining", budget_id=budget["id"])
    assert reads_of(connection, body, client)[1]["cost"] == "1500.00"
    committed = create_plan(client, budget_id=budget["id"])  # 500.00
    assert transition(client, committed["id"], "commit").status_code == 200
    reads, plan = reads_of(connection, body, client)
    assert (reads, plan["cost"]) == (1, "1000.00")


def test_a_budget_not_found_is_not_kept(client, session, connection, world, kept_reads):
    """A 422 for a budget that does not exist yet is not remembered: once it exists, a plan finds it."""
    budget_id = uuid.uuid4()
    assert pointers(post_plan(client, plan_body(budget_id=str(budget_id)))) == ["#/budget_id"]
    assert kept_reads.get(("acme", budget_id, "lab-gpu")) is None
    acme = session.scalar(select(Organization.id).where(Organization.slug == "acme"))
    session.add(builders.budget(acme, id=budget_id))  # the same id, as another process might have made it
    session.commit()
    reads, plan = reads_of(connection, plan_body(budget_id=str(budget_id)), client)
    assert (reads, plan["budget_id"]) == (1, str(budget_id))


def test_a_process_forgets_what_a_plan_read_as_its_own_session_commits_a_change_to_it(session_factory):
    """The process that changes what a plan reads forgets at once, not when the notification comes back: the
    next request may reach it first. A change rolled back, or a budget's amounts moving, forget nothing."""
    reads = listening()
    change_listener.forget_own_writes(session_factory, reads)

    def kept_after(change: Callable[[Session], object], commit: bool = True) -> bool:
        reads.keep("row", ROW, reads.ticket())
        with session_factory() as session:
            change(session)
            session.flush()
            assert reads.get("row") == ROW, "forgotten before the change committed"
            session.commit() if commit else session.rollback()
        return reads.get("row") == ROW

    with session_factory() as session:
        session.add(Organization(slug="acme", name="Acme"))
        session.commit()
        acme = session.scalar(select(Organization).where(Organization.slug == "acme"))
        load_builtin_hardware(session)
        session.commit()

    def budget(session: Session) -> Budget:
        found = session.scalar(select(Budget))
        assert found is not None
        return found

    def profile(session: Session, slug: str = "h100-sxm") -> HardwareProfile:
        found = session.scalar(select(HardwareProfile).where(HardwareProfile.slug == slug))
        assert found is not None
        return found

    assert not kept_after(lambda session: session.add(builders.budget(acme.id)))
    assert kept_after(lambda session: setattr(budget(session), "committed", Decimal(10)))
    assert kept_after(lambda session: setattr(budget(session), "name", "renamed"))
    assert kept_after(lambda session: setattr(budget(session), "currency", "EUR"), commit=False)
    assert not kept_after(lambda session: setattr(budget(session), "currency", "EUR"))
    assert not kept_after(lambda session: setattr(session.get(Organization, acme.id), "name", "Acme Inc"))
    assert kept_after(lambda session: setattr(profile(session), "name", "H100"))
    assert not kept_after(lambda session: setattr(profile(session), "slug", "h100-renamed"))
    assert not kept_after(
        lambda session: session.add(
            Calibration(
                organization_id=acme.id,
                hardware_id=profile(session, "h100-renamed").id,
                matmul_efficiency=0.5,
                runs=[],
                fit={},
                created_by="test",
            )
        )
    )


# --- On PostgreSQL: the trigger and the listener ------------------------------------------------------------

postgresql_only = pytest.mark.skipif("postgresql" not in BACKENDS, reason="needs TEST_DATABASE_URL")


@pytest.fixture(scope="module")
def scratch_url() -> Iterator[str]:
    """A database of the module's own, migrated: the listener needs changes that commit."""
    prefix = f"{normalise_url(POSTGRES_URL).database}_keys"
    with scratch_postgres_database(POSTGRES_URL, prefix) as url:
        yield migrated(url)


@pytest.fixture
def scratch(scratch_url):
    """An engine on the scratch database whose api_keys are emptied after the test."""
    engine = create_engine(normalise_url(scratch_url))
    yield engine
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM api_keys"))
    engine.dispose()


def notified(url: str, change: Callable[[], None], channel: str = change_listener.KEYS_CHANNEL) -> list[str]:
    """The payloads `change` has PostgreSQL notify on `channel`: those before an end of the test's own, which
    PostgreSQL delivers after them, since it delivers notifications in the order their transactions commit."""
    conninfo = normalise_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    end = f"end of {uuid.uuid4()}"
    with psycopg.connect(conninfo, autocommit=True) as listener:
        listener.execute(f"LISTEN {channel}")
        change()
        listener.execute("SELECT pg_notify(%s, %s)", (channel, end))
        payloads = []
        for notification in listener.notifies(timeout=5):
            if notification.payload == end:
                return payloads
            payloads.append(notification.payload)
    raise AssertionError(f"the test's own notification never came, after {payloads}")


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


@postgresql_only
def test_the_database_notifies_every_change_of_what_a_new_plan_reads(scratch, scratch_url):
    """Not a budget's amounts moving (every commit does that), nor a new organisation or budget (a plan never
    keeps what it did not find)."""
    with Session(scratch) as session:
        issue_key_in(session, "planner", "acme")
        load_builtin_hardware(session)
        session.commit()
        acme = session.scalar(select(Organization.id).where(Organization.slug == "acme"))
        hardware = session.scalar(select(HardwareProfile.id).where(HardwareProfile.slug == "h100-sxm"))

    def run(change: Callable[[Session], object]) -> list[str]:
        def committed() -> None:
            with Session(scratch) as session:
                change(session)
                session.commit()

        return notified(scratch_url, committed, change_listener.PLAN_READS_CHANNEL)

    def sql(statement: str) -> Callable[[Session], object]:
        return lambda session: session.execute(text(statement))

    budget = builders.budget(acme)
    calibration = Calibration(
        organization_id=acme, hardware_id=hardware, matmul_efficiency=0.5, runs=[], fit={}, created_by="test"
    )
    assert run(lambda session: session.add(Organization(slug="globex", name="Globex"))) == []
    assert run(lambda session: session.add(budget)) == []
    assert (
        run(sql("UPDATE budgets SET committed = 10, overrun = 1, amount = 200, version = version + 1")) == []
    )
    assert run(sql("UPDATE budgets SET currency = 'EUR'")) == [""]
    assert run(sql("DELETE FROM budgets")) == [""]
    assert run(sql("UPDATE organizations SET name = 'Acme Inc' WHERE slug = 'acme'")) == [""]
    assert run(lambda session: session.add(calibration)) == [""]
    assert run(sql("UPDATE calibrations SET matmul_efficiency = 0.6")) == [""]
    assert run(sql("DELETE FROM calibrations")) == [""]
    assert run(sql("UPDATE hardware_profiles SET slug = 'renamed' WHERE slug = 'h100-sxm'")) == [""]
    assert run(sql("UPDATE hardware_profiles SET slug = 'h100-sxm' WHERE slug = 'renamed'")) == [""]
    assert run(sql("UPDATE hardware_profiles SET name = name || ' ' WHERE slug = 'h100-sxm'")) == []
    assert run(sql("DELETE FROM organizations WHERE slug = 'globex'")) == [""]
    assert run(sql("TRUNCATE calibrations")) == [""]


@pytest.fixture
def listened(scratch_url):
    """An app on the scratch database with its caches and a running listener (heartbeat 0.1 s)."""
    app = build_app(scratch_url)
    listener = change_listener.listener_for(
        app, keys=60, plan_reads=60, heartbeat=0.1, reconnect=0.1, pause=0.1
    )
    listener.start()
    known = app.extensions[change_listener.KEYS_EXTENSION]
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
    # The listener no longer reaches the app's cache: only the revocation can.
    listener.caches[change_listener.KEYS_CHANNEL] = VerifiedKeys(60)
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


@postgresql_only
def test_a_change_another_process_commits_is_read_by_the_next_plan(listened, scratch):
    """An organisation renamed by SQL by hand: the process forgets what its plans read as the change commits,
    and its next plan reads again."""
    app, _, _ = listened
    reads = app.extensions[change_listener.PLAN_READS_EXTENSION]
    key = issued(scratch)
    organization_reads = plan_reads_counter(app, key, {"hardware": "h100-sxm"})
    assert (organization_reads(), organization_reads()) == (1, 0)
    with scratch.begin() as connection:  # another process
        connection.execute(text("UPDATE organizations SET name = 'Acme Inc' WHERE slug = 'acme'"))
    wait_for(
        lambda: reads.get(("acme", None, "h100-sxm")) is None, "the change was never heard of", seconds=2
    )
    assert reads.listening  # forgotten because the change was heard, not because the listener stopped
    assert organization_reads() == 1


def plan_reads_counter(app, key: str, overrides: dict) -> Callable[[], int]:
    """A function that creates a plan of acme's (the catalog loaded) and says how many of its statements read
    the organisation."""
    with Session(get_db(app).engine) as session:
        load_builtin_hardware(session)
        session.commit()
    body = {"organization": "acme", "params": 1e9, "tokens": 2e10, "accelerators": 8, **overrides}
    client = app.test_client()
    statements: list[str] = []
    event.listen(get_db(app).engine, "before_cursor_execute", lambda *args: statements.append(args[2]))

    def organization_reads() -> int:
        before = len(statements)
        response = client.post("/v1/plans", json=body, headers=bearer(key))
        assert response.status_code == 201, response.get_json()
        return sum("FROM organizations" in statement for statement in statements[before:])

    return organization_reads


@postgresql_only
def test_a_change_this_process_commits_is_read_by_its_next_plan_at_once(listened, scratch):
    """A budget's currency changed through this process: forgotten as it commits, before any notification
    (the listener no longer reaches the app's cache here), so the next plan is refused for the currency."""
    app, _, listener = listened
    reads = app.extensions[change_listener.PLAN_READS_EXTENSION]
    listener.caches[change_listener.PLAN_READS_CHANNEL] = KeptRows(60)
    admin, key = issued(scratch, "admin"), issued(scratch)
    client = app.test_client()
    budget = client.post(
        "/v1/budgets",
        json={
            "organization": "acme",
            "name": "own write",
            "amount": "1000000.00",
            "currency": "USD",
            "period_start": "2026-01-01T00:00:00Z",
            "period_end": "2031-01-01T00:00:00Z",
        },
        headers=bearer(admin),
    ).get_json()
    organization_reads = plan_reads_counter(app, key, {"hardware": "h100-sxm", "budget_id": budget["id"]})
    assert (organization_reads(), organization_reads()) == (1, 0)
    changed = client.patch(
        f"/v1/budgets/{budget['id']}",
        json={"currency": "EUR"},
        headers={
            **bearer(admin),
            "If-Match": client.get(f"/v1/budgets/{budget['id']}", headers=bearer(admin)).headers["ETag"],
        },
    )
    assert changed.status_code == 200, changed.get_json()
    assert reads.get(("acme", uuid.UUID(budget["id"]), "h100-sxm")) is None
    refused = client.post(
        "/v1/plans",
        json={
            "organization": "acme",
            "params": 1e9,
            "tokens": 2e10,
            "accelerators": 8,
            "hardware": "h100-sxm",
            "budget_id": budget["id"],
        },
        headers=bearer(key),
    )
    assert pointers(refused) == ["#/budget_id"]

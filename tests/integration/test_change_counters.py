"""On SQLite, a process keeps the keys it verified and what a new plan reads while the change counters say
nothing changed (service/change_listener.ChangeCounters): migration 0014's triggers, and a process's
requests reading the counters before they use what they keep. On a database file of the module's own, so that
changes commit as another process's would."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import create_engine, event, inspect, select, text
from sqlalchemy.orm import Session

from service.data.models import ApiKey, Calibration, HardwareProfile, Organization
from service.infra import migrate
from service.infra.config import Config
from service.infra.db import create_db_engine, get_db
from service.services import keys
from service.services.catalog import load_builtin_hardware
from service.workers import change_listener
from tests import builders
from tests.api.test_plans import pointers
from tests.conftest import bearer, build_app, issue_key_in, migrated
from tests.integration.test_change_listener import issued, plan_reads_counter

COUNTERS_MIGRATION = migrate.MIGRATIONS_DIR / "versions" / "0014_sqlite_change_counters.py"


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> Iterator[str]:
    url = migrated(f"sqlite:///{tmp_path_factory.mktemp('counters') / 'counted.db'}")
    engine = create_db_engine(Config(database_url=url))
    with Session(engine) as session:
        load_builtin_hardware(session)
        session.commit()
    engine.dispose()
    return url


@pytest.fixture
def scratch(database):
    """An engine on the module's database (another process, as it were); keys and organisations emptied
    after the test."""
    engine = create_engine(database)
    yield engine
    with engine.begin() as connection:
        for table in ("plans", "audit_log", "budgets", "calibrations", "api_keys", "organizations"):
            connection.execute(text(f"DELETE FROM {table}"))
    engine.dispose()


def counts(engine) -> dict[str, int]:
    with engine.connect() as connection:
        return dict(connection.execute(text("SELECT channel, changes FROM change_counters")).all())


def moved(engine, change: Callable[[Session], object]) -> set[str]:
    """The channels whose counter `change`, committed, moved."""
    before = counts(engine)
    with Session(engine) as session:
        change(session)
        session.commit()
    after = counts(engine)
    return {channel for channel in after if after[channel] != before[channel]}


def sql(statement: str) -> Callable[[Session], object]:
    return lambda session: session.execute(text(statement))


KEYS, READS = change_listener.KEYS_CHANNEL, change_listener.PLAN_READS_CHANNEL


def test_every_change_of_a_key_but_its_last_use_moves_the_keys_counter(scratch):
    key_id, _ = keys.parse(issued(scratch))
    where = f"WHERE key_id = '{key_id}'"
    assert moved(scratch, sql(f"UPDATE api_keys SET last_used_at = '2026-12-04 00:00:00' {where}")) == set()
    assert moved(scratch, sql(f"UPDATE api_keys SET revoked_at = '2026-12-04 00:00:00' {where}")) == {KEYS}
    assert moved(scratch, sql(f"UPDATE api_keys SET name = 'renamed' {where}")) == {KEYS}
    assert moved(scratch, sql(f"DELETE FROM api_keys {where}")) == {KEYS}
    issued(scratch)
    assert moved(scratch, sql("DELETE FROM api_keys")) == {KEYS}  # SQLite's TRUNCATE


def test_the_keys_trigger_watches_every_column_but_the_last_use():
    """A column added to api_keys must be added to a trigger too, or a change to it would not be heard."""
    spec = importlib.util.spec_from_file_location("counters_migration", COUNTERS_MIGRATION)
    assert spec is not None
    assert spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    assert set(migration.API_KEY_COLUMNS) == {column.name for column in inspect(ApiKey).columns} - {
        "last_used_at"
    }


def test_every_change_of_what_a_new_plan_reads_moves_its_counter(scratch):
    """Not a budget's amounts moving (every commit does that), nor a new organisation or budget (a plan never
    keeps what it did not find), nor a profile's name."""
    with Session(scratch) as session:
        issue_key_in(session, "planner", "acme")
        session.commit()
        acme = session.scalar(select(Organization.id).where(Organization.slug == "acme"))
        hardware = session.scalar(select(HardwareProfile.id).where(HardwareProfile.slug == "h100-sxm"))
    calibration = Calibration(
        organization_id=acme, hardware_id=hardware, matmul_efficiency=0.5, runs=[], fit={}, created_by="test"
    )
    assert moved(scratch, lambda session: session.add(Organization(slug="globex", name="Globex"))) == set()
    assert moved(scratch, lambda session: session.add(builders.budget(acme))) == set()
    amounts = "UPDATE budgets SET committed = 10, overrun = 1, amount = 200, version = version + 1"
    assert moved(scratch, sql(amounts)) == set()
    assert moved(scratch, sql("UPDATE budgets SET currency = 'EUR'")) == {READS}
    assert moved(scratch, sql("DELETE FROM budgets")) == {READS}
    assert moved(scratch, sql("UPDATE organizations SET name = 'Acme Inc' WHERE slug = 'acme'")) == {READS}
    assert moved(scratch, lambda session: session.add(calibration)) == {READS}
    assert moved(scratch, sql("UPDATE calibrations SET matmul_efficiency = 0.6")) == {READS}
    assert moved(scratch, sql("DELETE FROM calibrations")) == {READS}
    assert moved(scratch, sql("UPDATE hardware_profiles SET slug = 'renamed' WHERE slug = 'h100-sxm'")) == {
        READS
    }
    assert moved(scratch, sql("UPDATE hardware_profiles SET slug = 'h100-sxm' WHERE slug = 'renamed'")) == {
        READS
    }
    assert (
        moved(scratch, sql("UPDATE hardware_profiles SET name = name || ' ' WHERE slug = 'h100-sxm'"))
        == set()
    )
    assert moved(scratch, sql("DELETE FROM organizations WHERE slug = 'globex'")) == {READS}


@pytest.fixture
def counted(database) -> Iterator:
    """An app on the module's database with both caches and the change counters, as a SQLite process outside
    the tests has them."""
    app = build_app(database)
    counters = change_listener.counters_for(app, keys=60, plan_reads=60)
    yield app, counters
    get_db(app).engine.dispose()


def key_lookups(app) -> Callable[[], int]:
    """How many statements looked a key up since the last call."""
    statements: list[str] = []
    event.listen(get_db(app).engine, "before_cursor_execute", lambda *args: statements.append(args[2]))

    def since() -> int:
        found = sum("FROM api_keys" in statement for statement in statements)
        statements.clear()
        return found

    return since


def test_a_process_keeps_keys_while_nothing_changes_and_forgets_them_as_another_process_revokes_one(
    counted, scratch
):
    app, _ = counted
    key, client = issued(scratch), app.test_client()
    lookups = key_lookups(app)
    for _ in range(3):
        assert client.get("/v1/organizations", headers=bearer(key)).status_code == 200
    assert lookups() == 1
    with scratch.begin() as connection:  # another process: SQL by hand
        connection.execute(text("UPDATE api_keys SET revoked_at = '2026-12-04 00:00:00'"))
    assert client.get("/v1/organizations", headers=bearer(key)).status_code == 401
    assert lookups() == 1


def test_a_change_another_process_commits_is_read_by_the_next_plan(counted, scratch):
    app, _ = counted
    organization_reads = plan_reads_counter(app, issued(scratch), {"hardware": "h100-sxm"})
    assert (organization_reads(), organization_reads()) == (1, 0)
    with scratch.begin() as connection:
        connection.execute(text("UPDATE organizations SET name = 'Acme Inc' WHERE slug = 'acme'"))
    assert organization_reads() == 1


def test_a_change_this_process_commits_is_read_by_its_next_plan(counted, scratch):
    """A budget's currency changed through the process's own API: the next plan is refused for it."""
    app, _ = counted
    key, admin = issued(scratch), issued(scratch, "admin")
    with Session(scratch) as session:
        acme = session.scalar(select(Organization.id).where(Organization.slug == "acme"))
        budget = builders.budget(acme)
        session.add(budget)
        session.commit()
        budget_id = str(budget.id)
    client = app.test_client()
    body = {"organization": "acme", "params": 1e9, "tokens": 2e10, "accelerators": 8, "hardware": "h100-sxm"}
    body["budget_id"] = budget_id
    assert client.post("/v1/plans", json=body, headers=bearer(key)).status_code == 201
    version = client.get(f"/v1/budgets/{budget_id}", headers=bearer(admin)).headers["ETag"]
    changed = client.patch(
        f"/v1/budgets/{budget_id}", json={"currency": "EUR"}, headers={**bearer(admin), "If-Match": version}
    )
    assert changed.status_code == 200, changed.get_json()
    assert pointers(client.post("/v1/plans", json=body, headers=bearer(key))) == ["#/budget_id"]


def test_the_caches_are_off_while_the_counters_cannot_be_read(counted, scratch, caplog):
    app, _ = counted
    key, client = issued(scratch), app.test_client()
    known = app.extensions[change_listener.KEYS_EXTENSION]
    lookups = key_lookups(app)
    assert client.get("/v1/organizations", headers=bearer(key)).status_code == 200
    assert known.listening
    with scratch.begin() as connection:  # a database behind the code (0014 not applied), say
        connection.execute(text("ALTER TABLE change_counters RENAME TO counters_elsewhere"))
    try:
        with caplog.at_level(logging.WARNING, logger=change_listener.__name__):
            for _ in range(2):
                assert client.get("/v1/organizations", headers=bearer(key)).status_code == 200
        assert not known.listening
        assert lookups() == 3  # the first request's, and each of the two since
        warned = [record.getMessage() for record in caplog.records if record.name == change_listener.__name__]
        assert warned == ["change counters not read"]  # once, as the caches turned off
    finally:
        with scratch.begin() as connection:
            connection.execute(text("ALTER TABLE counters_elsewhere RENAME TO change_counters"))
    assert client.get("/v1/organizations", headers=bearer(key)).status_code == 200
    assert known.listening  # on again, and empty
    assert lookups() == 1


def test_a_process_on_a_sqlite_file_reads_the_counters_and_one_in_memory_keeps_nothing(database):
    app = build_app(database, testing=False)
    assert isinstance(app.extensions[change_listener.COUNTERS_KEY], change_listener.ChangeCounters)
    assert app.extensions[change_listener.LISTENER_KEY] is None
    get_db(app).engine.dispose()
    in_memory = build_app("sqlite://", testing=False)
    assert in_memory.extensions[change_listener.COUNTERS_KEY] is None
    with in_memory.app_context():
        assert change_listener.verified_keys() is None

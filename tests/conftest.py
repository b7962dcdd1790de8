"""Shared fixtures.

Every test that touches the database runs once per database: SQLite always, PostgreSQL too when
`TEST_DATABASE_URL` names one. Each test runs inside a transaction that is rolled back afterwards, so tests
never see each other's rows; the code under test commits to a SAVEPOINT inside it.

Under pytest-xdist (`make test` runs `-n auto`) each worker is a process with a database of its own: SQLite's
file is in the worker's own tmp_path_factory, and PostgreSQL's is `<TEST_DATABASE_URL's database>_<worker>`
(`planner_ci_..._gw0`), made on the same server when the worker starts, migrated by `database_url` and
dropped when the worker ends. Workers then never wait on each other's row locks (the events counter, a slug
taken in an uncommitted transaction) nor race to migrate one database.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import settings
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.orm import sessionmaker

from service import create_app
from service.core import fit
from service.data.models import Organization
from service.infra import migrate
from service.infra.config import Config
from service.infra.db import create_db_engine, get_db, normalise_url
from service.infra.logs import JsonFormatter
from service.services import keys
from service.web import ratelimit
from service.web.ratelimit import FailedAuthentications
from tests.commands import scratch_postgres_database

# In CI, property tests and the fuzzer draw the same examples every run: a red build is then reproducible, and
# never the luck of the draw. Locally they explore anew each run.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

SERVER_URL = os.environ.get("TEST_DATABASE_URL", "")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... in a pytest-xdist worker; None otherwise


def _database_of_this_process(server_url: str, worker: str | None) -> str:
    """TEST_DATABASE_URL, or in an xdist worker the database of the worker's own on its server."""
    if not server_url or worker is None:
        return server_url
    url = normalise_url(server_url)
    return url.set(database=f"{url.database}_{worker}").render_as_string(hide_password=False)


POSTGRES_URL = _database_of_this_process(SERVER_URL, WORKER)
BACKENDS = ["sqlite"] + (["postgresql"] if POSTGRES_URL else [])


def pytest_report_header(config):
    if not POSTGRES_URL:
        return f"database tests run on: {', '.join(BACKENDS)} (TEST_DATABASE_URL: not set)"
    where = normalise_url(POSTGRES_URL).render_as_string(hide_password=True)
    each = (
        ", each xdist worker on <database>_<worker id>"
        if getattr(config.option, "numprocesses", None)
        else ""
    )
    return f"database tests run on: {', '.join(BACKENDS)} (TEST_DATABASE_URL: {where}{each})"


def _recreate_worker_database(*, create: bool) -> None:
    """Drop the worker's PostgreSQL database if it exists (left by a worker that was killed, when `create`),
    and create it afresh when `create`."""
    name = normalise_url(POSTGRES_URL).database
    admin = create_engine(normalise_url(SERVER_URL), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            if create:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()


def pytest_configure(config):
    if WORKER is not None and POSTGRES_URL:
        _recreate_worker_database(create=True)


def pytest_unconfigure(config):
    if WORKER is not None and POSTGRES_URL:
        _recreate_worker_database(create=False)


def _sqlite_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'test.db'}"


def migrated(url: str) -> str:
    """`url`, its database migrated to head."""
    engine = create_db_engine(Config(database_url=url))
    migrate.upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture(scope="session", params=BACKENDS)
def database_url(request, tmp_path_factory) -> str:
    """The URL of a database migrated to head, once per backend for the whole run."""
    return migrated(
        _sqlite_url(tmp_path_factory.mktemp("sqlite")) if request.param == "sqlite" else POSTGRES_URL
    )


@pytest.fixture(scope="session")
def engine(database_url) -> Iterator[Engine]:
    engine = create_db_engine(Config(database_url=database_url))
    yield engine
    engine.dispose()


@pytest.fixture
def connection(engine):
    """A connection inside a transaction that is rolled back when the test ends."""
    with engine.connect() as connection:
        transaction = connection.begin()
        yield connection
        transaction.rollback()


@pytest.fixture(scope="module")
def module_connection(engine):
    """A connection inside a transaction for a whole module, rolled back when the module ends: for a module
    that builds one world for all its tests and runs each of them in a SAVEPOINT on it (see
    tests/api/test_access_matrix.py)."""
    with engine.connect() as connection:
        transaction = connection.begin()
        yield connection
        transaction.rollback()


def sessions_on(connection) -> sessionmaker:
    """Sessions whose commits are SAVEPOINTs inside `connection`'s transaction."""
    return sessionmaker(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)


@pytest.fixture
def session_factory(connection):
    return sessions_on(connection)


@pytest.fixture
def session(session_factory):
    with session_factory() as session:
        yield session


class BufferedClient(FlaskClient):
    """Reads and closes every response at once, as a real server does, so that work the app defers to
    the response's close (recording a key's last use) runs inside the test that caused it."""

    def open(self, *args, **kwargs):
        kwargs.setdefault("buffered", True)
        return super().open(*args, **kwargs)


LOOPBACK = "127.0.0.0/8,::1"


def build_app(database_url: str, **settings) -> Flask:
    """The service for tests, on `database_url`; `on_transaction` puts it on a test's connection."""
    # No background runner or sender: they would share the test's connection from another thread. Tests run
    # fit jobs with service.workers.jobs.run_pending, and send webhooks with
    # service.workers.webhook_sender.deliver_due.
    # Webhook receivers in tests run on this machine: loopback is allowed (the egress policy's own tests
    # build apps without it).
    config = Config(
        database_url=database_url,
        testing=True,
        fit_jobs_in_process=False,
        webhooks_in_process=False,
        webhook_allowed_networks=LOOPBACK,
        # Each test's app its own buckets: shared ones outlive the test's transaction (their own tests make
        # apps on databases of their own, tests/integration/test_shared_limits.py).
        rate_limit_store="process",
    )
    app = create_app(config.with_overrides(settings))
    app.test_client_class = BufferedClient
    return app


def on_transaction(app: Flask, session_factory: sessionmaker) -> Flask:
    database = get_db(app)
    database.sessionmaker = database.read_sessionmaker = session_factory
    return app


@pytest.fixture
def app_with(database_url, session_factory):
    """Builds apps on the test's transaction with settings of the test's choosing: app_with(threads=8).
    For a test that changes its app (settings, routes); the others share `app`."""
    apps = []

    def make(**settings):
        apps.append(on_transaction(build_app(database_url, **settings), session_factory))
        return apps[-1]

    yield make
    for app in apps:
        get_db(app).engine.dispose()


@pytest.fixture(scope="session")
def _default_apps() -> Iterator[dict[str, Flask]]:
    apps: dict[str, Flask] = {}
    yield apps
    for app in apps.values():
        get_db(app).engine.dispose()


@pytest.fixture
def app(database_url, session_factory, _default_apps):
    """The service with its default settings, on the test's transaction. One app per database serves every
    test (building one costs 0.1-0.3 s, mostly flask-smorest writing the OpenAPI document) and is handed each
    test's sessions and an empty table of failed authentications, the only state it keeps between requests.
    A test that changes an app uses app_with."""
    if database_url not in _default_apps:
        _default_apps[database_url] = build_app(database_url)
    app = _default_apps[database_url]
    forget_failed_authentications(app)
    return on_transaction(app, session_factory)


def forget_failed_authentications(app: Flask, clock: Callable[[], float] = time.monotonic) -> None:
    """A new, empty table of failed authentications for `app`, counting time by `clock`."""
    per_minute = app.extensions["planner.config"].auth_failures_per_minute
    if per_minute:
        app.extensions[ratelimit.FAILURES_EXTENSION_KEY] = FailedAuthentications(per_minute, clock=clock)


# 45 of the fit's 4 500 starts (every 100th): on the tests' clean sweeps they reach the full grid's optimum
# to 1e-4, in a twentieth of the time.
SMALL_FIT_GRID = fit.default_grid()[::100]


@pytest.fixture
def small_fit_grid(monkeypatch):
    """Fits start from SMALL_FIT_GRID: for tests of what is done with a fit (storage, jobs, HTTP, bootstrap
    bookkeeping), not of the grid search itself (tests/core/test_fit.py and bench/bench_fit.py, on the
    published data, test the full grid)."""
    monkeypatch.setattr(fit, "default_grid", lambda: SMALL_FIT_GRID)


@pytest.fixture
def service_log():
    """Captures what the service logs, as the JSON lines it writes."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("service")
    logger.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)


def issue_key_in(session, role: str, organization: str | None = None) -> str:
    """A real API key for `role` (in `organization`, made if missing), committed in `session`."""
    if (
        organization is not None
        and session.scalar(select(Organization).where(Organization.slug == organization)) is None
    ):
        session.add(Organization(slug=organization, name=organization.title()))
        session.commit()
    return keys.create_key(
        session, keys.NewKey(role=role, organization_slug=organization, name=f"test {role}")
    ).key


@pytest.fixture
def issue_key(session):
    """Issues a real API key (in the test's transaction): issue_key("finance", "acme") -> the full key."""
    return functools.partial(issue_key_in, session)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def make_app():
    """Builds apps on a database of the test's choosing, and closes their connections afterwards."""
    apps = []

    def make(database_url: str):
        apps.append(create_app(Config(database_url=database_url, testing=True, webhooks_in_process=False)))
        apps[-1].test_client_class = BufferedClient
        return apps[-1]

    yield make
    for app in apps:
        get_db(app).engine.dispose()


@pytest.fixture
def client_of(issue_key):
    """client_of(app): a client of `app` (e.g. one from app_with) calling as an admin."""

    def make(app: Flask) -> FlaskClient:
        client = app.test_client()
        client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {issue_key('admin')}"
        return client

    return make


@pytest.fixture
def client(app, client_of):
    """A client calling as an admin; tests about roles pass their own Authorization header."""
    return client_of(app)


@pytest.fixture(params=BACKENDS)
def empty_database_url(request, tmp_path) -> Iterator[str]:
    """A brand-new database with no tables, dropped afterwards (for migration tests)."""
    if request.param == "sqlite":
        yield _sqlite_url(tmp_path)
        return
    with scratch_postgres_database(POSTGRES_URL, f"{normalise_url(POSTGRES_URL).database}_scratch") as url:
        yield url


# --- The browser tests: counted apart when skipped, and required where a run must include them -------------

BROWSER_TESTS = "tests/e2e/test_console_browser.py::"
NO_BROWSER = "skipped: no browser"


def _is_browser_test(report) -> bool:
    return report.nodeid.startswith(BROWSER_TESTS)


def pytest_report_teststatus(report, config):
    """A browser test skipped for want of a browser is its own category, so the summary line says
    "N skipped: no browser" rather than hiding them among the other skips."""
    if report.when == "setup" and report.skipped and _is_browser_test(report):
        return NO_BROWSER, "b", "SKIPPED (no browser)"
    return None


def pytest_terminal_summary(terminalreporter):
    reasons = {report.longrepr[2] for report in terminalreporter.stats.get(NO_BROWSER, [])}
    for reason in sorted(reasons):
        terminalreporter.write_line(f"{NO_BROWSER}: {reason.removeprefix('Skipped: ')}", yellow=True)


def pytest_sessionfinish(session, exitstatus):
    """With REQUIRE_BROWSER_TESTS set (.ci/run sets it), a run in which the browser tests did not run (none
    passed, or some were skipped for want of a browser) fails."""
    if not os.environ.get("REQUIRE_BROWSER_TESTS") or exitstatus != pytest.ExitCode.OK:
        return
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller has every worker's reports
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    passed = [report for report in reporter.stats.get("passed", []) if _is_browser_test(report)]
    skipped = reporter.stats.get(NO_BROWSER, [])
    if skipped or not passed:
        why = f"{len(skipped)} skipped for want of a browser" if skipped else "none of them passed"
        reporter.ensure_newline()
        reporter.write_line(
            f"REQUIRE_BROWSER_TESTS is set, but the browser tests did not run: {why}", red=True
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

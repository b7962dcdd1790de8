"""The real server for end-to-end tests: `flask setup` then gunicorn with the repository's config, as
`make run` does.

`server` yields (base URL, gunicorn process, server log path). Its size comes from the fixtures
`server_workers` (gunicorn processes, WEB_CONCURRENCY) and `server_threads` (threads per process, THREADS;
None: the service's default), and `server_env` adds settings; a test module overrides them by defining
fixtures of the same name. `module_server` is one server, with the defaults, for a whole module's tests.
A server's database is a copy of one that the real `flask setup` made once per run and database, so that
each server does not pay for the migrations and the catalog again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from sqlalchemy.engine import make_url

from tests.commands import ROOT, SERVE_COMMAND, SETUP_COMMAND, free_port, scratch_postgres_database
from tests.conftest import BACKENDS, POSTGRES_URL

BIN = Path(sys.executable).parent
ADMIN_KEY = "cpk_e2eadmin_" + "e2e-secret-" * 4
AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture
def server_workers() -> int:
    return 2


@pytest.fixture
def server_threads() -> int | None:
    return None


@pytest.fixture
def server_env() -> dict[str, str]:
    return {}


def set_up(database_url: str) -> None:
    """What `make run` does first: migrations, built-in data and the admin key."""
    env = {**os.environ, "DATABASE_URL": database_url, "PLANNER_ADMIN_KEY": ADMIN_KEY}
    subprocess.run(
        [BIN / SETUP_COMMAND[0], *SETUP_COMMAND[1:]], cwd=ROOT, env=env, check=True, capture_output=True
    )


@pytest.fixture(scope="session")
def set_up_templates(tmp_path_factory) -> Iterator[Callable[[str], str]]:
    """template(backend): a database that `flask setup` made, once per run (on first use): SQLite's file,
    or the name of a PostgreSQL database for servers' databases to be created from (CREATE DATABASE ...
    TEMPLATE)."""
    templates: dict[str, str] = {}
    with contextlib.ExitStack() as cleanup:

        def template(backend: str) -> str:
            if backend not in templates:
                if backend == "sqlite":
                    url = f"sqlite:///{tmp_path_factory.mktemp('template') / 'planner.db'}"
                else:
                    url = cleanup.enter_context(scratch_postgres_database(POSTGRES_URL, "planner_template"))
                set_up(url)
                templates[backend] = make_url(url).database
            return templates[backend]

        yield template


@contextlib.contextmanager
def copy_of_template(backend: str, template: str, directory: Path) -> Iterator[str]:
    """A database of a server's own, as `flask setup` leaves it: a copy of the run's template."""
    if backend == "sqlite":
        shutil.copyfile(template, directory / "planner.db")
        yield f"sqlite:///{directory / 'planner.db'}"
        return
    with scratch_postgres_database(POSTGRES_URL, "planner_e2e", template=template) as url:
        yield url


@contextlib.contextmanager
def serving(
    database_url: str, directory: Path, workers: int = 2, threads: int | None = None, settings=None
) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """gunicorn with the repository's config on `database_url`: (base URL, process, log path)."""
    port = free_port()
    env = {
        name: value
        for name, value in {
            **os.environ,
            "DATABASE_URL": database_url,
            "PORT": str(port),
            "WEB_CONCURRENCY": str(workers),
            "PLANNER_ADMIN_KEY": ADMIN_KEY,
            "PROMETHEUS_MULTIPROC_DIR": str(directory / "metrics"),  # gone with the directory
            **({"THREADS": str(threads)} if threads is not None else {}),
            **(settings or {}),
        }.items()
        if value is not None  # settings unset a variable with None
    }
    log_path = directory / "server.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [BIN / SERVE_COMMAND[0], *SERVE_COMMAND[1:]], cwd=ROOT, env=env, stderr=log
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_until_up(base, process, log_path)
            yield base, process, log_path
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()


@pytest.fixture(params=BACKENDS)
def server_database_url(request, tmp_path, set_up_templates) -> Iterator[str]:
    with copy_of_template(request.param, set_up_templates(request.param), tmp_path) as url:
        yield url


@pytest.fixture
def server(server_database_url, tmp_path, server_workers, server_threads, server_env):
    """A server of the test's own, sized and set by the fixtures above."""
    with serving(server_database_url, tmp_path, server_workers, server_threads, server_env) as running:
        yield running


@pytest.fixture(scope="module", params=BACKENDS)
def module_server(request, tmp_path_factory, set_up_templates):
    """One server, with the default settings, for all of a module's tests: for tests that each make their
    own organisation and look only at it, so that they may share a database."""
    directory = tmp_path_factory.mktemp("module-server")
    with (
        copy_of_template(request.param, set_up_templates(request.param), directory) as url,
        serving(url, directory) as running,
    ):
        yield running


def wait_until_up(base: str, process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            requests.get(f"{base}/healthz", timeout=1)
            return
        except (requests.ConnectionError, requests.Timeout):  # not listening yet, or workers still booting
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gunicorn did not start: {log_path.read_text()}")
            time.sleep(0.2)

"""The real server for end-to-end tests: `flask setup` then gunicorn with the repository's config.

`server` yields (base URL, gunicorn process, server log path). Its size comes from the fixtures
`server_workers` (gunicorn processes, WEB_CONCURRENCY) and `server_threads` (threads per process, THREADS;
None: the service's default), and `server_env` adds settings; a test module overrides them by defining
fixtures of the same name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.commands import ROOT, SERVE_COMMAND, SETUP_COMMAND, free_port

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


@pytest.fixture
def server(empty_database_url, tmp_path, server_workers, server_threads, server_env):
    port = free_port()
    env = {
        name: value
        for name, value in {
            **os.environ,
            "DATABASE_URL": empty_database_url,
            "PORT": str(port),
            "WEB_CONCURRENCY": str(server_workers),
            "PLANNER_ADMIN_KEY": ADMIN_KEY,
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),  # gone with the test, however it ends
            **({"THREADS": str(server_threads)} if server_threads is not None else {}),
            **server_env,
        }.items()
        if value is not None  # server_env unsets a variable with None
    }
    subprocess.run(
        [BIN / SETUP_COMMAND[0], *SETUP_COMMAND[1:]], cwd=ROOT, env=env, check=True, capture_output=True
    )
    log_path = tmp_path / "server.log"
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

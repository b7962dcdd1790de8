"""Background fits on a real gunicorn: run by the worker processes' own runners, resumed after a worker is
killed mid-fit, and failing with a reason. Runs on SQLite (a file) and PostgreSQL."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time

import pytest
import requests

from tests.e2e.conftest import AUTH

pytestmark = pytest.mark.e2e

LEASE_SECONDS = 4  # short, so that a killed worker's job is resumed within the test


@pytest.fixture
def server_workers() -> int:
    return 1  # one worker process: the one killed is the one running the job


@pytest.fixture
def server_env() -> dict[str, str]:
    return {"FIT_JOB_LEASE_SECONDS": str(LEASE_SECONDS)}


def runs(*, increasing: bool = False) -> list[dict]:
    """30 runs of a known law with deterministic wiggles (or losses that rise with scale)."""
    found = []
    for i, params in enumerate((5e7, 1e8, 2e8, 5e8, 1e9, 2e9)):
        for j, tokens in enumerate((1e9, 3e9, 1e10, 3e10, 1e11)):
            loss = (1.82 + 480 / params**0.35 + 2100 / tokens**0.37) * (1 + 0.004 * math.sin(7 * i + 3 * j))
            found.append({"params": params, "tokens": tokens, "loss": 10 - loss if increasing else loss})
    return found


def submit(base: str, slug: str, **extra) -> str:
    body = {"organization": "acme", "name": slug, "slug": slug, "runs": runs(), **extra}
    response = requests.post(
        f"{base}/v1/scaling-laws", json=body, headers={**AUTH, "Prefer": "respond-async"}, timeout=30
    )
    assert response.status_code == 202, response.text
    assert response.headers["Preference-Applied"] == "respond-async"
    return response.headers["Location"]


def poll(base: str, location: str, until: set[str], timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = requests.get(f"{base}{location}", headers=AUTH, timeout=10).json()
        if job["status"] in until or time.monotonic() > deadline:
            return job
        time.sleep(0.2)


@pytest.fixture
def base(server):
    base, _, _ = server
    response = requests.post(f"{base}/v1/organizations", json={"slug": "acme", "name": "Acme"}, headers=AUTH)
    assert response.status_code == 201
    return base


def test_a_queued_fit_is_run_by_the_server_and_its_law_plans(base):
    job = poll(base, submit(base, "sweep", bootstrap={"samples": 300, "seed": 1}), {"succeeded", "failed"})
    assert job["status"] == "succeeded", job
    assert job["attempt"] == 1
    law = requests.get(f"{base}{job['law']}", headers=AUTH, timeout=10).json()
    assert law["bootstrap"]["samples"] == 300
    allocation = requests.post(
        f"{base}/v1/allocations", json={"flops": 1e21, "law": "sweep"}, headers=AUTH, timeout=10
    ).json()
    low, high = allocation["intervals"]["params"]
    assert low < allocation["params"] < high


def test_a_fit_whose_worker_is_killed_is_resumed_and_stored_once(base, server):
    _, master, _ = server
    # Large enough to be running for a few seconds when the worker is killed, a fraction of a second after it
    # started (about 2 s per 1 000 resamples of 30 runs on an idle machine).
    location = submit(base, "resumed", bootstrap={"samples": 1500, "seed": 2})
    running = poll(base, location, {"running", "succeeded", "failed"})
    assert running["status"] == "running", running
    workers = subprocess.run(["pgrep", "-P", str(master.pid)], capture_output=True, text=True, check=True)
    for pid in workers.stdout.split():
        os.kill(int(pid), signal.SIGKILL)  # gunicorn starts a new worker; the job's lease runs out
    job = poll(base, location, {"succeeded", "failed"}, timeout=120)
    assert job["status"] == "succeeded", job
    assert job["attempt"] == 2
    listed = requests.get(f"{base}/v1/scaling-laws?kind=fitted", headers=AUTH, timeout=10).json()
    assert [law["slug"] for law in listed["items"]] == ["resumed"]


def test_a_fit_that_cannot_be_done_fails_and_says_why(base):
    body = {"organization": "acme", "name": "Rising", "runs": runs(increasing=True)}
    response = requests.post(
        f"{base}/v1/scaling-laws", json=body, headers={**AUTH, "Prefer": "respond-async"}, timeout=30
    )
    assert response.status_code == 202, response.text
    job = poll(base, response.headers["Location"], {"succeeded", "failed"})
    assert job["status"] == "failed"
    assert job["law"] is None
    assert job["error"]["status"] == 422
    assert "do not decrease" in job["error"]["detail"]
    # The slug it held is free again.
    assert requests.get(f"{base}/v1/scaling-laws/rising", headers=AUTH, timeout=10).status_code == 404

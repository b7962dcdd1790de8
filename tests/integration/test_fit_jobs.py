"""Fits across real transactions: apps on one migrated database stand for separate processes, each with its
own engine (and, when asked, its own background runner), committing for real rather than into the rolled
back connection the HTTP tests share. What the runners must never do: run a job twice, lose one whose
process died, or hold the database while they fit."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, update

from service import create_app
from service.data.models import FitJob, FittedLaw, utcnow
from service.infra.config import Config
from service.infra.db import get_db
from service.services import laws
from service.workers import jobs
from tests.conftest import BufferedClient, bearer, migrated

pytestmark = pytest.mark.usefixtures("small_fit_grid")  # the grid search is tests/core/test_fit.py's

ADMIN_KEY = "cpk_fitjobs1_" + "f" * 40
TRUE = {"E": 1.82, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}


def runs() -> list[dict]:
    """A 5 x 5 grid of sizes and token counts, losses from TRUE with 0.5% noise."""
    params, tokens = (
        grid.ravel() for grid in np.meshgrid(np.geomspace(5e7, 5e9, 5), np.geomspace(1e9, 2e11, 5))
    )
    losses = TRUE["E"] + TRUE["A"] / params ** TRUE["alpha"] + TRUE["B"] / tokens ** TRUE["beta"]
    losses *= np.exp(np.random.default_rng(0).normal(0.0, 0.005, params.size))
    return [
        {"params": float(n), "tokens": float(d), "loss": float(loss)}
        for n, d, loss in zip(params, tokens, losses, strict=True)
    ]


def fit_body(slug: str = "sweep") -> dict:
    return {"organization": "acme", "name": slug, "slug": slug, "runs": runs()}


@pytest.fixture
def migrated_url(empty_database_url) -> str:
    return migrated(empty_database_url)


@pytest.fixture
def start_process(migrated_url):
    """start_process(**config) -> an app on the test's database, as one more process would have it."""
    apps = []

    def start(**settings):
        app = create_app(Config(database_url=migrated_url, testing=True, admin_key=ADMIN_KEY, **settings))
        app.test_client_class = BufferedClient
        apps.append(app)
        if len(apps) == 1:
            created = client_of(app).post("/v1/organizations", json={"slug": "acme", "name": "Acme"})
            assert created.status_code == 201, created.get_json()
        return app

    yield start
    for app in apps:
        runner = app.extensions.get(jobs.EXTENSION_KEY)
        if runner is not None:
            runner.stop()
        get_db(app).engine.dispose()


def client_of(app):
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = bearer(ADMIN_KEY)["Authorization"]
    return client


def submit(app, slug: str = "sweep") -> uuid.UUID:
    response = client_of(app).post(
        "/v1/scaling-laws", json=fit_body(slug), headers={"Prefer": "respond-async"}
    )
    assert response.status_code == 202, response.get_json()
    return uuid.UUID(response.get_json()["id"])


def poll(app, job_id: uuid.UUID, until=("succeeded", "failed"), timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = client_of(app).get(f"/v1/fit-jobs/{job_id}").get_json()
        if job["status"] in until or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def laws_stored(app) -> int:
    with get_db(app).sessionmaker() as session:
        return session.scalar(select(func.count()).select_from(FittedLaw))


def test_a_queued_fit_is_run_by_the_runner_of_the_process_that_queued_it(start_process):
    app = start_process(fit_jobs_in_process=True)
    job = poll(app, submit(app))
    assert job["status"] == "succeeded", job
    assert job["attempt"] == 1
    law = client_of(app).get(job["law"])
    assert law.status_code == 200
    assert law.get_json()["fit"]["runs"] == len(runs())


def test_a_job_whose_process_died_is_resumed_by_another_when_polled_and_the_dead_result_dropped(
    start_process,
):
    dead = start_process(fit_jobs_in_process=False)
    alive = start_process(fit_jobs_in_process=True)
    job_id = submit(dead)
    assert jobs.claim_next(get_db(dead)) == (job_id, 1)  # then its process stops, its lease still running
    assert poll(alive, job_id, until=(), timeout=0)["status"] == "running"
    with get_db(alive).sessionmaker() as session:
        session.execute(
            update(FitJob).where(FitJob.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
        session.commit()

    job = poll(alive, job_id)  # the poll finds the lease run out and wakes this process's runner
    assert job["status"] == "succeeded", job
    assert job["attempt"] == 2

    jobs.run_job(get_db(dead), job_id, 1)  # the first process was only stalled: it finishes late
    assert poll(alive, job_id) == job
    assert laws_stored(alive) == 1


def test_a_job_whose_host_died_is_taken_over_when_its_lease_runs_out_though_nobody_asks(start_process):
    dead = start_process(fit_jobs_in_process=False)
    job_id = submit(dead)
    assert jobs.claim_next(get_db(dead), lease=timedelta(seconds=1)) == (job_id, 1)  # then its host dies
    alive = start_process(fit_jobs_in_process=True)
    runner = alive.extensions[jobs.EXTENSION_KEY]
    runner.interval = 0.2  # POLL_SECONDS, shortened: the runner looks again on its own, unasked
    runner.start()
    deadline = time.monotonic() + 60
    while (row := fit_job(alive, job_id)).status != "succeeded" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (row.status, row.attempt) == ("succeeded", 2)
    assert laws_stored(alive) == 1


def fit_job(app, job_id: uuid.UUID) -> FitJob:
    """The job as stored, read without the API (whose reads of a job would wake the runner)."""
    with get_db(app).sessionmaker() as session:
        return session.get_one(FitJob, job_id)


def test_runners_claiming_at_once_take_each_job_once(start_process):
    processes = [start_process(fit_jobs_in_process=False) for _ in range(3)]
    queued = {submit(processes[0], f"sweep-{i}") for i in range(4)}
    claims: list[tuple[uuid.UUID, int]] = []
    start = threading.Barrier(len(processes))

    def claim_all(app) -> None:
        start.wait()
        while (claimed := jobs.claim_next(get_db(app))) is not None:
            claims.append(claimed)

    threads = [threading.Thread(target=claim_all, args=(app,)) for app in processes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert Counter(job_id for job_id, _ in claims) == Counter(queued)
    assert {attempt for _, attempt in claims} == {1}


@pytest.mark.parametrize("how", ["at once", "at once with an Idempotency-Key", "as a job"])
def test_other_writers_are_not_held_up_while_a_fit_runs(start_process, monkeypatch, how):
    # Fits take seconds; on SQLite a write transaction open meanwhile would lock every other writer out
    # (here they give up after 0.5 s). The fit below waits for the other write before it goes on.
    app = start_process(fit_jobs_in_process=False, sqlite_busy_timeout_ms=500)
    fitting, written = threading.Event(), threading.Event()
    real_fit = laws.fit_columns

    def fit_after_the_other_write(request):
        fitting.set()
        written.wait(timeout=10)
        return real_fit(request)

    monkeypatch.setattr(laws, "fit_columns", fit_after_the_other_write)
    outcome = {}
    if how == "as a job":
        submit(app)
        fit = threading.Thread(target=lambda: outcome.update(jobs=jobs.run_pending(get_db(app))))
    else:
        headers = {"Idempotency-Key": "fit-1"} if "Idempotency" in how else {}

        def post() -> None:
            response = client_of(app).post("/v1/scaling-laws", json=fit_body(), headers=headers)
            outcome["status"] = response.status_code

        fit = threading.Thread(target=post)
    fit.start()
    try:
        assert fitting.wait(timeout=10)
        other = client_of(app).post("/v1/organizations", json={"slug": "globex", "name": "Globex"})
    finally:
        written.set()
        fit.join(timeout=30)
    assert other.status_code == 201, other.get_json()
    assert outcome in ({"status": 201}, {"jobs": 1})
    assert laws_stored(app) == 1

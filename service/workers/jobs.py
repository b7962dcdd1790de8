"""Background fit jobs, kept in the database so that any process can run them and none is lost.

A runner claims a job with a conditional UPDATE (queued, or running with its lease run out because its
runner died), which raises the job's `attempt`. While it fits, a heartbeat extends the lease; when done, it
stores the law and marks the job in one transaction, only if the job still carries its attempt. A job
interrupted MAX_ATTEMPTS times fails with that reason.

Each app process runs a runner thread, started when its worker boots, which looks for claimable jobs every
POLL_SECONDS and at once when a job is submitted (or polled after its lease ran out): so a job whose host
died is taken over by another host's runner within a lease and a poll, whether or not anyone asks after it.
`flask --app service jobs work` runs one in the foreground, for hosts dedicated to fitting.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import flask
from sqlalchemy import ColumnElement, and_, or_, select, update

from service.data.models import FitJob, utcnow
from service.infra import actors, background, http_status, metrics
from service.infra.after_commit import on_commit
from service.infra.background import Periodic, wake_after_response
from service.infra.db import Database, get_db
from service.services import laws
from service.services.errors import InvalidFieldError
from service.web.problems import service_error_entry

log = logging.getLogger(__name__)

LEASE = timedelta(minutes=2)  # default; FIT_JOB_LEASE_SECONDS sets it. A heartbeat renews it 4 times a lease.
MAX_ATTEMPTS = 3
POLL_SECONDS = 15.0  # a look that finds nothing is one indexed SELECT
PAUSE_AFTER_ERROR_SECONDS = 60.0
EXTENSION_KEY = "fit_job_runner"


def _claimable(now: datetime) -> ColumnElement[bool]:
    return or_(
        FitJob.status == "queued",
        and_(FitJob.status == "running", FitJob.lease_expires_at < now),
    )


def claim_next(database: Database, lease: timedelta = LEASE) -> tuple[uuid.UUID, int] | None:
    """Claim the oldest claimable job: its id and the attempt this runner holds, or None."""
    with database.sessionmaker() as session:
        now = utcnow()
        candidates = session.scalars(
            select(FitJob.id).where(_claimable(now)).order_by(FitJob.created_at).limit(10)
        ).all()
        for job_id in candidates:
            claimed = session.execute(
                update(FitJob)
                .where(FitJob.id == job_id, _claimable(now))
                .values(
                    status="running",
                    attempt=FitJob.attempt + 1,
                    started_at=now,
                    lease_expires_at=now + lease,
                    runner=f"{socket.gethostname()}:{os.getpid()}",  # at claim time: after any fork
                )
                .returning(FitJob.attempt)
            ).scalar()
            if claimed is not None:
                on_commit(session, metrics.FIT_JOBS.labels(event="started").inc)
                session.commit()
                return job_id, claimed
        session.rollback()
    return None


def run_job(database: Database, job_id: uuid.UUID, attempt: int, lease: timedelta = LEASE) -> None:
    """Fit a claimed job and record the outcome, unless another runner has claimed it since."""
    with database.sessionmaker() as session:
        job = session.get_one(FitJob, job_id)
        request, actor = laws.fit_request(job.request), job.created_by
    if attempt > MAX_ATTEMPTS:
        _finish(database, job_id, attempt, error=_interrupted())
        return
    try:
        with _heartbeat(database, job_id, attempt, lease):
            columns = laws.fit_columns(request)
    except InvalidFieldError as error:
        _finish(database, job_id, attempt, error=_refusal(error))
        return
    except Exception:
        log.exception("fit job %s failed", job_id)
        _finish(database, job_id, attempt, error=_problem(500, "The fit failed unexpectedly."))
        return
    _finish(database, job_id, attempt, columns=columns, actor=actor)


def _finish(
    database: Database,
    job_id: uuid.UUID,
    attempt: int,
    *,
    error: dict[str, object] | None = None,
    columns: dict[str, Any] | None = None,
    actor: str = "system",
) -> None:
    with database.sessionmaker() as session:
        actors.act_as(session, actor)
        law = None
        if columns is not None:
            job = session.get_one(FitJob, job_id)
            request = laws.fit_request(job.request)
            law = laws.store_law(session, job.organization_id, job.slug, request, columns, actor=actor)
            if law is None:
                error = _problem(409, f"A scaling law with slug {job.slug!r} was stored while this job ran.")
            else:
                session.flush()
        finished = session.execute(
            update(FitJob)
            .where(FitJob.id == job_id, FitJob.attempt == attempt, FitJob.status == "running")
            .values(
                status="failed" if error else "succeeded",
                error=error,
                law_id=None if law is None else law.id,
                finished_at=utcnow(),
                lease_expires_at=None,
            )
            .returning(FitJob.id)
        ).first()
        if finished is not None:
            on_commit(session, metrics.FIT_JOBS.labels(event="failed" if error else "succeeded").inc)
            session.commit()
        else:  # another runner holds a later attempt: its outcome, not ours
            session.rollback()


@contextmanager
def _heartbeat(database: Database, job_id: uuid.UUID, attempt: int, lease: timedelta) -> Iterator[None]:
    """Renew the job's lease four times a lease while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(lease.total_seconds() / 4):
            with database.sessionmaker() as session:
                session.execute(
                    update(FitJob)
                    .where(FitJob.id == job_id, FitJob.attempt == attempt, FitJob.status == "running")
                    .values(lease_expires_at=utcnow() + lease)
                )
                session.commit()

    thread = threading.Thread(target=beat, name=f"fit-job-heartbeat-{job_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _problem(
    status: int, detail: str, *, title: str | None = None, **extensions: object
) -> dict[str, object]:
    """A failed job's `error`: problem details (RFC 9457) as a stored document."""
    return {"title": title or http_status.title(status), "status": status, "detail": detail, **extensions}


def _refusal(error: InvalidFieldError) -> dict[str, object]:
    return _problem(422, error.detail, errors=[service_error_entry(error)])


def _interrupted() -> dict[str, object]:
    detail = f"The fit was interrupted {MAX_ATTEMPTS} times (its process stopped); submit it again."
    return _problem(500, detail, title="Interrupted")


def run_pending(database: Database, lease: timedelta = LEASE) -> int:
    """Run claimable jobs until there are none; how many were run."""
    count = 0
    while (claimed := claim_next(database, lease)) is not None:
        run_job(database, *claimed, lease)
        count += 1
    return count


class Runner(Periodic):
    """A process's runner thread: runs every claimable job, every `interval` seconds and when woken."""

    name = "fit-job runner"

    def __init__(self, database: Database, lease: timedelta = LEASE, interval: float = POLL_SECONDS):
        super().__init__(interval, min(interval, PAUSE_AFTER_ERROR_SECONDS))
        self.database = database
        self.lease = lease

    def work(self) -> None:
        run_pending(self.database, self.lease)


def init_app(app: flask.Flask) -> None:
    config = app.extensions["planner.config"]
    lease = timedelta(seconds=config.fit_job_lease_seconds)
    # It looks at least once a lease, so that a short lease (FIT_JOB_LEASE_SECONDS) is taken over soon too.
    interval = min(POLL_SECONDS, lease.total_seconds())
    runner = Runner(get_db(app), lease, interval) if config.fit_jobs_in_process else None
    # Started when a worker boots (background.start_all) or a job is submitted, not by any request: an app
    # that never runs fits (a test's, say) keeps no thread polling its database.
    background.register(app, EXTENSION_KEY, runner)


def wake_runner() -> None:
    """Have this process's runner look for jobs once the request's transaction has committed."""
    wake_after_response(EXTENSION_KEY)

"""A database that stops answering but keeps its connections open (a frozen host; here SIGSTOP on the suite's
own cluster) holds no request: /readyz and API calls answer 503 within the bounds the README gives, and the
service recovers by itself once the database answers again.

gunicorn's worker timeout (60 s) plays no part: every bound here is a few seconds, and the test checks that
no worker was replaced.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from sqlalchemy import create_engine, text

from tests.reliability.conftest import AUTH, ORGANIZATION, START_AT, prepare_world, serving

pytestmark = pytest.mark.reliability

CONNECT_TIMEOUT_SECONDS = 2
STATEMENT_TIMEOUT_MS = 3000
# The README's bounds ("When the database is in trouble") for these settings: a request that finds the
# database frozen waits for the ping of a pooled connection, then for a new connection; one whose statement
# the database stops answering waits the statement timeout and 2 s more; /readyz 4 s at most (2 to connect,
# 2 for the answer), so that with the slack below it answers within the 5 s issue 18 asks for.
ARRIVING_BOUND = 2 * CONNECT_TIMEOUT_SECONDS
IN_FLIGHT_BOUND = STATEMENT_TIMEOUT_MS / 1000 + 2
READYZ_BOUND = 4
# Beyond the waits the README bounds: the HTTP round trip and the scheduling of a busy 2-core machine.
SLACK = 1.0
# The clients give up long after any bound, so that a hung request is seen as one, not as a client error.
PATIENCE = 20


@pytest.fixture
def server(cluster, tmp_path):
    settings = {
        # One worker, so that the requests sent while the database is frozen find connections in its pool
        # (which its pre-ping then has to give up on), rather than, by the luck of accept(), none.
        "WEB_CONCURRENCY": "1",
        "DB_CONNECT_TIMEOUT_SECONDS": str(CONNECT_TIMEOUT_SECONDS),
        "DB_STATEMENT_TIMEOUT_MS": str(STATEMENT_TIMEOUT_MS),
    }
    with serving(cluster, tmp_path, env=settings) as server:
        yield server


def plan_request(budget_id: str) -> dict:
    return {
        "organization": ORGANIZATION,
        "params": 1e9,
        "tokens": 2e10,
        "hardware": "h100-sxm",
        "accelerators": 8,
        "start_at": START_AT,
        "budget_id": budget_id,
    }


def timed(method: str, url: str, **kwargs) -> tuple[float, requests.Response | None]:
    """Seconds until the answer, and the answer (None: none came within PATIENCE)."""
    started = time.monotonic()
    try:
        response = requests.request(method, url, timeout=PATIENCE, **kwargs)
    except requests.Timeout:
        response = None
    return time.monotonic() - started, response


def unavailable_within(answer: tuple[float, requests.Response | None], bound: float) -> str | None:
    """What is wrong with `answer` if it is not a 503 problem within `bound` seconds (None: nothing)."""
    took, response = answer
    if response is None:
        return f"no answer in {PATIENCE} s"
    if response.status_code != 503 or response.headers.get("Content-Type") != "application/problem+json":
        return f"{response.status_code} {response.headers.get('Content-Type')} after {took:.1f} s"
    if response.json()["status"] != 503 or "Retry-After" not in response.headers:
        return f"a malformed 503: {response.headers} {response.text}"
    if took > bound + SLACK:
        return f"503 after {took:.1f} s, beyond its bound of {bound} s"
    return None


def test_a_frozen_database_gets_503_within_the_bounds_and_the_service_recovers_by_itself(server, cluster):
    budget_id = prepare_world(server)[0]
    plan = server.call("POST", "/v1/plans", 201, json=plan_request(budget_id))
    plan_url = f"{server.base}/v1/plans/{plan['id']}"
    for _ in range(4):  # the pool keeps connections to ping
        assert requests.get(plan_url, headers=AUTH, timeout=10).status_code == 200
    workers = server.workers()
    write_key = str(uuid.uuid4())

    def write() -> tuple[float, requests.Response | None]:
        headers = {**AUTH, "Idempotency-Key": write_key}
        return timed("POST", f"{server.base}/v1/plans", json=plan_request(budget_id), headers=headers)

    locker = create_engine(cluster.url)
    try:
        with locker.connect() as holder, ThreadPoolExecutor(max_workers=4) as pool:
            # A request caught mid-statement: it waits for a lock this test holds when the database freezes.
            holder.execute(text("LOCK TABLE plans IN ACCESS EXCLUSIVE MODE"))
            in_flight = pool.submit(timed, "GET", plan_url, headers=AUTH)
            deadline = time.monotonic() + 10
            while not holder.scalar(text("SELECT count(*) FROM pg_locks WHERE NOT granted")):
                assert time.monotonic() < deadline, "the request never waited for the lock"
                time.sleep(0.02)
            with cluster.frozen():
                readyz = pool.submit(timed, "GET", f"{server.base}/readyz")
                read = pool.submit(timed, "GET", plan_url, headers=AUTH)
                written = pool.submit(write)
                answers = {
                    "/readyz": (readyz.result(), READYZ_BOUND),
                    "a read arriving": (read.result(), ARRIVING_BOUND),
                    "a write arriving": (written.result(), ARRIVING_BOUND),
                    "a read in flight": (in_flight.result(), IN_FLIGHT_BOUND),
                }
            holder.rollback()
    finally:
        locker.dispose()
    wrong = {
        what: problem
        for what, (answer, bound) in answers.items()
        if (problem := unavailable_within(answer, bound))
    }
    assert not wrong

    deadline = time.monotonic() + 10
    while requests.get(f"{server.base}/readyz", timeout=PATIENCE).status_code != 200:
        assert time.monotonic() < deadline, "/readyz still 503 ten seconds after the database came back"
        time.sleep(0.2)
    assert requests.get(plan_url, headers=AUTH, timeout=PATIENCE).status_code == 200
    _, retried = write()
    assert retried.status_code == 201, retried.text  # the refused write left nothing behind: done afresh
    assert "Idempotent-Replayed" not in retried.headers
    assert server.process.poll() is None
    assert server.workers() == workers  # no worker was replaced (gunicorn's timeout did not step in)

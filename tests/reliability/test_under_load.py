"""Under load, through a crash of every server process and a restart of the database: no 5xx but 503, and
nothing the server acknowledged is lost or left half-written.

Each test runs 32 clients on 127.0.0.1 against gunicorn (2 workers x 8 threads) on the suite's own
PostgreSQL cluster; RELIABILITY_SECONDS (default 10: a thousand requests and more; longer for a soak) sets
how long the plain load runs.
"""

from __future__ import annotations

import os

import pytest
import requests

from tests.reliability.conftest import (
    Server,
    check_nothing_lost_or_half_written,
    prepare_world,
    run_load,
)

pytestmark = pytest.mark.reliability

SECONDS = float(os.environ.get("RELIABILITY_SECONDS", "10"))


def test_a_mixed_load_gets_no_server_error_and_keeps_every_acknowledged_plan(server, cluster):
    budgets = prepare_world(server)
    ledger = run_load(server, budgets, seconds=SECONDS)
    assert ledger.server_errors() == {}
    assert not ledger.failures, ledger.failures
    assert len(ledger.created) > 100, ledger.statuses  # the load did real work
    assert ledger.committed
    assert ledger.statuses[409] > 0, ledger.statuses  # the small budget refused commits, as it must
    check_nothing_lost_or_half_written(cluster.url, ledger)


def test_after_every_server_process_is_killed_mid_load_nothing_acknowledged_is_lost(server, cluster):
    budgets = prepare_world(server)
    crashed = []

    def crash_once(elapsed: float) -> None:
        if elapsed > 5 and not crashed:
            server.crash()
            crashed.append(elapsed)

    ledger = run_load(server, budgets, seconds=8, during=crash_once)
    assert crashed
    assert ledger.failures  # requests in flight lost their connection: no acknowledgement
    assert ledger.server_errors() == {}
    server.start()  # as a supervisor would
    check_nothing_lost_or_half_written(cluster.url, ledger)
    after = run_load(server, budgets, seconds=3)  # and it serves on
    assert after.server_errors() == {}
    assert after.created


def test_while_the_database_restarts_requests_get_503_and_the_service_recovers_by_itself(
    server: Server, cluster
):
    budgets = prepare_world(server)
    outage: dict[str, float] = {}

    def restart_database(elapsed: float) -> None:
        if elapsed > 4 and "down" not in outage:
            cluster.stop("fast")  # every session ends: transactions in flight roll back
            outage["down"] = elapsed
        elif "down" in outage and "up" not in outage and elapsed > outage["down"] + 3:
            cluster.start()
            outage["up"] = elapsed

    ledger = run_load(server, budgets, seconds=16, during=restart_database)
    assert ledger.server_errors(allowed=frozenset({503})) == {}, ledger.statuses
    assert ledger.statuses[503] > 0  # the outage was seen, and answered as such
    assert not ledger.failures, ledger.failures  # the server itself never went away
    recovered = [at for at, status in ledger.timeline if at > outage["up"] and status in (200, 201)]
    assert recovered, "no request succeeded after the database came back"
    last_503 = max(at for at, status in ledger.timeline if status == 503)
    assert last_503 < outage["up"] + 5, "still 503 five seconds after the database came back"
    assert requests.get(f"{server.base}/readyz", timeout=5).status_code == 200
    assert server.process.poll() is None  # the same processes: no restart was needed
    check_nothing_lost_or_half_written(cluster.url, ledger)

"""Plans under concurrent load, on a real gunicorn server with several worker processes.

Commits against one budget never overspend it however many arrive at once, the budget's committed amount
and its ledger always agree with the plans committed, and retries of one request with one Idempotency-Key
create one plan. Runs on SQLite (the embedded default, a file) and PostgreSQL.

What each database promises under write contention (README, "When the database is in trouble"): on
PostgreSQL concurrent writes wait for their row locks and are never refused for contention; on SQLite, one
writer at a time, a write that waits longer than SQLITE_BUSY_TIMEOUT_MS for the lock is answered 503 with
Retry-After and has changed nothing, so that its retry with the same Idempotency-Key (what the client and
orchestrators do) does it exactly once. The writes below are sent that way and the tests assert that
promise: 503s only on SQLite, each a problem with Retry-After, and after the retries exactly what one
attempt each would have done.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.conftest import AUTH

pytestmark = pytest.mark.e2e

CLIENT_THREADS = 64
TIMEOUT = 60  # seconds, per request: generous, so that a slow request shows up as a status, not a timeout
RETRIES = 20  # times a write refused with 503 is sent again: far more than the lock ever needs
# From 2025, so that the runs may report usage of the past (January 2026) against it.
PERIOD = {"period_start": "2025-01-01T00:00:00Z", "period_end": "2031-01-01T00:00:00Z"}
START_AT = "2030-02-01T00:00:00Z"
PRICE_PER_HOUR = "2.50"  # USD per accelerator-hour


@pytest.fixture
def server_workers() -> int:
    return 4  # several processes: the budget's row is all they share


# --- Talking to the server --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: Any

    @classmethod
    def of(cls, response: requests.Response) -> Reply:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        return cls(response.status_code, dict(response.headers), body)


@dataclass
class Contention:
    """The 503s that writes met on their way (answered by retrying them), for the assertions on them."""

    refusals: list[Reply]

    def send(self, post: Callable[[dict[str, str]], requests.Response]) -> Reply:
        """POST with a fresh Idempotency-Key, again with the same key while the answer is 503."""
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        for _ in range(RETRIES):
            reply = Reply.of(post(headers))
            if reply.status != 503:
                return reply
            self.refusals.append(reply)
            time.sleep(int(reply.headers.get("Retry-After") or 1))
        return reply

    def assert_as_promised(self, backend: str) -> None:
        if backend == "postgresql":
            assert self.refusals == [], "PostgreSQL refused writes for contention"
        assert all(reply.headers["Content-Type"] == "application/problem+json" for reply in self.refusals)
        assert all(reply.headers.get("Retry-After") for reply in self.refusals)


@pytest.fixture
def contention(server_database_url) -> Iterator[Contention]:
    met = Contention([])
    yield met
    met.assert_as_promised("postgresql" if server_database_url.startswith("postgresql") else "sqlite")


def check(response: requests.Response, status: int) -> Any:
    assert response.status_code == status, (response.status_code, response.text)
    return response.json()


def run_together(base: str, calls: Sequence[Callable[[requests.Session, str], Reply]]) -> list[Reply]:
    """Make `calls` from CLIENT_THREADS threads (one HTTP session each) that start at the same instant;
    the replies in the order of `calls`."""
    threads = min(CLIENT_THREADS, len(calls))
    barrier = threading.Barrier(threads)
    replies: list[Reply | None] = [None] * len(calls)

    def worker(first: int) -> None:
        with requests.Session() as http:
            http.headers.update(AUTH)
            barrier.wait(timeout=30)
            for index in range(first, len(calls), threads):
                replies[index] = calls[index](http, base)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for done in [pool.submit(worker, first) for first in range(threads)]:
            done.result()  # re-raises a client-side failure (a timeout, a refused connection)
    answered = [reply for reply in replies if reply is not None]
    assert len(answered) == len(calls)
    return answered


def pages(http: requests.Session, url: str, **params: Any) -> Iterator[dict]:
    """Every item of a list, following `next_cursor` 100 at a time."""
    cursor = None
    while True:
        query = {**params, "limit": 100, **({"cursor": cursor} if cursor else {})}
        page = check(http.get(url, params=query, timeout=TIMEOUT), 200)
        yield from page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            return


def server_errors(log_path: Path) -> list[str]:
    """Lines of the server's log about 5xx responses or errors: shown when an assertion fails."""
    found = []
    for line in log_path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            found.append(line)
            continue
        if entry.get("level") in ("ERROR", "CRITICAL") or (entry.get("status") or 0) >= 500:
            found.append(line)
    return found[:20]


# --- Arranging: an organisation, a priced profile, a budget, plans -----------------------------------------


@dataclass(frozen=True)
class Setup:
    organization: str
    hardware: str
    plan_cost: Decimal


def organization_with_priced_hardware(http: requests.Session, base: str) -> Setup:
    """An organisation and a custom profile with a price, and what one plan (plan_body) costs on it."""
    organization = f"org-{uuid.uuid4().hex[:8]}"
    check(http.post(f"{base}/v1/organizations", json={"slug": organization, "name": "Org"}, timeout=10), 201)
    hardware = f"hw-{uuid.uuid4().hex[:8]}"
    profile = {
        "slug": hardware,
        "name": "Priced accelerator",
        "vendor": "Acme Cloud",
        "peak_flops": {"bf16": 989.4e12, "fp8": 1978.9e12},
        "memory_bytes": 80 * 10**9,
        "memory_bandwidth_bytes_per_second": 3_350 * 10**9,
        "source": "e2e test",
        "price_per_hour": PRICE_PER_HOUR,
        "currency": "USD",
        "price_as_of": "2026-05",
        "price_source": "e2e test",
    }
    check(http.post(f"{base}/v1/hardware", json=profile, timeout=10), 201)
    # A draft without a budget tells what a plan costs: hours from a float computation, rounded to cents.
    probe = check(http.post(f"{base}/v1/plans", json=plan_body(organization, hardware), timeout=10), 201)
    cost = Decimal(probe["cost"])
    assert cost > 0
    assert probe["currency"] == "USD"
    return Setup(organization, hardware, cost)


def plan_body(organization: str, hardware: str, **overrides: Any) -> dict:
    return {
        "organization": organization,
        "hardware": hardware,
        "accelerators": 8,
        "params": 1e9,
        "tokens": 2e10,
        "start_at": START_AT,
        **overrides,
    }


def create_budget(http: requests.Session, base: str, organization: str, amount: Decimal) -> dict:
    body = {"organization": organization, "name": "Pretraining", "amount": str(amount), "currency": "USD"}
    return check(http.post(f"{base}/v1/budgets", json={**body, **PERIOD}, timeout=10), 201)


def create_plans(base: str, setup: Setup, budget_id: str, count: int, contention: Contention) -> list[str]:
    """`count` identical drafts charged to the budget (made concurrently: creating is under load too)."""
    body = plan_body(setup.organization, setup.hardware, budget_id=budget_id)

    def create(http: requests.Session, base: str) -> Reply:
        return contention.send(
            lambda headers: http.post(f"{base}/v1/plans", json=body, headers=headers, timeout=TIMEOUT)
        )

    replies = run_together(base, [create] * count)
    assert Counter(reply.status for reply in replies) == {201: count}, Counter(r.status for r in replies)
    assert {Decimal(reply.body["cost"]) for reply in replies} == {setup.plan_cost}
    return [reply.body["id"] for reply in replies]


def commit(plan_id: str, contention: Contention) -> Callable[[requests.Session, str], Reply]:
    def call(http: requests.Session, base: str) -> Reply:
        return contention.send(
            lambda headers: http.post(f"{base}/v1/plans/{plan_id}/commit", headers=headers, timeout=TIMEOUT)
        )

    return call


# --- The tests --------------------------------------------------------------------------------------------


def test_concurrent_commits_fill_a_budget_exactly_and_never_overspend_it(server, contention):
    base, _, log_path = server
    with requests.Session() as http:
        http.headers.update(AUTH)
        setup = organization_with_priced_hardware(http, base)
        budget = create_budget(http, base, setup.organization, 100 * setup.plan_cost)
        plan_ids = create_plans(base, setup, budget["id"], 200, contention)

        replies = run_together(base, [commit(plan_id, contention) for plan_id in plan_ids])

        statuses = Counter(reply.status for reply in replies)
        assert statuses == {200: 100, 409: 100}, (statuses, server_errors(log_path))
        committed_ids = {pid for pid, reply in zip(plan_ids, replies, strict=True) if reply.status == 200}
        refused = [reply for reply in replies if reply.status == 409]
        assert all(reply.headers["Content-Type"] == "application/problem+json" for reply in refused)
        assert Counter(reply.body.get("limit") for reply in refused) == {"amount": 100}
        assert all(reply.body["status"] == "committed" for reply in replies if reply.status == 200)

        after = check(http.get(f"{base}/v1/budgets/{budget['id']}", timeout=10), 200)
        stored = {plan["id"]: plan for plan in pages(http, f"{base}/v1/plans", budget_id=budget["id"])}
        assert set(stored) == set(plan_ids)
        assert {pid for pid, plan in stored.items() if plan["status"] == "committed"} == committed_ids
        assert Decimal(after["committed"]) == sum(Decimal(stored[pid]["cost"]) for pid in committed_ids)
        assert Decimal(after["committed"]) == Decimal(after["amount"]) == 100 * setup.plan_cost
        assert Decimal(after["remaining"]) == 0

        ledger = list(pages(http, f"{base}/v1/budgets/{budget['id']}/ledger"))
        assert len(ledger) == 100
        assert {entry["entry"] for entry in ledger} == {"commit"}
        assert Counter(entry["plan_id"] for entry in ledger) == Counter(committed_ids)  # one row per plan
        assert sum(Decimal(entry["amount"]) for entry in ledger) == Decimal(after["committed"])


def test_concurrent_commits_of_one_plan_commit_it_once(server, contention):
    base, _, log_path = server
    with requests.Session() as http:
        http.headers.update(AUTH)
        setup = organization_with_priced_hardware(http, base)
        budget = create_budget(http, base, setup.organization, 100 * setup.plan_cost)
        plan = check(
            http.post(
                f"{base}/v1/plans",
                json=plan_body(setup.organization, setup.hardware, budget_id=budget["id"]),
                timeout=10,
            ),
            201,
        )

        replies = run_together(base, [commit(plan["id"], contention)] * 50)

        statuses = Counter(reply.status for reply in replies)
        assert statuses == {200: 1, 409: 49}, (statuses, server_errors(log_path))
        refused = [reply for reply in replies if reply.status == 409]
        assert all(reply.headers["Content-Type"] == "application/problem+json" for reply in refused)
        assert {reply.body.get("plan_status") for reply in refused} == {"committed"}

        after = check(http.get(f"{base}/v1/budgets/{budget['id']}", timeout=10), 200)
        assert Decimal(after["committed"]) == setup.plan_cost
        assert check(http.get(f"{base}/v1/plans/{plan['id']}", timeout=10), 200)["status"] == "committed"
        ledger = list(pages(http, f"{base}/v1/budgets/{budget['id']}/ledger"))
        assert [(entry["plan_id"], entry["entry"]) for entry in ledger] == [(plan["id"], "commit")]
        assert Decimal(ledger[0]["amount"]) == setup.plan_cost


def test_concurrent_retries_with_one_idempotency_key_create_one_plan(server, contention):
    base, _, log_path = server
    with requests.Session() as http:
        http.headers.update(AUTH)
        setup = organization_with_priced_hardware(http, base)
        # Another organisation for the retried plan, so that the probe plan above is not counted.
        organization = f"org-{uuid.uuid4().hex[:8]}"
        check(
            http.post(f"{base}/v1/organizations", json={"slug": organization, "name": "Org"}, timeout=10),
            201,
        )
        body = plan_body(organization, setup.hardware, name="retried")
        key = str(uuid.uuid4())

        def create(http: requests.Session, base: str) -> Reply:
            response = http.post(
                f"{base}/v1/plans", json=body, headers={"Idempotency-Key": key}, timeout=TIMEOUT
            )
            return Reply.of(response)

        replies = run_together(base, [create] * 50)

        contention.refusals.extend(reply for reply in replies if reply.status == 503)  # SQLite only
        statuses = Counter(reply.status for reply in replies)
        assert set(statuses) <= {201, 409, 503}, (statuses, server_errors(log_path))
        created = [reply for reply in replies if reply.status == 201]
        assert created, statuses
        assert len({reply.body["id"] for reply in created}) == 1
        assert len({reply.headers["Location"] for reply in created}) == 1
        first = [reply for reply in created if reply.headers.get("Idempotent-Replayed") != "true"]
        assert len(first) == 1, statuses  # the others are replays of it
        assert all(reply.body == first[0].body for reply in created)
        in_progress = [reply for reply in replies if reply.status == 409]
        assert all(reply.headers["Content-Type"] == "application/problem+json" for reply in in_progress)

        stored = list(pages(http, f"{base}/v1/plans", organization=organization))
        assert [plan["id"] for plan in stored] == [first[0].body["id"]]


def report_usage(plan_id: str, hour: int, contention: Contention) -> Callable[[requests.Session, str], Reply]:
    """An hour of the plan's run on its 8 accelerators, the hour-th of 2026-01-01 (usage is of the past)."""
    body = {
        "reporter": "orchestrator",
        "period_start": f"2026-01-01T{hour:02d}:00:00Z",
        "period_end": f"2026-01-01T{hour + 1:02d}:00:00Z",
        "accelerator_hours": 8,
        "tokens": 1e9 * (hour + 1),
    }

    def call(http: requests.Session, base: str) -> Reply:
        return contention.send(
            lambda headers: http.post(
                f"{base}/v1/plans/{plan_id}/usage", json=body, headers=headers, timeout=TIMEOUT
            )
        )

    return call


def test_concurrent_usage_of_many_runs_adds_up_in_their_budget_to_the_cent(server, contention):
    base, _, log_path = server
    with requests.Session() as http:
        http.headers.update(AUTH)
        setup = organization_with_priced_hardware(http, base)
        budget = create_budget(http, base, setup.organization, 100 * setup.plan_cost)
        plan_ids = create_plans(base, setup, budget["id"], 20, contention)
        for plan_id in plan_ids:
            check(http.post(f"{base}/v1/plans/{plan_id}/commit", timeout=TIMEOUT), 200)

        calls = [report_usage(plan_id, hour, contention) for hour in range(6) for plan_id in plan_ids]
        replies = run_together(base, calls)

        statuses = Counter(reply.status for reply in replies)
        assert statuses == {201: 120}, (statuses, server_errors(log_path))
        after = check(http.get(f"{base}/v1/budgets/{budget['id']}", timeout=10), 200)
        hour_cost = 8 * Decimal(PRICE_PER_HOUR)
        assert Decimal(after["spent"]) == 120 * hour_cost
        runs = [check(http.get(f"{base}/v1/plans/{plan_id}", timeout=10), 200) for plan_id in plan_ids]
        assert {(run["status"], Decimal(run["actual_cost"]), run["tokens_trained"]) for run in runs} == {
            ("running", 6 * hour_cost, 6e9)
        }

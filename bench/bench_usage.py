"""Usage reports from many running plans at once (issue 23): can the service take 1 000 running plans each
reporting every minute, on PostgreSQL?

On each backend this serves the service as `make run` does (`flask setup`, then gunicorn with the
repository's config), makes `--plans` committed plans spread over `--budgets` budgets through the API, then
sends `--minutes` rounds: in each, every plan reports the same minute of usage (10 accelerator-hours, its
tokens so far, a measured throughput, an Idempotency-Key as an orchestrator sends one) from `--clients`
threads with keep-alive sessions. A round must take under 60 s for the service to keep up; the figures are
the time a round takes, records per second, latency p50/p99, and every non-2xx answer. Afterwards the
books are checked: each budget's `spent` equals the sum of its plans' records, and each plan has one record
per round.

Then a year of it: `--report-days` days of usage of every plan (its daily sums, `usage_days`, the rows a
report of actual spend reads: 365 000 for 1 000 plans) are written straight into the database, and the
planned-against-actual report over that year is timed through HTTP (median of `--repeat`): by month and
budget, by month and label, as CSV, and as the organisation's finance key sees it.

    .venv/bin/python -m bench.bench_usage [--plans 1000] [--budgets 10] [--minutes 3] [--clients 16]
        [--report-days 365] [--repeat 7] [--backends postgresql,sqlite]
    [--postgres-url postgresql://postgres@127.0.0.1:5432/postgres]

Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import requests
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from bench.bench_plans import AUTH, add_server_arguments, call, create_budget, scratch_database, serving
from bench.machine import describe
from service.data.models import Plan, UsageDay
from service.infra.config import Config
from service.infra.db import create_db_engine

MINUTE = timedelta(minutes=1)
HOURS_A_MINUTE = 8 / 60  # 8 accelerators for a minute
YEAR_START = datetime(2025, 1, 1, tzinfo=UTC)  # the year a report of planned against actual reads


def make_plans(base: str, plans: int, budgets: int) -> list[str]:
    """`plans` committed plans on 8 H100s, round-robin over `budgets` budgets: their ids."""
    call("POST", f"{base}/v1/organizations", 201, json={"slug": "bench", "name": "Bench"})
    budget_ids = [create_budget(base, f"budget {n}") for n in range(budgets)]
    body = {"organization": "bench", "params": 1e9, "tokens": 2e10, "hardware": "h100-sxm", "accelerators": 8}
    body["labels"] = {"team": "alpha"}

    def make(n: int) -> str:
        with requests.Session() as session:
            session.headers.update(AUTH)
            start_at = (YEAR_START + timedelta(days=n % 365)).isoformat()  # planned over the report's year
            plan = {**body, "budget_id": budget_ids[n % budgets], "start_at": start_at}
            created = session.post(f"{base}/v1/plans", json=plan, timeout=60)
            created.raise_for_status()
            plan_id = created.json()["id"]
            session.post(f"{base}/v1/plans/{plan_id}/commit", timeout=60).raise_for_status()
            return plan_id

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(make, range(plans)))


class Reporter:
    """Sends one round: every plan reports minute `minute` of its run."""

    def __init__(self, base: str, clients: int):
        self.base = base
        self.local = threading.local()
        self.pool = ThreadPoolExecutor(clients)

    def _session(self) -> requests.Session:
        if not hasattr(self.local, "session"):
            self.local.session = requests.Session()
            self.local.session.headers.update(AUTH)
        return self.local.session

    def _send(self, plan_id: str, start: datetime, minute: int) -> tuple[float, int]:
        body = {
            "reporter": "bench-orchestrator",
            "period_start": start.isoformat(),
            "period_end": (start + MINUTE).isoformat(),
            "accelerator_hours": HOURS_A_MINUTE,
            "tokens": 1e8 * (minute + 1),
            "tokens_per_second": 1e8 / 60,
        }
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        began = time.perf_counter()
        response = self._session().post(
            f"{self.base}/v1/plans/{plan_id}/usage", json=body, headers=headers, timeout=60
        )
        return time.perf_counter() - began, response.status_code

    def round(self, plan_ids: list[str], start: datetime, minute: int) -> tuple[float, list[float], Counter]:
        began = time.perf_counter()
        results = list(self.pool.map(lambda plan_id: self._send(plan_id, start, minute), plan_ids))
        elapsed = time.perf_counter() - began
        return elapsed, [seconds for seconds, _ in results], Counter(status for _, status in results)


def check_books(base: str, plan_ids: list[str], minutes: int) -> str:
    """Each budget's spent against its plans' actual costs, and each plan's record count."""
    budgets = call("GET", f"{base}/v1/budgets?organization=bench&limit=100", 200).json()["items"]
    spent = sum(Decimal(budget["spent"]) for budget in budgets)
    actual = Decimal(0)
    counts = Counter()
    for plan_id in plan_ids:
        plan = call("GET", f"{base}/v1/plans/{plan_id}", 200).json()
        actual += Decimal(plan["actual_cost"])
        counts[plan["status"]] += 1
    sample = call("GET", f"{base}/v1/plans/{plan_ids[0]}/usage?limit=100", 200).json()["items"]
    agree = "agree" if spent == actual else f"DISAGREE ({spent} spent, {actual} actual)"
    return (
        f"budgets' spent {spent} USD and plans' actual {actual} USD {agree}; plans {dict(counts)}; "
        f"first plan has {len(sample)} records (expected {minutes})"
    )


def seed_a_year(database_url: str, plan_ids: list[str], days: int) -> None:
    """`days` days of usage of every plan from 2025-01-01, as the usage records would have summed them."""
    engine = create_db_engine(Config(database_url=database_url, db_statement_timeout_ms=0))
    began = time.perf_counter()
    with Session(engine) as session:
        owners = dict(
            session.execute(
                select(Plan.id, Plan.organization_id).where(
                    Plan.id.in_([uuid.UUID(plan_id) for plan_id in plan_ids])
                )
            ).all()
        )
        for offset in range(days):
            day = (YEAR_START + timedelta(days=offset)).date()
            session.execute(
                insert(UsageDay),
                [
                    {
                        "plan_id": plan_id,
                        "day": day,
                        "organization_id": organization_id,
                        "accelerator_hours": 192.0,
                        "cost": Decimal("1920.00"),
                        "currency": "USD",
                    }
                    for plan_id, organization_id in owners.items()
                ],
            )
        session.commit()
        rows = session.scalar(select(func.count()).select_from(UsageDay))
    engine.dispose()
    print(f"  seeded a year: {rows} usage_days rows in {time.perf_counter() - began:.0f} s")


def time_reports(base: str, days: int, repeat: int) -> None:
    end = (YEAR_START + timedelta(days=days)).isoformat()
    window = f"from={YEAR_START.isoformat()}&to={end}".replace("+", "%2B")
    finance = call(
        "POST", f"{base}/v1/keys", 201, json={"name": "finance", "role": "finance", "organization": "bench"}
    ).json()["key"]
    cases = [
        ("by month and budget (admin)", "granularity=month&group_by=budget&measure=both", AUTH),
        ("by month and label:team (admin)", "granularity=month&group_by=label:team&measure=both", AUTH),
        (
            "by month and budget, CSV (admin)",
            "granularity=month&group_by=budget&measure=both&format=csv",
            AUTH,
        ),
        (
            "by month and budget (finance key)",
            "granularity=month&group_by=budget&measure=both",
            {"Authorization": f"Bearer {finance}"},
        ),
    ]
    with requests.Session() as session:
        for name, query, headers in cases:
            url = f"{base}/v1/reports/costs?{window}&{query}"
            timings = []
            for _ in range(repeat):
                began = time.perf_counter()
                response = session.get(url, headers=headers, timeout=120)
                timings.append(time.perf_counter() - began)
                if response.status_code != 200:
                    raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")
            rows = len(response.text.splitlines()) - 1 if "csv" in query else len(response.json()["rows"])
            print(
                f"  report over {days} days {name}: median {statistics.median(timings) * 1000:.0f} ms "
                f"(min {min(timings) * 1000:.0f}, max {max(timings) * 1000:.0f}), {rows} rows"
            )


def run(backend: str, args: argparse.Namespace, directory: Path) -> None:
    with (
        scratch_database(backend, args.postgres_url, directory) as url,
        serving(url, args.workers, args.threads, directory / f"{backend}.log") as server,
    ):
        began = time.perf_counter()
        plan_ids = make_plans(server.base, args.plans, args.budgets)
        print(
            f"\n{backend}: {len(plan_ids)} committed plans over {args.budgets} budgets made in "
            f"{time.perf_counter() - began:.0f} s"
        )
        reporter = Reporter(server.base, args.clients)
        first_minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=1)
        for minute in range(args.minutes):
            elapsed, latencies, statuses = reporter.round(plan_ids, first_minute + minute * MINUTE, minute)
            cuts = statistics.quantiles(latencies, n=100)
            print(
                f"  round {minute + 1}: {len(latencies)} records in {elapsed:.1f} s "
                f"({len(latencies) / elapsed:.0f}/s, {60 / elapsed:.1f}x the rate of one a minute); "
                f"p50 {cuts[49] * 1000:.0f} ms, p99 {cuts[98] * 1000:.0f} ms; statuses {dict(statuses)}"
            )
        print("  " + check_books(server.base, plan_ids, args.minutes))
        if args.report_days:
            seed_a_year(url, plan_ids, args.report_days)
            time_reports(server.base, args.report_days, args.repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=1000)
    parser.add_argument("--budgets", type=int, default=10)
    parser.add_argument("--minutes", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    add_server_arguments(parser)
    parser.add_argument("--report-days", type=int, default=365, help="days of usage to report over; 0: none")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    print(f"Machine: {describe()}")
    print(
        f"{args.plans} plans, {args.budgets} budgets, {args.minutes} rounds, {args.clients} client threads, "
        f"gunicorn {args.workers} workers x {args.threads} threads"
    )
    with tempfile.TemporaryDirectory() as scratch:
        for backend in args.backends.split(","):
            run(backend, args, Path(scratch))


if __name__ == "__main__":
    main()

"""Cost reports over a large history (issue 8): a month-by-budget report over a year of 1 000 000 plans,
through HTTP on a real gunicorn, beside the bare SQL aggregate it runs, on SQLite and PostgreSQL.

For each shape and backend: a scratch database, `flask setup`, gunicorn; organisations, 20 budgets and one
committed plan, copied (COPY on PostgreSQL, executemany on SQLite) into 1 000 000 plans, 80% committed, 10%
draft, 10% cancelled. Shape `worst`: every plan in one organisation and in 2026, reported across
organisations. Shape `history`: plans over 2025-2028 in 10 organisations, one organisation's 2026 reported.
Then, each the median of 5 after a warm-up:

* the report through HTTP (`GET /v1/reports/costs?...&granularity=month&group_by=budget`, JSON and CSV);
* the SQL statement the service sends for it, caught on its way to the driver and run on the driver alone;
* the same with `group_by=budget,label:team` (labels live in the plan's JSON: no index covers them);
* the same report over a year with no plans: what every request costs whatever it aggregates (a new
  connection, authentication, the response), to set beside the difference between HTTP and SQL;
* the month-by-budget report again, through a server started after the bulk load.

    .venv/bin/python -m bench.bench_reports [--plans 1000000] [--backends sqlite,postgresql]

Not a test: nothing asserts on time. Needs PostgreSQL at --postgres (default: the local server).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests
from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session

from bench.bench_plans import (
    AUTH,
    PLANS,
    call,
    committed_plan,
    copy_postgresql,
    create_budget,
    insert_sqlite,
    median_seconds,
    scratch_database,
    serving,
)
from bench.machine import describe
from service.data.models import Organization
from service.infra.config import Config
from service.infra.db import create_db_engine
from service.services import reports

YEAR = (datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
BUDGETS = 20
VARIED = ("id", "organization_id", "budget_id", "status", "start_at", "end_at", "created_at")
# worst: every plan in the bench organisation and the report's year, reported across organisations (admin);
# history: plans over 4 years in 10 organisations, the bench organisation's year reported (a finance key's
# view: its organisation only).
SHAPES = {
    "worst": {"organizations": 1, "years": 1, "scoped": False},
    "history": {"organizations": 10, "years": 4, "scoped": True},
}
REPORT = "/v1/reports/costs?from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z&granularity=month"
EMPTY_YEAR = "/v1/reports/costs?from=1990-01-01T00:00:00Z&to=1991-01-01T00:00:00Z&granularity=month"


def prepare(base: str, organizations: int) -> tuple[list[str], str]:
    """The organisations, the bench organisation's budgets and one committed plan (the template): budget ids
    and plan id."""
    for n in range(organizations):
        slug = "bench" if n == 0 else f"other-{n}"
        call("POST", f"{base}/v1/organizations", 201, json={"slug": slug, "name": slug.title()})
    budgets = [create_budget(base, f"Budget {n}") for n in range(BUDGETS)]
    return budgets, committed_plan(base, budgets[0], "2026-01-01T00:00:00Z")


def fill(engine: Engine, budgets: list[str], template: str, total: int, shape: dict) -> float:
    """Copies of the template until there are `total` plans; the seconds it took. The bench organisation's
    plans are charged to its budgets, the others' to none."""
    rng = random.Random(2026)
    start = YEAR[0] - timedelta(days=365 * (shape["years"] - 1) // 2)
    span = timedelta(days=365 * shape["years"]).total_seconds()
    ids = [uuid.UUID(budget) for budget in budgets]
    with engine.connect() as connection:
        organizations = [
            connection.scalar(select(Organization.id).where(Organization.slug == slug))
            for slug in ["bench", *(f"other-{n}" for n in range(1, shape["organizations"]))]
        ]

    def rows() -> Iterator[tuple]:
        for _ in range(total - 1):
            moment = start + timedelta(seconds=rng.random() * span)
            status = rng.choices(("committed", "draft", "cancelled"), (8, 1, 1))[0]
            n = rng.randrange(len(organizations))
            budget = rng.choice(ids) if n == 0 else None
            # A schedule of half a day to a month (reports spread over both months those crossing a month's
            # edge, about a quarter of them), made 30 days before it starts.
            end = moment + timedelta(days=rng.uniform(0.5, 30))
            yield uuid.uuid4(), organizations[n], budget, status, moment, end, moment - timedelta(days=30)

    started = time.perf_counter()
    if engine.dialect.name == "postgresql":
        copy_postgresql(engine, uuid.UUID(template), rows(), VARIED)
    else:
        insert_sqlite(engine, uuid.UUID(template), rows(), VARIED)
    return time.perf_counter() - started


def statement_of(engine: Engine, group_by: tuple[str, ...], organization: str | None) -> tuple[str, object]:
    """The report's aggregate as the service sends it to the driver."""
    caught: list[tuple[str, object]] = []

    def catch(_conn, _cursor, statement, parameters, _context, _executemany):
        caught.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", catch)
    try:
        with Session(engine) as session:
            query = reports.CostQuery(
                start=YEAR[0], end=YEAR[1], granularity="month", group_by=group_by, organization=organization
            )
            reports.cost_report(session, query, scope=None)
    finally:
        event.remove(engine, "before_cursor_execute", catch)
    return next(item for item in caught if "FROM plans" in item[0])


def bare(engine: Engine, statement: tuple[str, object]) -> tuple[float, int]:
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        rows: list = []

        def run() -> None:
            cursor.execute(*statement)
            rows[:] = cursor.fetchall()
            raw.rollback()

        return median_seconds(run, 5), len(rows)
    finally:
        raw.close()


def explain(engine: Engine, statement: tuple[str, object]) -> str:
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        prefix = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
        cursor.execute(prefix + statement[0], statement[1])
        return "\n".join("    " + " ".join(str(part) for part in row) for row in cursor.fetchall())
    finally:
        raw.rollback()
        raw.close()


def run_backend(backend: str, shape_name: str, args: argparse.Namespace) -> None:
    shape = SHAPES[shape_name]
    with (
        tempfile.TemporaryDirectory() as directory,
        scratch_database(backend, args.postgres, Path(directory)) as url,
        serving(url, workers=1, threads=4, log_path=Path(directory) / "server.log") as server,
    ):
        budgets, template = prepare(server.base, shape["organizations"])
        engine = create_db_engine(Config(database_url=url, db_statement_timeout_ms=0))  # bulk loads
        seconds = fill(engine, budgets, template, args.plans, shape)
        with engine.connect() as connection:
            count = connection.scalar(select(func.count()).select_from(PLANS))
        organization = "bench" if shape["scoped"] else None
        print(f"\n## {backend}, {shape_name}: {count} plans (filled in {seconds:.0f} s)")
        scope = f"&organization={organization}" if organization else ""
        empty = f"{server.base}{EMPTY_YEAR}&group_by=budget{scope}"
        floor = median_seconds(lambda: requests.get(empty, headers=AUTH, timeout=600), 5)
        print(f"the same report over a year with no plans, through HTTP: {floor * 1000:.1f} ms")
        for group_by in (("budget",), ("budget", "label:team")):
            address = f"{server.base}{REPORT}&group_by={','.join(group_by)}{scope}"
            http = median_seconds(lambda address=address: requests.get(address, headers=AUTH, timeout=600), 5)
            as_csv = f"{address}&format=csv"
            csv = median_seconds(lambda as_csv=as_csv: requests.get(as_csv, headers=AUTH, timeout=600), 5)
            statement = statement_of(engine, group_by, organization)
            sql, rows = bare(engine, statement)
            print(
                f"group_by={','.join(group_by)}: {rows} rows; HTTP JSON {http * 1000:.0f} ms, CSV "
                f"{csv * 1000:.0f} ms; bare SQL {sql * 1000:.0f} ms; HTTP / SQL {http / sql:.2f}"
            )
            print("  plan:\n" + explain(engine, statement))
        # Again with a server started after the bulk load, as after a deploy: the one above lived through a
        # million rows written behind its back by another process, which is no server's steady state.
        with serving(url, workers=1, threads=4, log_path=Path(directory) / "fresh.log") as fresh:
            address = f"{fresh.base}{REPORT}&group_by=budget{scope}"
            http = median_seconds(lambda: requests.get(address, headers=AUTH, timeout=600), 5)
            sql, _ = bare(engine, statement_of(engine, ("budget",), organization))
            print(
                f"a server started after the load, group_by=budget: HTTP JSON {http * 1000:.0f} ms; "
                f"bare SQL {sql * 1000:.0f} ms; HTTP / SQL {http / sql:.2f}"
            )
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=1_000_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--shapes", default="worst,history", help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    print(describe())
    for shape in args.shapes.split(","):
        for backend in args.backends.split(","):
            run_backend(backend, shape, args)


if __name__ == "__main__":
    main()

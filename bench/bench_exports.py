"""Large exports (issue 50): a 300 000-row FOCUS export streamed through a real gunicorn, its time and the
worker's peak memory, on SQLite and PostgreSQL.

For each backend: a scratch database, `flask setup`, gunicorn with one worker; the bench organisation, a
budget and one committed plan, copied into --plans plans; --days usage days of each (plans x days rows of
usage_days, inserted on the driver). Then `GET /v1/reports/focus` over 2026, read as it streams: the time to
its first byte and to its last, its rows, and the worker's peak resident memory (VmHWM) before and after.
Before issue 50 this export was refused (422) past 100 000 rows.

    .venv/bin/python -m bench.bench_exports [--plans 1000] [--days 300] [--backends sqlite,postgresql]

Not a test: nothing asserts on time. Needs PostgreSQL at --postgres (default: the local server).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import psutil
import requests
from sqlalchemy import insert, select

from bench.bench_plans import (
    AUTH,
    call,
    committed_plan,
    copy_postgresql,
    create_budget,
    insert_sqlite,
    scratch_database,
    serving,
)
from bench.machine import describe
from service.data.models import Organization, UsageDay
from service.infra.config import Config
from service.infra.db import create_db_engine

EXPORT = "/v1/reports/focus?from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z"
VARIED = ("id", "organization_id", "budget_id", "status", "start_at", "end_at", "created_at")


def fill(database_url: str, budget: str, template: str, plans: int, days: int) -> float:
    """`plans` running plans (the template and its copies) with `days` usage days each: the seconds taken."""
    engine = create_db_engine(Config(database_url=database_url))
    started = time.perf_counter()
    with engine.connect() as connection:
        organization = connection.scalar(select(Organization.id).where(Organization.slug == "bench"))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [uuid.UUID(template)] + [uuid.uuid4() for _ in range(plans - 1)]
    rows = (
        (plan_id, organization, uuid.UUID(budget), "running", start, start + timedelta(days=days), start)
        for plan_id in ids[1:]
    )
    if engine.dialect.name == "postgresql":
        copy_postgresql(engine, uuid.UUID(template), rows, VARIED)
    else:
        insert_sqlite(engine, uuid.UUID(template), rows, VARIED)
    first = date(2026, 1, 1)
    with engine.begin() as connection:
        for plan_id in ids:
            connection.execute(
                insert(UsageDay),
                [
                    {
                        "plan_id": plan_id,
                        "day": first + timedelta(days=day),
                        "organization_id": organization,
                        "accelerator_hours": 192.0,
                        "cost": Decimal("374.40"),
                        "currency": "USD",
                    }
                    for day in range(days)
                ],
            )
    engine.dispose()
    return time.perf_counter() - started


def worker_peak_kib(master: int) -> int:
    """The largest peak resident memory of the master's workers (VmHWM, KiB)."""
    peaks = []
    for child in psutil.Process(master).children():
        for line in Path(f"/proc/{child.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]))
    return max(peaks)


def run_backend(backend: str, args: argparse.Namespace) -> None:
    with (
        tempfile.TemporaryDirectory() as directory,
        scratch_database(backend, args.postgres, Path(directory)) as url,
        serving(url, 1, 4, Path(directory) / "gunicorn.log") as server,
    ):
        call("POST", f"{server.base}/v1/organizations", 201, json={"slug": "bench", "name": "Bench"})
        budget = create_budget(server.base, "Exports")
        template = committed_plan(server.base, budget, "2026-01-01T00:00:00Z")
        loaded = fill(url, budget, template, args.plans, args.days)
        requests.get(f"{server.base}{EXPORT.replace('2027', '2026')}", headers=AUTH, timeout=60)  # warm
        before = worker_peak_kib(server.pid)
        started = time.perf_counter()
        first_byte = None
        lines = 0
        with requests.get(f"{server.base}{EXPORT}", headers=AUTH, stream=True, timeout=600) as response:
            response.raise_for_status()
            for chunk in response.iter_content(chunk_size=65536):
                if first_byte is None:
                    first_byte = time.perf_counter() - started
                lines += chunk.count(b"\n")
        total = time.perf_counter() - started
        after = worker_peak_kib(server.pid)
        print(
            f"{backend}: {lines - 1} rows (loaded in {loaded:.0f} s); first byte {first_byte * 1000:.0f} ms, "
            f"all {total:.1f} s ({(lines - 1) / total:,.0f} rows/s); worker peak RSS {before / 1024:.0f} MiB "
            f"before, {after / 1024:.0f} MiB after"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=1000)
    parser.add_argument("--days", type=int, default=300)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    print(describe())
    for backend in args.backends.split(","):
        run_backend(backend, args)


if __name__ == "__main__":
    main()

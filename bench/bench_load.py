"""Throughput and latency at saturation, through HTTP on a real gunicorn, with locust as the load generator:
five operations, each measured on its own, on SQLite and PostgreSQL side by side.

On each backend (SQLite file, PostgreSQL scratch database) this sets the service up and serves it as
bench_plans does (`flask setup`, then gunicorn with the repository's gunicorn.conf.py), creates the bench
organisation and what the cost report sums (a plan in each month of 2026 in each of 4 budgets, committed:
48 report rows), sends every operation once to check that it is answered as expected, then loads each
operation in turn:

1. GET /healthz
2. POST /v1/allocations: 6 000 PF-days on 1 024 H100s by the Chinchilla law (the plan below, not stored)
3. POST /v1/plans: the same request stored as a draft plan without a budget (so no request can conflict),
   with a fresh Idempotency-Key each, as orchestration systems send them
4. GET /v1/plans: the first page at the default limit, across organisations (admin key)
5. GET /v1/reports/costs: 2026 by month and budget, across organisations

Each load is one headless locust run in a subprocess (bench/locustfile.py; gevent stays out of this
process): `--users` users (FastHttpUser, one keep-alive connection each, no wait between requests), all
started at once; `--warmup` seconds at full load, then the statistics are reset and `--seconds` seconds
measured. The figures are locust's stats CSV, written when locust quits: Requests/s (every answer), the 50%
and 99% response times (locust keeps whole milliseconds below 100 ms and two significant digits above) and
the failures: any answer but 2xx, or none.
Beside them, over the measured window: the cores that locust and the server (gunicorn and PostgreSQL) kept
busy, the share of the machine that other work took (figures taken under such load are not comparable), and
the gunicorn workers booted during the run (a recycled worker leaves a core idle while it restarts). Locust
is one process: when it keeps a core busy it, not the server, sets the pace.

The figure to watch is, per backend, POST /v1/plans over GET /healthz in 2xx answers per second (the goal
is at least 0.5). Plans created by load 3 stay in the database for loads 4 and 5: the list's first page
costs the same at any depth, and the report counts committed plans only.

    .venv/bin/python -m bench.bench_load [--seconds 20] [--users 32] [--backends sqlite,postgresql]
        [--warmup 3] [--workers 2] [--threads 4]
        [--postgres-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]

Not a test: nothing asserts on time. Every failure is counted and reported, with the commonest reasons.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.bench_plans import (
    AUTH,
    BIN,
    Server,
    add_server_arguments,
    call,
    committed_plan,
    create_budget,
    load_average,
    scratch_database,
    serving,
)
from bench.machine import CpuUse, describe
from tests.commands import ROOT

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
BUDGETS = 4
MONTHS = 12
REPORT_WINDOW = "from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z"
PLANNING = {"pf_days": 6000, "hardware": "h100-sxm", "accelerators": 1024, "law": "chinchilla-2022"}
PLANS, HEALTHZ = "POST /v1/plans", "GET /healthz"
GOAL = 0.5  # POST /v1/plans over GET /healthz, in 2xx answers per second


@dataclass(frozen=True)
class Operation:
    name: str
    method: str
    path: str
    body: dict | None = None
    expect: int = 200  # the status of a success, checked once before the load
    idempotency_key: bool = False


OPERATIONS = (
    Operation(HEALTHZ, "GET", "/healthz"),
    Operation("POST /v1/allocations", "POST", "/v1/allocations", PLANNING),
    Operation(
        PLANS,
        "POST",
        "/v1/plans",
        {
            "organization": "bench",
            "name": "6000 PF-days on 1024 H100",
            "labels": {"team": "alpha"},
            **PLANNING,
        },
        expect=201,
        idempotency_key=True,
    ),
    Operation("GET /v1/plans", "GET", "/v1/plans"),
    Operation(
        "GET /v1/reports/costs", "GET", f"/v1/reports/costs?{REPORT_WINDOW}&granularity=month&group_by=budget"
    ),
)


def prepare(base: str) -> None:
    """The bench organisation and the committed plans the cost report sums; then every operation once."""
    call("POST", f"{base}/v1/organizations", 201, json={"slug": "bench", "name": "Bench"})
    for n in range(BUDGETS):
        budget = create_budget(base, f"Budget {n}")
        for month in range(1, MONTHS + 1):
            committed_plan(base, budget, f"2026-{month:02d}-01T00:00:00Z")
    # A request the service refuses would turn a whole load into failures: better to stop here, saying why.
    for operation in OPERATIONS:
        response = call(operation.method, base + operation.path, operation.expect, json=operation.body)
        if operation.path.startswith("/v1/reports/") and len(response.json()["rows"]) != BUDGETS * MONTHS:
            raise RuntimeError(
                f"the cost report has {len(response.json()['rows'])} rows, not {BUDGETS * MONTHS}"
            )


# --- One load: a locust run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    operation: str
    requests: int
    failures: int
    per_second: float  # every answer, as locust counts it
    p50_ms: float | None
    p99_ms: float | None
    reasons: list[tuple[int, str]]  # (occurrences, failure), commonest first
    cpu: CpuUse | None
    worker_boots: int

    @property
    def ok_per_second(self) -> float:
        """2xx answers per second: fast failures cannot flatter it."""
        return self.per_second * (self.requests - self.failures) / self.requests if self.requests else 0.0


def run_locust(
    operation: Operation, server: Server, args: argparse.Namespace, directory: Path
) -> Measurement:
    prefix = directory / re.sub(r"\W+", "_", operation.name).strip("_").lower()
    cpu_file = prefix.with_suffix(".cpu.json")
    request = {
        "name": operation.name,
        "method": operation.method,
        "path": operation.path,
        "headers": AUTH,
        "json": operation.body,
        "idempotency_key": operation.idempotency_key,
    }
    env = {
        **os.environ,
        "BENCH_REQUEST": json.dumps(request),
        "BENCH_SERVER_PID": str(server.pid),
        "BENCH_CPU_FILE": str(cpu_file),
        "BENCH_WARMUP": str(args.warmup),
        "BENCH_CSV": str(prefix),
        # The locustfile imports bench.bench_plans; locust itself only puts bench/ on the path.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    command = [
        str(BIN / "locust"),
        "--locustfile",
        str(LOCUSTFILE),
        "--headless",
        "--host",
        server.base,
        "--users",
        str(args.users),
        # All at once: the warm-up runs at full load, and the locustfile resets the statistics after it.
        "--spawn-rate",
        str(args.users),
        "--run-time",
        f"{args.warmup + args.seconds}s",
        "--only-summary",
        # Failures are read from the statistics; a non-zero exit then means locust itself went wrong.
        "--exit-code-on-error",
        "0",
    ]
    boots = server.worker_boots()
    log = prefix.with_suffix(".log")
    with log.open("w") as output:
        finished = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=args.warmup + args.seconds + 120,
            check=False,
        )
    if finished.returncode != 0:
        raise RuntimeError(
            f"locust exited {finished.returncode} on {operation.name}:\n{log.read_text()[-3000:]}"
        )
    with open(f"{prefix}_exceptions.csv", newline="") as exceptions:
        # An exception in the locustfile leaves its request uncounted, neither success nor failure.
        if raised := list(csv.DictReader(exceptions)):
            raise RuntimeError(f"the locustfile raised on {operation.name}: {raised[0]['Traceback']}")
    with open(f"{prefix}_stats.csv", newline="") as stats:
        total = next(row for row in csv.DictReader(stats) if row["Name"] == "Aggregated")
    with open(f"{prefix}_failures.csv", newline="") as failures:
        reasons = sorted(
            ((int(row["Occurrences"]), row["Error"]) for row in csv.DictReader(failures)), reverse=True
        )
    cpu = json.loads(cpu_file.read_text()) if cpu_file.exists() else None
    return Measurement(
        operation=operation.name,
        requests=int(total["Request Count"]),
        failures=int(total["Failure Count"]),
        per_second=float(total["Requests/s"]),
        p50_ms=milliseconds(total["50%"]),
        p99_ms=milliseconds(total["99%"]),
        reasons=reasons,
        cpu=CpuUse(**cpu) if cpu else None,
        worker_boots=server.worker_boots() - boots,
    )


def milliseconds(cell: str) -> float | None:
    return None if cell in {"", "N/A"} else float(cell)


# --- Backends and the report ------------------------------------------------------------------------------


def run_backend(backend: str, args: argparse.Namespace) -> list[Measurement]:
    print(f"\n== {backend} ==", flush=True)
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-load-") as directory,
        scratch_database(backend, args.postgres_url, Path(directory)) as database_url,
        serving(database_url, args.workers, args.threads, Path(directory) / "server.log") as server,
    ):
        prepare(server.base)
        for operation in OPERATIONS:
            result = run_locust(operation, server, args, Path(directory))
            results.append(result)
            print(
                f"  {result.operation:<24} {result.per_second:8.1f} req/s  p50 {number(result.p50_ms)} ms  "
                f"p99 {number(result.p99_ms)} ms  failures {result.failures} of {result.requests}  "
                f"{cpu_note(result)}",
                flush=True,
            )
            for occurrences, reason in result.reasons[:3]:
                print(f"    {occurrences} x {reason}", flush=True)
    return results


def cpu_note(result: Measurement) -> str:
    if result.cpu is None:
        return "CPU n/a"
    return (
        f"cores busy: locust, server {cores_busy(result.cpu)}; "
        f"other work {result.cpu.elsewhere:.0%} of the machine; workers booted {result.worker_boots}"
    )


def report(results: dict[str, list[Measurement]], args: argparse.Namespace) -> None:
    print(f"\nmachine: {describe()}")
    print(
        f"server: gunicorn gthread (gunicorn.conf.py), {args.workers} workers x {args.threads} threads; "
        f"client: locust, {args.users} users (FastHttpUser, no wait) in one process on the same cores; "
        f"one operation at a time, {args.seconds} s each after {args.warmup} s of warm-up"
    )
    for backend, measurements in results.items():
        print(f"\n### {backend}\n")
        print(
            "| operation | requests/s | p50 ms | p99 ms | failures | cores busy: locust, server | other work "
            "| workers booted |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for m in measurements:
            cores, other = ("n/a", "n/a") if m.cpu is None else (cores_busy(m.cpu), f"{m.cpu.elsewhere:.0%}")
            print(
                f"| {m.operation} | {m.per_second:.1f} | {number(m.p50_ms)} | {number(m.p99_ms)} | "
                f"{m.failures} of {m.requests} | {cores} | {other} | {m.worker_boots} |"
            )
    print()
    for backend, measurements in results.items():
        by_name = {m.operation: m for m in measurements}
        plans, healthz = by_name[PLANS], by_name[HEALTHZ]
        ratio = plans.ok_per_second / healthz.ok_per_second if healthz.ok_per_second else float("nan")
        print(
            f"{backend}: {PLANS} / {HEALTHZ} = {plans.ok_per_second:.1f} / {healthz.ok_per_second:.1f} "
            f"2xx answers per second = {ratio:.2f} (goal >= {GOAL}: {'met' if ratio >= GOAL else 'not met'})"
        )
    for backend, measurements in results.items():
        for m in measurements:
            if m.failures:
                print(f"FAILURES: {backend}, {m.operation}: {m.failures} of {m.requests} answers not 2xx")


def number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def cores_busy(cpu: CpuUse) -> str:
    return f"{cpu.client:.2f}, {cpu.server:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=20, help="measured seconds per operation")
    parser.add_argument("--warmup", type=int, default=3, help="seconds of load before measuring")
    parser.add_argument("--users", type=int, default=32, help="concurrent locust users")
    add_server_arguments(parser)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--postgres-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    if args.warmup < 0 or args.seconds < 1 or args.users < 1:
        parser.error("--seconds and --users must be at least 1, --warmup at least 0")
    print(f"machine: {describe()}", flush=True)
    print(f"load average before: {load_average()}", flush=True)
    results = {backend: run_backend(backend, args) for backend in args.backends.split(",")}
    report(results, args)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()

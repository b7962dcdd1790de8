"""Cost of an Idempotency-Key (issue 24): POST /v1/plans with a fresh key each, in process.

On each backend (SQLite file, PostgreSQL scratch database) this sets the service up (`flask setup`), creates
organisation `bench` and sends `--requests` plans (6 000 PF-days on 1 024 H100s under Chinchilla) through
Flask's test client, each with a fresh Idempotency-Key, after a warm-up, and as many without a key, in
turns. It prints the median and 90th percentile wall time per request; the CPU time this process spent on
one on average (the app's, without gunicorn, and on PostgreSQL without the server's: on a machine shared with
other work, steadier than wall time); the time spent in the key's own work (idempotency.claim and
idempotency.store, their statements included); the statements each request sent to the database (every
cursor execution, BEGIN included), and which ones for the last keyed request.

    .venv/bin/python -m bench.bench_idempotency [--requests 300] [--backends sqlite,postgresql]
        [--postgres-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]

Not a test: nothing asserts on time (tests/api/test_plans.py counts the statements).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import event

from bench.bench_plans import scratch_database
from bench.machine import describe
from service import create_app
from service.infra.db import get_db
from service.services import idempotency

KEY = "cpk_bench_idempotency-admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
PLAN = {
    "organization": "bench",
    "pf_days": 6000,
    "hardware": "h100-sxm",
    "accelerators": 1024,
    "law": "chinchilla-2022",
}


def measure(database_url: str, requests: int) -> None:
    app = create_app(
        {"database_url": database_url, "admin_key": KEY, "log_level": "WARNING", "webhooks_in_process": False}
    )
    result = app.test_cli_runner().invoke(args=["setup"])
    assert result.exit_code == 0, result.output
    statements: list[str] = []
    event.listen(get_db(app).engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    in_key_code = _timed_key_code()
    client = app.test_client()
    created = client.post("/v1/organizations", json={"slug": "bench", "name": "Bench"}, headers=AUTH)
    assert created.status_code == 201, created.get_json()

    times: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}  # this process's CPU time: steadier than wall time
    counts: dict[bool, list[int]] = {True: [], False: []}
    key_code: list[float] = []
    last: list[str] = []
    for n in range(requests + 10):  # the first 10 warm up
        # A request with a key and one without, in turns, so that both see the same load on the machine.
        for keyed in (True, False) if n % 2 else (False, True):
            headers = {**AUTH, "Idempotency-Key": str(uuid.uuid4())} if keyed else AUTH
            statements.clear()
            in_key_code.clear()
            start, start_cpu = time.perf_counter(), time.process_time()
            response = client.post("/v1/plans", json=PLAN, headers=headers)
            elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
            assert response.status_code == 201, response.get_json()
            if n >= 10:
                times[keyed].append(elapsed)
                cpu[keyed].append(elapsed_cpu)
                counts[keyed].append(len(statements))
                if keyed:
                    key_code.append(sum(in_key_code))
                    last = list(statements)
    for keyed, label in ((True, "with a fresh Idempotency-Key"), (False, "without a key")):
        print(
            f"  POST /v1/plans {label}: median {statistics.median(times[keyed]) * 1000:.2f} ms, "
            f"p90 {statistics.quantiles(times[keyed], n=10)[-1] * 1000:.2f} ms, "
            f"CPU of this process {statistics.fmean(cpu[keyed]) * 1000:.2f} ms on average, "
            f"{statistics.median(counts[keyed]):g} statements "
            f"(min {min(counts[keyed])}, max {max(counts[keyed])})"
        )
    print(f"  in claim and store (the key's own work): median {statistics.median(key_code) * 1000:.2f} ms")
    print("  the statements of the last request with a key:")
    for statement in last:
        print("    " + " ".join(statement.split())[:150])
    get_db(app).engine.dispose()


def _timed_key_code() -> list[float]:
    """Times each call of idempotency.claim and idempotency.store (whatever their arguments) appends."""
    spent: list[float] = []
    for name in ("claim", "store"):
        function = getattr(idempotency, name)

        def timed(*args, _function=function, **kwargs):
            start = time.perf_counter()
            try:
                return _function(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - start)

        setattr(idempotency, name, timed)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--postgres-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    print(describe())
    for backend in args.backends.split(","):
        print(backend)
        with (
            tempfile.TemporaryDirectory() as directory,
            scratch_database(backend, args.postgres_url, Path(directory)) as url,
        ):
            measure(url, args.requests)


if __name__ == "__main__":
    main()

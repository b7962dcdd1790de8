"""Speed of persisted plans (issue 6): POST /v1/plans against GET /healthz, and GET /v1/plans at depth.

On each backend (SQLite file, PostgreSQL scratch database) this sets the service up and serves it the way
the e2e tests do (`flask setup`, then gunicorn with the repository's config), then:

1. throughput: `--clients` threads, each with its own keep-alive `requests.Session`, call POST /v1/plans
   (persisted, with a budget_id: 6 000 PF-days on 1 024 H100s, the layout searched), the same with a fresh
   Idempotency-Key each (as orchestration systems send them), the same for a new run each time (a budget never
   asked before: no remembered search helps), POST /v1/allocations of the same run and of a new run each time,
   and POST /v1/estimates (70B on 1.4T tokens on 1 024 H100s), each for `--duration` seconds after a warm-up
   (`--only` picks some, `--only none` none: the pages alone), each just after as long a window of
   GET /healthz, `--rounds` times over: requests/s, p50/p99 latency, every non-2xx status, the server's CPU
   per request (gunicorn and PostgreSQL), the share of the CPU that other work on the machine took meanwhile,
   and the load's rate as a share of /healthz's in the window before it (the median over the rounds): the
   machine's speed drifts, so a load is compared with /healthz at the same time. Client and server share the
   machine's cores, so the client's own cost is in the figures.
2. history: plans are bulk-loaded straight into the database (COPY on PostgreSQL, one executemany
   transaction on SQLite; every row a copy of a real plan created through the API, with its own id, time and
   organisation) until there are `--plans`, spread round-robin over `--organizations` organisations.
3. pages: GET /v1/plans?limit=100 first, 10 000 plans deep and as deep as the history goes (cursor of the
   plan just above, found with one OFFSET query), overall and with ?organization=; timed through HTTP
   (`requests`, which costs milliseconds of its own on a large body, and wrk on one connection, its median
   latency and the server's CPU per page; wrk when installed: apt-get install wrk), as the service call in
   process (list_plans) and as the bare page query on the driver; medians of `--repeat` runs. As a check,
   the same page written by hand as a row-value keyset, (created_at, id) < (:t, :id), with the
   organisation's id resolved first: the form the service adopted when this benchmark showed its first,
   OR-form keyset growing with depth; the two columns should agree. EXPLAIN shows how each database serves
   them.

    .venv/bin/python -m bench.bench_plans [--duration 10] [--rounds 1] [--clients 8] [--plans 1000000]
        [--only plans,allocations] [--backends sqlite,postgresql] [--postgres-url postgresql://postgres@127.0.0.1:5432/postgres]

Not a test: nothing asserts on time. Any non-2xx answer is counted and reported.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import requests
from sqlalchemy import Engine, bindparam, event, func, select, text, tuple_
from sqlalchemy.orm import Session

from bench.machine import CpuMeter, CpuUse, describe
from service.data.models import Organization, Plan
from service.infra.config import Config
from service.infra.db import create_db_engine, reading
from service.services import plans
from service.services.pagination import Cursor
from tests.commands import ROOT, SERVE_COMMAND, SETUP_COMMAND, free_port, scratch_postgres_database

BIN = Path(sys.executable).parent
ADMIN_KEY = "cpk_benchadmin_" + "bench-secret-" * 4
AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
PAGE = 100
DEEP = 10_000
WARMUP = 2  # seconds of load before measuring
PLANS = Plan.__table__

# --- Databases and the server -----------------------------------------------------------------------------


@contextlib.contextmanager
def scratch_database(backend: str, postgres_url: str, directory: Path) -> Iterator[str]:
    """A brand-new empty database: a SQLite file, or a PostgreSQL database dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'bench.db'}"
        return
    with scratch_postgres_database(postgres_url, "bench_plans") as url:
        yield url


@dataclass(frozen=True)
class Server:
    base: str
    pid: int  # the gunicorn master's
    log: Path

    def worker_boots(self) -> int:
        """Workers booted so far: gunicorn.conf.py recycles each after max_requests (and its jitter)."""
        return self.log.read_text().count("Booting worker")


@contextlib.contextmanager
def serving(database_url: str, workers: int, threads: int, log_path: Path) -> Iterator[Server]:
    """`flask setup` then gunicorn, as tests/e2e/test_server.py starts them (gunicorn also reads
    GUNICORN_CMD_ARGS from the environment, e.g. "--max-requests 0" to see the cost of recycling)."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PORT": str(port),
        "WEB_CONCURRENCY": str(workers),
        "THREADS": str(threads),
        "PLANNER_ADMIN_KEY": ADMIN_KEY,
    }
    subprocess.run(
        [BIN / SETUP_COMMAND[0], *SETUP_COMMAND[1:]], cwd=ROOT, env=env, check=True, capture_output=True
    )
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [BIN / SERVE_COMMAND[0], *SERVE_COMMAND[1:]], cwd=ROOT, env=env, stderr=log
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    requests.get(f"{base}/healthz", timeout=1)
                    break
                except requests.ConnectionError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"gunicorn did not start: {log_path.read_text()}") from None
                    time.sleep(0.2)
            yield Server(base, process.pid, log_path)
        finally:
            process.terminate()
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """--workers and --threads, by default as `make run` serves (Config's defaults)."""
    parser.add_argument("--workers", type=int, default=Config.web_concurrency, help="WEB_CONCURRENCY")
    parser.add_argument("--threads", type=int, default=Config.threads, help="THREADS per worker")


def call(method: str, url: str, expect: int, **kwargs) -> requests.Response:
    response = requests.request(method, url, headers=AUTH, timeout=30, **kwargs)
    if response.status_code != expect:
        raise RuntimeError(f"{method} {url}: {response.status_code} {response.text[:500]}")
    return response


def create_budget(base: str, name: str) -> str:
    """A USD budget of the bench organisation over 2025-2027, too large to refuse anything: its id."""
    body = {
        "organization": "bench",
        "name": name,
        "amount": "900000000000.00",
        "currency": "USD",
        "period_start": "2025-01-01T00:00:00Z",
        "period_end": "2028-01-01T00:00:00Z",
    }
    return call("POST", f"{base}/v1/budgets", 201, json=body).json()["id"]


def committed_plan(base: str, budget_id: str, start_at: str) -> str:
    """A 1e9-parameter plan on 8 H100s, labelled team alpha, committed against the budget: its id."""
    body = {
        "organization": "bench",
        "budget_id": budget_id,
        "params": 1e9,
        "tokens": 2e10,
        "hardware": "h100-sxm",
        "accelerators": 8,
        "start_at": start_at,
        "labels": {"team": "alpha"},
    }
    plan = call("POST", f"{base}/v1/plans", 201, json=body).json()["id"]
    call("POST", f"{base}/v1/plans/{plan}/commit", 200)
    return plan


@dataclass(frozen=True)
class Fixture:
    organization: str
    others: list[str]
    budget_id: str
    plan_id: str
    body: dict


def prepare(base: str, organizations: int) -> Fixture:
    """The bench organisation with a budget, and the other organisations sharing the history."""
    slugs = ["bench"] + [f"other-{n}" for n in range(1, organizations)]
    for slug in slugs:
        call("POST", f"{base}/v1/organizations", 201, json={"slug": slug, "name": slug.title()})
    now = datetime.now(UTC)
    budget = call(
        "POST",
        f"{base}/v1/budgets",
        201,
        json={
            "organization": "bench",
            "name": "Pretraining",
            "amount": "900000000000.00",
            "currency": "USD",
            "period_start": (now - timedelta(days=1)).isoformat(),
            "period_end": (now + timedelta(days=3650)).isoformat(),
            "allowed_hardware": ["h100-sxm"],
            "labels": {"cost_center": "ml-42"},
        },
    ).json()
    body = {
        "organization": "bench",
        "pf_days": 6000,
        "hardware": "h100-sxm",
        "accelerators": 1024,
        "law": "chinchilla-2022",
        "budget_id": budget["id"],
        "name": "6000 PF-days on 1024 H100",
        "labels": {"team": "alpha"},
    }
    plan = call("POST", f"{base}/v1/plans", 201, json=body).json()
    return Fixture("bench", slugs[1:], budget["id"], plan["id"], body)


# --- Throughput -------------------------------------------------------------------------------------------


@dataclass
class Throughput:
    name: str
    seconds: float
    latencies: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    sample_error: str | None = None
    cpu: CpuUse | None = None
    worker_boots: int = 0  # gunicorn workers booted meanwhile (recycled ones replaced)

    @property
    def per_second(self) -> float:
        return len(self.latencies) / self.seconds

    @property
    def errors(self) -> int:
        return sum(count for status, count in self.statuses.items() if not 200 <= status < 300)

    @property
    def server_ms_per_request(self) -> float | None:
        """Server CPU per request: what the server can sustain, whether or not the client kept up."""
        return None if self.cpu is None else self.cpu.server / self.per_second * 1e3

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


Send = Callable[[requests.Session], requests.Response]


def hammer(
    name: str,
    send: Send,
    *,
    clients: int,
    duration: float,
    warmup: float,
    server: Server,
) -> Throughput:
    """`clients` threads call `send` in a loop; requests that finish within the last `duration` seconds
    count (the first `warmup` seconds warm connections and workers up)."""
    start = time.perf_counter()
    measure_from, end = start + warmup, start + warmup + duration
    result = Throughput(name, duration)
    lock = threading.Lock()

    def client() -> None:
        latencies, statuses, sample = [], Counter(), None
        with requests.Session() as session:
            session.headers.update(AUTH)
            while (began := time.perf_counter()) < end:
                try:
                    response = send(session)
                    status = response.status_code
                    if not 200 <= status < 300 and sample is None:
                        sample = f"{status} {response.text[:300]}"
                except requests.RequestException as exc:
                    status, sample = 0, sample or repr(exc)
                finished = time.perf_counter()
                if measure_from <= finished <= end:
                    statuses[status] += 1
                    if 200 <= status < 300:
                        latencies.append(finished - began)
        with lock:
            result.latencies += latencies
            result.statuses.update(statuses)
            result.sample_error = result.sample_error or sample

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, measure_from - time.perf_counter()))
    meter, boots = CpuMeter(server.pid), server.worker_boots()
    for thread in threads:
        thread.join()
    result.cpu, result.worker_boots = meter.stop(), server.worker_boots() - boots
    return result


# The run every load asks about, unless it asks for "a new run each": then the requests go through NEW_RUNS
# budgets and cluster sizes in a shuffled order, over and over (the budgets 6% apart, so that each buys a
# model of another shape, times whole nodes around the 1 024 accelerators; each run's budget nudged by a
# hundredth of a percent per node step, so that no two runs size the same model). A worker's caches
# (performance.SEARCHES_REMEMBERED layout searches, wall_clock.SHAPES_REMEMBERED shapes) are least-recently
# used: a run comes back only after all the others, so a worker that serves even a tenth of the requests has
# forgotten it by then, and every request sizes its model and searches its layouts afresh. (The first cycle,
# of 2 000 runs in order, came back to a run within 1 000 requests at a worker serving half of them: most
# requests of a "new run" load were answered from the cache; measured in bench/RESULTS.md.)
NEW_RUN = " (a new run each)"
BUDGET_STEPS, NODE_STEPS = 100, 100
NEW_RUNS = BUDGET_STEPS * NODE_STEPS


def new_runs(pf_days: float, accelerators: int) -> Iterator[tuple[float, int]]:
    """(PF-days, accelerators) of NEW_RUNS different runs around the given one, over and over."""
    runs = list(itertools.product(range(BUDGET_STEPS), range(NODE_STEPS)))
    random.Random(0).shuffle(runs)  # the same order in every run of the bench
    for budget, nodes in itertools.cycle(runs):
        nudge = 1 + nodes * 1e-4
        yield (
            pf_days * 1.06 ** (budget - BUDGET_STEPS // 2) * nudge,
            accelerators + 8 * (nodes - NODE_STEPS // 2),
        )


@dataclass(frozen=True)
class Paired:
    """A load and the GET /healthz windows measured just before each of its rounds: on a shared machine whose
    speed drifts from minute to minute (seen here: /healthz between 380 and 570 requests/s in one hour), a
    share of /healthz's rate means something only against /healthz at the same time."""

    load: list[Throughput]  # one per round
    healthz: list[Throughput]  # the window just before each

    @property
    def shares(self) -> list[float]:
        return [
            load.per_second / healthz.per_second
            for load, healthz in zip(self.load, self.healthz, strict=True)
        ]

    @property
    def share(self) -> float:
        return statistics.median(self.shares)


def throughput(
    server: Server,
    fixture: Fixture,
    clients: int,
    duration: float,
    *,
    only: Sequence[str] = (),
    rounds: int = 1,
) -> list[Paired]:
    """Each load whose name contains one of `only` (all without), each preceded by a window of GET /healthz,
    `rounds` times over (round by round, so that every load meets the machine at several times); /healthz's
    own line pairs each of its windows with itself."""
    base, body = server.base, fixture.body
    run = {name: body[name] for name in ("pf_days", "hardware", "accelerators", "law")}
    estimate = {"params": 7e10, "tokens": 1.4e12, "hardware": "h100-sxm", "accelerators": 1024}
    runs = new_runs(body["pf_days"], body["accelerators"])
    lock = threading.Lock()

    def new_run(request: dict) -> dict:
        with lock:
            pf_days, accelerators = next(runs)
        return {**request, "pf_days": pf_days, "accelerators": accelerators}

    def post(path: str, request: Callable[[], dict], idempotent: bool = False) -> Send:
        def send(s: requests.Session) -> requests.Response:
            headers = {"Idempotency-Key": str(uuid.uuid4())} if idempotent else {}
            return s.post(f"{base}{path}", json=request(), headers=headers, timeout=30)

        return send

    loads: list[tuple[str, Send]] = [
        ("POST /v1/plans", post("/v1/plans", lambda: body)),
        ("POST /v1/plans + Idempotency-Key", post("/v1/plans", lambda: body, idempotent=True)),
        (
            "POST /v1/plans + Idempotency-Key" + NEW_RUN,
            post("/v1/plans", lambda: new_run(body), idempotent=True),
        ),
        ("POST /v1/allocations", post("/v1/allocations", lambda: run)),
        ("POST /v1/allocations" + NEW_RUN, post("/v1/allocations", lambda: new_run(run))),
        ("POST /v1/estimates", post("/v1/estimates", lambda: estimate)),
    ]
    loads = [(name, send) for name, send in loads if not only or any(part in name for part in only)]
    if not loads:  # e.g. `--only none`, for the pages alone
        return []

    def measure(name: str, send: Send) -> Throughput:
        return hammer(name, send, clients=clients, duration=duration, warmup=WARMUP, server=server)

    measured: dict[str, Paired] = {name: Paired([], []) for name, _ in loads}
    healthz: list[Throughput] = []
    for _ in range(rounds):
        for name, send in loads:
            healthz.append(measure("GET /healthz", lambda s: s.get(f"{base}/healthz", timeout=30)))
            measured[name].healthz.append(healthz[-1])
            measured[name].load.append(measure(name, send))
    return [Paired(healthz, healthz), *measured.values()]


def merged(windows: list[Throughput]) -> Throughput:
    """The windows of one load as one: their requests and time together, the cores busy averaged over them."""
    first = windows[0]
    result = Throughput(first.name, sum(window.seconds for window in windows))
    for window in windows:
        result.latencies += window.latencies
        result.statuses.update(window.statuses)
        result.sample_error = result.sample_error or window.sample_error
        result.worker_boots += window.worker_boots
    cpus = [window.cpu for window in windows]
    if all(cpu is not None for cpu in cpus):
        weights = [window.seconds / result.seconds for window in windows]
        result.cpu = CpuUse(
            *(
                sum(getattr(cpu, part) * weight for cpu, weight in zip(cpus, weights, strict=True))
                for part in ("client", "server", "elsewhere")
            )
        )
    return result


# --- Bulk-loading the history -----------------------------------------------------------------------------

# Varied per row; every other column is the template plan's stored value.
VARIED = ("id", "organization_id", "budget_id", "created_at")


def fill_history(
    engine: Engine, fixture: Fixture, total: int, span: timedelta = timedelta(days=730)
) -> tuple[int, float]:
    """Insert copies of the fixture's plan, older than every plan so far, until there are `total`.

    Row i (0 = newest) is created `span * (i + 1) / missing` before the oldest plan, belongs to organisation
    i mod n (the bench organisation first, with its budget_id; the others with none). Returns the
    number of rows inserted and the seconds it took.
    """
    with engine.connect() as connection:
        existing = connection.scalar(select(func.count()).select_from(PLANS))
        oldest = connection.scalar(select(func.min(PLANS.c.created_at)))
        slugs = [fixture.organization, *fixture.others]
        ids = dict(connection.execute(select(Organization.slug, Organization.id)).all())
        missing = total - existing
        if missing <= 0:
            return 0, 0.0
    organizations = [ids[slug] for slug in slugs]
    budget = uuid.UUID(fixture.budget_id)
    step = span / missing

    def rows() -> Iterator[tuple[uuid.UUID, uuid.UUID, uuid.UUID | None, datetime]]:
        for i in range(missing):
            n = i % len(organizations)
            id_, budget_id, created_at = uuid.uuid4(), budget if n == 0 else None, oldest - step * (i + 1)
            yield id_, organizations[n], budget_id, created_at

    started = time.perf_counter()
    if engine.dialect.name == "postgresql":
        copy_postgresql(engine, uuid.UUID(fixture.plan_id), rows())
    else:
        insert_sqlite(engine, uuid.UUID(fixture.plan_id), rows())
    return missing, time.perf_counter() - started


def copy_postgresql(
    engine: Engine, template: uuid.UUID, rows: Iterator[tuple], varied: Sequence[str] = VARIED
) -> None:
    """COPY FROM STDIN in text format: the template's own COPY line with the `varied` columns replaced."""
    batch = 20_000
    columns = [column.name for column in PLANS.columns]
    names = ", ".join(columns)
    positions = [columns.index(name) for name in varied]
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        line = io.BytesIO()
        with cursor.copy(f"COPY (SELECT {names} FROM plans WHERE id = '{template}') TO STDOUT") as copy:
            for data in copy:
                line.write(bytes(data))
        fields = line.getvalue().decode().rstrip("\n").split("\t")
        with cursor.copy(f"COPY plans ({names}) FROM STDIN") as copy:
            chunk: list[str] = []
            for values in rows:
                for position, value in zip(positions, values, strict=True):
                    # COPY's text format: a backslash starts an escape (JSON's own escapes among them)
                    fields[position] = r"\N" if value is None else str(value).replace("\\", "\\\\")
                chunk.append("\t".join(fields))
                if len(chunk) == batch:
                    copy.write("\n".join(chunk) + "\n")
                    chunk.clear()
            if chunk:
                copy.write("\n".join(chunk) + "\n")
        raw.commit()
        # What autovacuum would soon do after a bulk load: statistics for the planner, a visibility map.
        raw.driver_connection.autocommit = True
        try:
            cursor.execute("VACUUM (ANALYZE) plans")
        finally:
            raw.driver_connection.autocommit = False
    finally:
        raw.close()


SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


def _sqlite_value(value: object) -> object:
    if isinstance(value, uuid.UUID):
        return value.hex
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime(SQLITE_TIME)
    return value


def insert_sqlite(
    engine: Engine, template: uuid.UUID, rows: Iterator[tuple], varied: Sequence[str] = VARIED
) -> None:
    """executemany in one transaction, on the driver: the template's stored values, varied columns replaced
    in the same stored form (Uuid: 32 hex digits; UTC times: 'YYYY-MM-DD HH:MM:SS.ffffff'). No ANALYZE
    afterwards: the service never runs one on SQLite."""
    columns = [column.name for column in PLANS.columns]
    names = ", ".join(columns)
    positions = [columns.index(name) for name in varied]
    raw = engine.raw_connection()
    try:
        driver = raw.driver_connection
        stored = list(driver.execute(f"SELECT {names} FROM plans WHERE id = ?", (template.hex,)).fetchone())
        assert stored[0] == template.hex, "SQLite stores a Uuid as 32 hex digits"

        created_at = stored[columns.index("created_at")]
        # Naive on purpose: only the format is checked, and SQLite stores UTC times without an offset.
        assert datetime.strptime(created_at, SQLITE_TIME), f"SQLite stores times as {SQLITE_TIME}"  # noqa: DTZ007

        def stored_rows() -> Iterator[tuple]:
            values = list(stored)
            for row in rows:
                for position, value in zip(positions, row, strict=True):
                    values[position] = _sqlite_value(value)
                yield tuple(values)

        driver.execute("PRAGMA cache_size = -262144")  # 256 MiB: the random-uuid primary key stays cached
        driver.execute("BEGIN IMMEDIATE")
        driver.executemany(
            f"INSERT INTO plans ({names}) VALUES ({', '.join('?' * len(columns))})",
            stored_rows(),
        )
        driver.execute("COMMIT")
        driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()


# --- Pages ------------------------------------------------------------------------------------------------

Statement = tuple[str, object]  # SQL and parameters, as the driver receives them


@dataclass
class PageTiming:
    name: str
    depth: int
    http: float
    wrk: WrkTiming | None
    service: float
    sql: float
    row_value_sql: float
    statement: Statement
    row_value_statement: Statement


@dataclass(frozen=True)
class WrkTiming:
    """A page fetched over and over by wrk on one connection: its median latency, and the server's CPU per
    page meanwhile."""

    p50: float
    server_cpu: float | None


WRK_SECONDS = 5
WRK_ONE_CONNECTION = ("wrk", "-t1", "-c1", f"-d{WRK_SECONDS}s", "--latency")
_WRK_P50 = re.compile(r"^\s*50%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
_WRK_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def wrk_timing(server: Server, path_and_query: str) -> WrkTiming | None:
    """What a page costs over HTTP with a client that costs next to nothing: `requests` spends some 2.6 ms of
    its own reading an 84 KB page (bench/RESULTS.md). None without wrk (apt-get install wrk)."""
    if shutil.which("wrk") is None:
        return None
    meter = CpuMeter(server.pid)
    run = subprocess.run(
        [*WRK_ONE_CONNECTION, "-H", f"Authorization: {AUTH['Authorization']}", server.base + path_and_query],
        capture_output=True,
        text=True,
        check=True,
    )
    cpu = meter.stop()
    p50 = _WRK_P50.search(run.stdout)
    requests_ = re.search(r"^\s*(\d+) requests in", run.stdout, re.MULTILINE)
    if p50 is None or requests_ is None or "Non-2xx" in run.stdout:
        raise RuntimeError(f"wrk {path_and_query}: {run.stdout}")
    per_second = int(requests_.group(1)) / WRK_SECONDS
    server_cpu = None if cpu is None else cpu.server / per_second
    return WrkTiming(float(p50.group(1)) * _WRK_UNITS[p50.group(2)], server_cpu)


def cursor_at(engine: Engine, depth: int, organization_id: uuid.UUID | None) -> Cursor | None:
    """The cursor of the `depth`-th newest plan (one OFFSET query): the next page starts just below it."""
    if depth == 0:
        return None
    stmt = select(PLANS.c.created_at, PLANS.c.id)
    if organization_id is not None:
        stmt = stmt.where(PLANS.c.organization_id == organization_id)
    stmt = stmt.order_by(PLANS.c.created_at.desc(), PLANS.c.id.desc()).offset(depth - 1).limit(1)
    with engine.connect() as connection:
        created_at, id_ = connection.execute(stmt).one()
    return Cursor(created_at, id_)


def median_seconds(function: Callable[[], object], repeat: int) -> float:
    """Median of `repeat` timed runs after one warm-up run (3 runs only when one takes over a second)."""
    started = time.perf_counter()
    function()  # warm: caches, prepared statements, pages in memory
    if time.perf_counter() - started > 1:
        repeat = min(repeat, 3)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def caught_statement(engine: Engine, function: Callable[[], object]) -> Statement:
    """The query on `plans` that `function` sends, caught on its way to the driver."""
    caught: list[Statement] = []

    def catch(_conn, _cursor, statement, parameters, _context, _executemany):
        caught.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", catch)
    try:
        function()
    finally:
        event.remove(engine, "before_cursor_execute", catch)
    return next(s for s in caught if "FROM plans" in s[0])


def bare_seconds(engine: Engine, statement: Statement, repeat: int) -> float:
    """Median time to execute `statement` and fetch its rows on the driver alone: no SQLAlchemy, no ORM,
    and JSON columns left as text (psycopg would otherwise parse them)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if engine.dialect.name == "postgresql":
            from psycopg.types.string import TextLoader  # noqa: PLC0415 -- only with PostgreSQL

            for name in ("json", "jsonb"):
                cursor.adapters.register_loader(name, TextLoader)

        def run() -> None:
            cursor.execute(*statement)
            assert len(cursor.fetchall()) == PAGE + 1
            raw.rollback()

        return median_seconds(run, repeat)
    finally:
        raw.close()


def row_value_select(organization_id: uuid.UUID | None, after: Cursor | None):
    """Not the service's query: the same page with the organisation's id resolved first and the keyset as a
    row-value comparison, (created_at, id) < (:created_at, :id), which both databases can seek an index on.
    The columns a page reads: all but the plan's documents."""
    stmt = select(
        *(column for column in PLANS.columns if column.name not in ("inputs", "snapshot", "result"))
    )
    if organization_id is not None:
        stmt = stmt.where(PLANS.c.organization_id == organization_id)
    if after is not None:
        stmt = stmt.where(
            tuple_(PLANS.c.created_at, PLANS.c.id)
            < tuple_(
                bindparam("after_created_at", after.created_at, type_=PLANS.c.created_at.type),
                bindparam("after_id", after.id, type_=PLANS.c.id.type),
            )
        )
    return stmt.order_by(PLANS.c.created_at.desc(), PLANS.c.id.desc()).limit(PAGE + 1)


def time_page(
    server: Server, engine: Engine, name: str, *, depth: int, organization: str | None, repeat: int
) -> PageTiming:
    base = server.base
    organization_id = organization_id_of(engine, organization)
    after = cursor_at(engine, depth, organization_id)
    query: dict[str, object] = {"limit": PAGE}
    if organization:
        query["organization"] = organization
    if after:
        query["cursor"] = after.encode()

    with requests.Session() as session:
        session.headers.update(AUTH)

        def get() -> requests.Response:  # the whole body is read; parsing it is the client's business
            response = session.get(f"{base}/v1/plans", params=query, timeout=120)
            if response.status_code != 200:
                raise RuntimeError(f"GET /v1/plans {query}: {response.status_code} {response.text[:300]}")
            return response

        if len(get().json()["items"]) != PAGE:
            raise RuntimeError(f"GET /v1/plans {query}: a short page")
        http = median_seconds(get, repeat)
    wrk = wrk_timing(server, f"/v1/plans?{urlencode(query)}")

    where = plans.PlanFilter(organization=organization)

    reader = reading(engine)  # as the service reads for a GET (SQLite: BEGIN DEFERRED; PostgreSQL: none)

    def service_call() -> None:
        with Session(reader) as session:
            page = plans.list_plans(session, where, scope=None, limit=PAGE, after=after)
            assert len(page.items) == PAGE

    statement = caught_statement(engine, service_call)
    service = median_seconds(service_call, repeat)
    sql = bare_seconds(engine, statement, repeat)

    alternative = row_value_select(organization_id, after)

    def run_alternative() -> None:
        with reader.connect() as connection:
            assert len(connection.execute(alternative).all()) == PAGE + 1

    row_value_statement = caught_statement(engine, run_alternative)
    row_value_sql = bare_seconds(engine, row_value_statement, repeat)
    return PageTiming(name, depth, http, wrk, service, sql, row_value_sql, statement, row_value_statement)


def organization_id_of(engine: Engine, slug: str | None) -> uuid.UUID | None:
    if slug is None:
        return None
    with engine.connect() as connection:
        return connection.scalar(select(Organization.id).where(Organization.slug == slug))


def explain(engine: Engine, statement: Statement) -> str:
    sql, parameters = statement
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if engine.dialect.name == "postgresql":
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, parameters)
            lines = [row[0] for row in cursor.fetchall()]
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, parameters)
            lines = [row[-1] for row in cursor.fetchall()]
        raw.rollback()
        return "\n".join(lines)
    finally:
        raw.close()


def pages(
    server: Server, engine: Engine, fixture: Fixture, repeat: int
) -> tuple[list[PageTiming], list[str]]:
    """First page, 10 000 deep and as deep as the history goes, overall and within the bench organisation;
    EXPLAIN of the deep pages (the service's query, and the row-value form at the deepest)."""
    organization_id = organization_id_of(engine, fixture.organization)
    with engine.connect() as connection:
        total = connection.scalar(select(func.count()).select_from(PLANS))
        in_organization = connection.scalar(
            select(func.count()).select_from(PLANS).where(PLANS.c.organization_id == organization_id)
        )
    timings, explained = [], []
    for organization, count in ((None, total), (fixture.organization, in_organization)):
        label = "GET /v1/plans?limit=100" + (f"&organization={organization}" if organization else "")
        depths = [0, DEEP, count - DEEP] if count >= 2 * DEEP + PAGE else [0, count // 2]
        for depth in depths:
            timing = time_page(server, engine, label, depth=depth, organization=organization, repeat=repeat)
            timings.append(timing)
            print(
                f"  {label:<48} depth {depth:>9,}: HTTP {ms(timing.http)}, wrk {wrk_note(timing.wrk)}, "
                f"service {ms(timing.service)}, "
                f"SQL {ms(timing.sql)}, row-value SQL {ms(timing.row_value_sql)}",
                flush=True,
            )
            if depth:
                explained.append(f"{label}, {depth:,} deep:\n{explain(engine, timing.statement)}")
        explained.append(
            f"row-value form of {label}, {depths[-1]:,} deep:\n{explain(engine, timing.row_value_statement)}"
        )
    return timings, explained


# --- Reporting --------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def wrk_note(timing: WrkTiming | None) -> str:
    if timing is None:
        return "n/a (no wrk)"
    cpu = "n/a" if timing.server_cpu is None else ms(timing.server_cpu)
    return f"{ms(timing.p50)} (server CPU {cpu})"


def round_note(load: Throughput) -> str:
    """A round's rate, server CPU per request and workers booted in it: a round unlike the others shows
    whether the server worked harder or waited, and whether a worker was being replaced."""
    cpu = load.server_ms_per_request
    boots = f", {load.worker_boots} booted" if load.worker_boots else ""
    return f"{load.per_second:.0f}/s, " + ("CPU n/a" if cpu is None else f"{cpu:.2f} ms") + boots


def cpu_note(load: Throughput) -> str:
    if load.cpu is None:
        return "CPU n/a"
    return (
        f"server CPU {load.server_ms_per_request:.2f} ms/request; cores busy: client {load.cpu.client:.2f}, "
        f"server {load.cpu.server:.2f}, elsewhere {load.cpu.elsewhere:.0%} of the machine"
    )


@dataclass
class BackendResult:
    backend: str
    load: list[Paired]
    loaded: int
    load_seconds: float
    database_bytes: int
    pages: list[PageTiming]
    explained: list[str]


def database_size(engine: Engine) -> int:
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            return connection.scalar(text("SELECT pg_database_size(current_database())"))
    path = Path(engine.url.database)
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def run_backend(backend: str, args: argparse.Namespace) -> BackendResult:
    print(f"\n== {backend} ==", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="bench-plans-") as directory,
        scratch_database(backend, args.postgres_url, Path(directory)) as database_url,
        serving(database_url, args.workers, args.threads, Path(directory) / "server.log") as server,
    ):
        fixture = prepare(server.base, args.organizations)
        load = throughput(server, fixture, args.clients, args.duration, only=args.only, rounds=args.rounds)
        if not load:
            print(f"  no throughput load's name contains any of {', '.join(args.only)}", flush=True)
        for paired in load:
            result = merged(paired.load)
            shares = ", ".join(
                f"{share:.2f} ({round_note(load)})"
                for share, load in zip(paired.shares, paired.load, strict=True)
            )
            print(
                f"  {result.name:<34} {result.per_second:8.1f} req/s  p50 {ms(result.quantile(0.5))}"
                f"  p99 {ms(result.quantile(0.99))}  non-2xx {result.errors}  "
                f"workers booted {result.worker_boots}  {cpu_note(result)}; vs /healthz before: {shares}",
                flush=True,
            )
            if result.errors:
                print(f"    statuses {dict(result.statuses)}; e.g. {result.sample_error}", flush=True)
        if not args.plans:
            return BackendResult(backend, load, 0, 0.0, 0, [], [])
        engine = create_db_engine(Config(database_url=database_url, db_statement_timeout_ms=0))
        try:
            loaded, seconds = fill_history(engine, fixture, args.plans)
            size = database_size(engine)
            print(
                f"  loaded {loaded:,} plans in {seconds:.0f} s ({loaded / max(seconds, 1e-9):,.0f}/s); "
                f"database {size / 2**30:.2f} GiB",
                flush=True,
            )
            timings, explained = pages(server, engine, fixture, args.repeat)
        finally:
            engine.dispose()
        for text_ in explained:
            print(f"  EXPLAIN {text_}".replace("\n", "\n    "), flush=True)
    return BackendResult(backend, load, loaded, seconds, size, timings, explained)


def report(results: list[BackendResult], args: argparse.Namespace) -> None:
    print(f"\nmachine: {describe()}")
    print(f"server: gunicorn gthread, {args.workers} workers x {args.threads} threads")
    if any(result.load for result in results):  # none with `--only none`
        report_loads(results, args)
    if args.plans:  # none with `--plans 0`
        report_pages(results, args)


def report_loads(results: list[BackendResult], args: argparse.Namespace) -> None:
    print(
        f"loads: {args.clients} client threads in one process on the same cores as the server; "
        f"{args.duration:g} s per load after {WARMUP} s of "
        f"warm-up, each just after a window of /healthz, {args.rounds} round(s); vs /healthz: the median "
        "over the rounds of the load's rate over the window's before it"
    )
    print(
        "\n| backend | request | req/s | p50 | p99 | non-2xx | vs /healthz | server CPU per request | "
        "cores busy: client, server | workers booted | other work |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for result in results:
        for paired in result.load:
            load = merged(paired.load)
            cpu = (
                ("n/a",) * 3
                if load.cpu is None
                else (
                    ms(load.server_ms_per_request / 1e3),
                    f"{load.cpu.client:.2f}, {load.cpu.server:.2f}",
                    f"{load.cpu.elsewhere:.0%}",
                )
            )
            print(
                f"| {result.backend} | {load.name} | {load.per_second:.0f} | {ms(load.quantile(0.5))} | "
                f"{ms(load.quantile(0.99))} | {load.errors} | {paired.share:.2f} | {cpu[0]} | "
                f"{cpu[1]} | {load.worker_boots} | {cpu[2]} |"
            )


def report_pages(results: list[BackendResult], args: argparse.Namespace) -> None:
    print(
        f"\n| backend | page (median of {args.repeat}) | depth | HTTP (requests) | HTTP (wrk, p50) | "
        "service call | SQL on the driver | same, row-value keyset |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for result in results:
        for timing in result.pages:
            print(
                f"| {result.backend} | {timing.name} | {timing.depth:,} | {ms(timing.http)} | "
                f"{wrk_note(timing.wrk)} | {ms(timing.service)} | {ms(timing.sql)} | "
                f"{ms(timing.row_value_sql)} |"
            )
    print()
    for result in results:
        print(
            f"{result.backend}: history of {args.plans:,} plans ({result.loaded:,} bulk-loaded in "
            f"{result.load_seconds:.0f} s), database {result.database_bytes / 2**30:.2f} GiB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per throughput load")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    parser.add_argument(
        "--rounds", type=int, default=1, help="times each load is measured, each just after /healthz"
    )
    parser.add_argument(
        "--plans", type=int, default=1_000_000, help="size of the plan history (0: throughput only)"
    )
    parser.add_argument("--organizations", type=int, default=10, help="organisations sharing the history")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per page (median)")
    add_server_arguments(parser)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument(
        "--only",
        type=lambda text: text.split(","),
        default=(),
        help="throughput loads whose names contain one of these (comma-separated); /healthz runs before "
        "each; none matching (--only none): no load, the pages alone",
    )
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    print(f"machine: {describe()}", flush=True)
    print(f"load average before: {load_average()}", flush=True)
    results = [run_backend(backend, args) for backend in args.backends.split(",")]
    report(results, args)
    print(f"load average after: {load_average()}")


def load_average() -> str:
    """Other work on a shared machine shows here: figures taken under load are not comparable."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()

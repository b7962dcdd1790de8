"""The reliability suite's world: a private PostgreSQL cluster, a real gunicorn on it, and a load of clients
that remember every write the server acknowledged.

The cluster is this suite's own (initdb in a temporary directory, on a free port), so that a test may stop,
restart or crash it without disturbing anything else on the machine. It needs PostgreSQL's server programs
(`initdb`, `pg_ctl`): without them the suite is skipped, except in CI (`CI` set), where that is a failure.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path

import pytest
import requests
from sqlalchemy import create_engine, text

from tests.commands import ROOT, SERVE_COMMAND, SETUP_COMMAND, free_port

BIN = Path(sys.executable).parent
ADMIN_KEY = "cpk_reliable_" + "reliability-secret-" * 3
AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
ORGANIZATION = "reliable"
START_AT = "2027-02-01T00:00:00Z"


def _postgres_programs() -> Path | None:
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb")]
    return Path(found[-1]).parent if found[-1] else None


def _as_postgres_user(command: list[str]) -> list[str]:
    """PostgreSQL will not run as root: as root, run its programs as the `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # The command name (2nd field) is in parentheses and may hold spaces: the parent pid follows it.
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return sorted(found)


@dataclass
class Cluster:
    """A PostgreSQL server of our own: a data directory, a port, and a socket directory."""

    programs: Path
    directory: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/planner"

    def _ctl(self, *arguments: str) -> None:
        command = [str(self.programs / "pg_ctl"), "-D", str(self.directory / "data"), "-w", *arguments]
        subprocess.run(_as_postgres_user(command), check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.directory / "server.log"), "start")

    def stop(self, mode: str = "fast") -> None:
        """`fast` ends every session (their transactions roll back); `immediate` is a crash."""
        self._ctl("-m", mode, "stop")

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The server stopped whole (SIGSTOP to the postmaster, then to every process it started), as on a
        frozen host: its TCP connections stay open and the kernel still acknowledges what clients send and
        answers their keepalives, but nothing answers a query, a connection or a cancel request. SIGCONT
        afterwards, whatever happened."""
        postmaster = int((self.directory / "data" / "postmaster.pid").read_text().split()[0])
        stopped = []
        try:
            os.kill(postmaster, signal.SIGSTOP)
            stopped.append(postmaster)
            for pid in children(postmaster):  # a stopped postmaster starts no more of them
                with contextlib.suppress(ProcessLookupError):  # a backend that has just exited
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            yield
        finally:
            for pid in reversed(stopped):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    programs = _postgres_programs()
    if programs is None:
        if os.environ.get("CI"):
            pytest.fail("the reliability suite needs PostgreSQL's server programs (initdb, pg_ctl)")
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
    directory = Path(tempfile.mkdtemp(prefix="planner-reliability-"))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    initdb = [str(programs / "initdb"), "-D", str(directory / "data"), "-U", "postgres", "--auth=trust"]
    subprocess.run(_as_postgres_user(initdb), check=True, capture_output=True, timeout=120)
    found = Cluster(programs, directory, free_port())
    found.start()
    admin = create_engine(found.url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text("CREATE DATABASE planner"))
    admin.dispose()
    try:
        yield found
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            found.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)


# --- The server ----------------------------------------------------------------------------------------


class Server:
    """gunicorn with the repository's config, in a process group of its own (so that it can be killed
    whole, master and workers, as a host crash would)."""

    def __init__(self, database_url: str, log_path: Path, env: dict[str, str] | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "PORT": str(self.port),
            "WEB_CONCURRENCY": "2",
            "THREADS": "8",
            "PLANNER_ADMIN_KEY": ADMIN_KEY,
            "PROMETHEUS_MULTIPROC_DIR": str(log_path.parent / "metrics"),
            **(env or {}),
        }
        self.process: subprocess.Popen | None = None

    def setup(self) -> None:
        command = [str(BIN / SETUP_COMMAND[0]), *SETUP_COMMAND[1:]]
        subprocess.run(command, cwd=ROOT, env=self.env, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                [str(BIN / SERVE_COMMAND[0]), *SERVE_COMMAND[1:]],
                cwd=ROOT,
                env=self.env,
                stderr=log,
                start_new_session=True,
            )
        if not serving_within(self.base, self.process, seconds=30):
            pytest.fail(f"gunicorn did not become ready: {self.log_path.read_text()[-3000:]}")

    def workers(self) -> list[int]:
        """gunicorn's worker processes: the same ones later means that none was replaced."""
        return children(self.process.pid)

    def crash(self) -> None:
        """SIGKILL to the master and every worker at once: nothing gets to clean up."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def call(self, method: str, path: str, expect: int, **kwargs) -> dict:
        response = requests.request(method, f"{self.base}{path}", headers=AUTH, timeout=30, **kwargs)
        assert response.status_code == expect, response.text
        return response.json()


def serving_within(base: str, process: subprocess.Popen, seconds: float) -> bool:
    """Whether `base` answers /readyz with 200 within `seconds`, while `process` (what serves it) runs."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if requests.get(f"{base}/readyz", timeout=2).status_code == 200:
                return True
        except requests.RequestException:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.2)


@contextlib.contextmanager
def serving(cluster: Cluster, directory: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    """A fresh schema on the cluster (the previous one is dropped), set up and served with settings `env`."""
    engine = create_engine(cluster.url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    server = Server(cluster.url, directory / "server.log", env)
    server.setup()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(cluster, tmp_path) -> Iterator[Server]:
    with serving(cluster, tmp_path) as server:
        yield server


@pytest.fixture(scope="module")
def shared_server(cluster, tmp_path_factory) -> Iterator[Server]:
    """One server for a whole module, for tests that only send requests (and may leave anything behind)."""
    with serving(cluster, tmp_path_factory.mktemp("shared")) as server:
        yield server


# --- The load ------------------------------------------------------------------------------------------


@dataclass
class Ledger:
    """What the clients were told: the plans created (201) and committed (200), and every status seen."""

    created: dict[str, dict] = field(default_factory=dict)
    committed: set[str] = field(default_factory=set)
    awaiting_approval: set[str] = field(default_factory=set)  # commits answered 202 (budgets with approval)
    statuses: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)  # no answer at all: connection refused or reset
    failed_at: list[float] = field(default_factory=list)  # when each of them happened (seconds since start)
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, status)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, started: float, status: int) -> None:
        with self.lock:
            self.statuses[status] += 1
            self.timeline.append((time.monotonic() - started, status))

    def server_errors(self, allowed: frozenset[int] = frozenset()) -> dict[int, int]:
        return {status: n for status, n in self.statuses.items() if status >= 500 and status not in allowed}


def prepare_world(server: Server, budgets: int = 4) -> list[str]:
    """The organisation and its budgets (one small, so that some commits are refused): their ids."""
    server.call("POST", "/v1/organizations", 201, json={"slug": ORGANIZATION, "name": "Reliable"})
    amounts = ["1000000000.00"] * (budgets - 1) + ["2000.00"]
    return [
        server.call(
            "POST",
            "/v1/budgets",
            201,
            json={
                "organization": ORGANIZATION,
                "name": f"Budget {n}",
                "amount": amount,
                "currency": "USD",
                "period_start": "2027-01-01T00:00:00Z",
                "period_end": "2029-01-01T00:00:00Z",
            },
        )["id"]
        for n, amount in enumerate(amounts)
    ]


def run_load(
    server: Server,
    budgets: list[str],
    *,
    seconds: float,
    clients: int = 32,
    during: Callable[[float], None] | None = None,
    keys: list[str] | None = None,
) -> Ledger:
    """`clients` threads for `seconds`, each a loop of random calls: create a plan (with an
    Idempotency-Key), commit one of its drafts, read one, list, report. `during(elapsed)` runs on the calling
    thread meanwhile, every 0.1 s (to crash or stop things). `server` is anything with a `base` URL (a load
    balancer, say); client n sends `keys[n % len(keys)]` if given, else the admin key."""
    ledger = Ledger()
    stop = threading.Event()
    started = time.monotonic()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        drafts: list[str] = []
        with requests.Session() as http:
            http.headers.update(
                AUTH if keys is None else {"Authorization": f"Bearer {keys[seed % len(keys)]}"}
            )
            while not stop.is_set():
                action = rng.choices(("create", "commit", "read", "list", "report"), (4, 2, 2, 1, 1))[0]
                if action == "commit" and not drafts:
                    action = "create"
                try:
                    _act(http, server.base, action, rng, budgets, drafts, ledger, started)
                except requests.RequestException as error:
                    with ledger.lock:
                        ledger.failures[type(error).__name__] += 1
                        ledger.failed_at.append(time.monotonic() - started)
                    time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    while (elapsed := time.monotonic() - started) < seconds:
        if during is not None:
            during(elapsed)
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    return ledger


def _act(http, base, action, rng, budgets, drafts, ledger: Ledger, started: float) -> None:
    if action == "create":
        body = {
            "organization": ORGANIZATION,
            "params": rng.choice([1e8, 3e8, 1e9]),
            "tokens": rng.choice([2e9, 6e9, 2e10]),
            "hardware": "h100-sxm",
            "accelerators": rng.choice([8, 16, 64]),
            "start_at": START_AT,
            "budget_id": rng.choice(budgets),
            "labels": {"team": rng.choice(["alpha", "beta"])},
        }
        response = http.post(
            f"{base}/v1/plans", json=body, headers={"Idempotency-Key": str(uuid.uuid4())}, timeout=30
        )
        ledger.record(started, response.status_code)
        if response.status_code == 201:
            plan = response.json()
            with ledger.lock:
                ledger.created[plan["id"]] = plan
            drafts.append(plan["id"])
    elif action == "commit":
        plan_id = drafts.pop(rng.randrange(len(drafts)))
        response = http.post(
            f"{base}/v1/plans/{plan_id}/commit", headers={"Idempotency-Key": str(uuid.uuid4())}, timeout=30
        )
        ledger.record(started, response.status_code)
        if response.status_code in (200, 202):
            with ledger.lock:
                (ledger.committed if response.status_code == 200 else ledger.awaiting_approval).add(plan_id)
    elif action == "read":
        with ledger.lock:
            known = list(ledger.created)[-50:]
        path = f"/v1/plans/{rng.choice(known)}" if known else "/v1/plans"
        ledger.record(started, http.get(f"{base}{path}", timeout=30).status_code)
    elif action == "list":
        response = http.get(f"{base}/v1/plans?organization={ORGANIZATION}", timeout=30)
        ledger.record(started, response.status_code)
    else:
        query = "from=2027-01-01T00:00:00Z&to=2028-01-01T00:00:00Z&granularity=month&group_by=budget"
        ledger.record(started, http.get(f"{base}/v1/reports/costs?{query}", timeout=30).status_code)


# --- What the database must hold -----------------------------------------------------------------------


def check_nothing_lost_or_half_written(database_url: str, ledger: Ledger) -> None:
    """Every acknowledged plan is stored whole, every acknowledged commit holds, and each budget's committed
    figures equal both its committed plans and its ledger."""
    engine = create_engine(database_url)
    with engine.connect() as connection:
        plans = {
            str(row.id): row
            for row in connection.execute(
                text("SELECT id, status, cost, currency, inputs, snapshot, result, committed_at FROM plans")
            )
        }
        budgets = connection.execute(
            text(
                """
                SELECT b.id, b.committed,
                       (SELECT coalesce(sum(p.cost), 0) FROM plans p
                         WHERE p.budget_id = b.id AND p.status = 'committed') AS plans_sum,
                       (SELECT coalesce(sum(l.amount), 0) FROM budget_ledger l WHERE l.budget_id = b.id)
                         AS ledger_sum,
                       (SELECT count(*) FROM budget_ledger l
                         LEFT JOIN plans p ON p.id = l.plan_id WHERE l.budget_id = b.id AND p.id IS NULL)
                         AS orphans
                FROM budgets b
                """
            )
        ).all()
    engine.dispose()
    missing = set(ledger.created) - set(plans)
    assert not missing, f"{len(missing)} acknowledged plans are not in the database"
    for plan_id, row in plans.items():
        assert all((row.inputs, row.snapshot, row.result)), f"plan {plan_id} lacks a document"
        assert row.cost is not None, f"plan {plan_id} has no cost"
        if row.status in ("draft", "committed"):
            assert (row.status == "committed") == (row.committed_at is not None), f"plan {plan_id} is torn"
    uncommitted = [plan_id for plan_id in ledger.committed if plans[plan_id].status != "committed"]
    assert not uncommitted, f"{len(uncommitted)} acknowledged commits did not hold"
    for budget in budgets:
        assert budget.committed == budget.plans_sum == budget.ledger_sum, (
            f"budget {budget.id} does not balance"
        )
        assert budget.orphans == 0

"""The write path's mechanisms, each against the path without it, in one run (issue 47).

    .venv/bin/python -m bench.bench_write_path --variant with=HEAD~6 --variant plain=HEAD \
        [--variant ...] [--backends sqlite,postgresql] [--duration 10] [--rounds 3] [--connections 6]

Each `--variant LABEL=REVISION` is a revision of this repository, checked out into a scratch worktree
(`git worktree add --detach`, removed afterwards). For each backend every variant is served at once, each
by its own gunicorn with the repository's config on its own scratch database (a SQLite file, or a PostgreSQL
database dropped afterwards). Then, round after round, each load runs against each variant in turn (the
variants' order rotated every round, so that none always runs first after another's load), with wrk on
`--connections` kept-alive connections for `--duration` seconds after a warm-up. So the variants meet the
same machine at nearly the same time: on a shared machine whose speed drifts from minute to minute, that is
what makes their figures comparable. Medians over the rounds are printed as markdown for
docs/decisions/0002-write-path.md: requests/s, p50 and p99 latency, and the server's CPU per request
(gunicorn's processes and PostgreSQL's; what the server would sustain whether or not the client kept up).

The loads, as bench/bench_plans.py has them:

* `plan`: POST /v1/plans of one run (6 000 PF-days on 1 024 H100s, the law's allocation, charged to a
  budget); its layout search is remembered by each worker after the first, so the write path dominates.
* `plan+key`: the same with a fresh Idempotency-Key each, as orchestration systems send them.
* `page`: GET /v1/plans?limit=100, the newest page of the plans the loads made (thousands).
* `plan/id`: GET /v1/plans/{id}.
* `allocation`: POST /v1/allocations of the same run: a request that only reads (its key, the hardware).

Needs wrk (apt-get install wrk). Not a test: nothing asserts on time; any non-2xx answer is reported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from bench.bench_plans import ADMIN_KEY, AUTH, call, create_budget
from bench.machine import CpuMeter, describe
from tests.commands import ROOT, free_port, scratch_postgres_database

BIN = Path(sys.executable).parent
LOADS = ("plan", "plan+key", "page", "plan/id", "allocation")
WARMUP_SECONDS = 2


@dataclass(frozen=True)
class Variant:
    label: str
    revision: str
    commit: str
    tree: Path


@dataclass(frozen=True)
class Served:
    variant: Variant
    base: str
    pid: int
    plan_body: dict
    plan_id: str


@dataclass(frozen=True)
class Figures:
    per_second: float
    p50_ms: float
    p99_ms: float
    server_ms: float | None  # server CPU per request
    errors: int


@contextlib.contextmanager
def checked_out(specs: list[str], directory: Path) -> Iterator[list[Variant]]:
    variants = []
    try:
        for spec in specs:
            label, _, revision = spec.partition("=")
            commit = _git("rev-parse", "--short", revision)
            tree = directory / f"tree-{len(variants)}"
            _git("worktree", "add", "--detach", str(tree), commit)
            variants.append(Variant(label, revision, commit, tree))
        yield variants
    finally:
        for variant in variants:
            _git("worktree", "remove", "--force", str(variant.tree))


def _git(*arguments: str) -> str:
    return subprocess.run(
        ["git", *arguments], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


@contextlib.contextmanager
def database(backend: str, postgres_url: str, directory: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'bench.db'}"
        return
    with scratch_postgres_database(postgres_url, "bench_write_path") as url:
        yield url


@contextlib.contextmanager
def serving(variant: Variant, database_url: str, log: Path) -> Iterator[tuple[str, int]]:
    """`flask setup` and gunicorn, as `make run` starts them, from the variant's tree and on its code."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(variant.tree),
        "DATABASE_URL": database_url,
        "PORT": str(port),
        "PLANNER_ADMIN_KEY": ADMIN_KEY,
    }
    if database_url.startswith("postgresql"):
        # Every variant's workers share the server's 100 connections: with the default pool (5, and 5 more
        # on demand, per worker) ten variants' pools filled them, and requests got 503s for a connection.
        env["DB_POOL_SIZE"] = "2"
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    subprocess.run(
        [BIN / "flask", "--app", "service", "setup"],
        cwd=variant.tree,
        env=env,
        check=True,
        capture_output=True,
    )
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [BIN / "gunicorn", "-c", "gunicorn.conf.py"], cwd=variant.tree, env=env, stderr=stderr
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    requests.get(f"{base}/healthz", timeout=5)
                    break
                except requests.RequestException:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"{variant.label}: gunicorn did not start: {log.read_text()}"
                        ) from None
                    time.sleep(0.2)
            yield base, process.pid
        finally:
            process.terminate()
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def prepare(base: str) -> tuple[dict, str]:
    """The bench organisation and a budget it charges plans to; the plan's body and one plan's id."""
    call("POST", f"{base}/v1/organizations", 201, json={"slug": "bench", "name": "Bench"})
    body = {
        "organization": "bench",
        "pf_days": 6000,
        "hardware": "h100-sxm",
        "accelerators": 1024,
        "law": "chinchilla-2022",
        "budget_id": create_budget(base, "Pretraining"),
        "name": "6000 PF-days on 1024 H100",
        "labels": {"team": "alpha"},
    }
    return body, call("POST", f"{base}/v1/plans", 201, json=body).json()["id"]


def wrk_script(load: str, served: Served, directory: Path) -> tuple[str, Path]:
    """The URL wrk calls for `load`, and its Lua script (method, headers, body; a fresh key each)."""
    headers = {**AUTH, "Content-Type": "application/json"}
    lines = [f"wrk.headers[{json.dumps(name)}] = {json.dumps(value)}" for name, value in headers.items()]
    url = served.base
    if load in ("plan", "plan+key", "allocation"):
        body = served.plan_body
        if load == "allocation":
            body = {
                name: value
                for name, value in body.items()
                if name in ("pf_days", "hardware", "accelerators", "law")
            }
        url += "/v1/allocations" if load == "allocation" else "/v1/plans"
        lines += ['wrk.method = "POST"', f"wrk.body = {json.dumps(json.dumps(body))}"]
    elif load == "page":
        url += "/v1/plans?limit=100"
    else:
        url += f"/v1/plans/{served.plan_id}"
    if load == "plan+key":
        lines += [
            "local counter = 0",
            'local prefix = string.format("%x-%x", os.time(), math.random(0, 2^30))',
            "request = function()",
            "  counter = counter + 1",
            '  wrk.headers["Idempotency-Key"] = prefix .. "-" .. counter',
            "  return wrk.format()",
            "end",
        ]
    script = directory / f"{load.replace('/', '_').replace('+', '_')}.lua"
    script.write_text("\n".join(lines) + "\n")
    return url, script


def run_wrk(url: str, script: Path, connections: int, seconds: float, pid: int) -> Figures:
    command = ["wrk", "-t1", f"-c{connections}", "--latency", "-s", str(script)]
    subprocess.run([*command, f"-d{WARMUP_SECONDS}s", url], check=True, capture_output=True)
    meter = CpuMeter(pid)
    output = subprocess.run(
        [*command, f"-d{seconds:g}s", url], check=True, capture_output=True, text=True
    ).stdout
    cpu = meter.stop()
    per_second = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return Figures(
        per_second=per_second,
        p50_ms=_latency_ms(output, "50%"),
        p99_ms=_latency_ms(output, "99%"),
        server_ms=None if cpu is None or not per_second else cpu.server / per_second * 1e3,
        errors=int(errors.group(1)) if errors else 0,
    )


def _latency_ms(output: str, quantile: str) -> float:
    value, unit = re.search(rf"^\s+{quantile}\s+([\d.]+)(us|ms|s)\s*$", output, re.MULTILINE).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def bench_backend(
    backend: str, variants: list[Variant], arguments: argparse.Namespace, directory: Path
) -> dict:
    """{(load, label): [Figures per round]} for one backend."""
    results: dict[tuple[str, str], list[Figures]] = {}
    with contextlib.ExitStack() as stack:
        served = []
        for variant in variants:
            scratch = directory / f"{backend}-{variant.label}"
            scratch.mkdir()
            url = stack.enter_context(database(backend, arguments.postgres_url, scratch))
            base, pid = stack.enter_context(serving(variant, url, scratch / "gunicorn.log"))
            body, plan_id = prepare(base)
            served.append(Served(variant, base, pid, body, plan_id))
        for round_ in range(arguments.rounds):
            for load in arguments.loads:
                shift = round_ % len(served)
                for one in served[shift:] + served[:shift]:
                    url, script = wrk_script(load, one, directory)
                    figures = run_wrk(url, script, arguments.connections, arguments.duration, one.pid)
                    results.setdefault((load, one.variant.label), []).append(figures)
                    print(
                        f"  {backend} round {round_ + 1} {load:<10} {one.variant.label:<14} "
                        f"{figures.per_second:7.1f}/s",
                        file=sys.stderr,
                    )
    return results


def report(backend: str, variants: list[Variant], loads: list[str], results: dict) -> None:
    print(f"\n### {backend}\n")
    print("| load | variant | requests/s | p50 ms | p99 ms | server CPU ms/request | non-2xx |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for load in loads:
        for variant in variants:
            rounds = results[(load, variant.label)]
            cpu = [figures.server_ms for figures in rounds if figures.server_ms is not None]
            print(
                f"| {load} | {variant.label} | {statistics.median(f.per_second for f in rounds):.1f} "
                f"| {statistics.median(f.p50_ms for f in rounds):.2f} "
                f"| {statistics.median(f.p99_ms for f in rounds):.2f} "
                f"| {f'{statistics.median(cpu):.2f}' if cpu else '-'} | {sum(f.errors for f in rounds)} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", action="append", required=True, help="LABEL=REVISION (repeat)")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--loads", default=",".join(LOADS))
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of each measured load")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=6)
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    arguments = parser.parse_args()
    arguments.loads = arguments.loads.split(",")
    if shutil.which("wrk") is None:
        sys.exit("needs wrk: apt-get install wrk")
    with tempfile.TemporaryDirectory(prefix="bench-write-path-") as scratch:
        directory = Path(scratch)
        with checked_out(arguments.variant, directory) as variants:
            print(f"Machine: {describe()}; load before: {os.getloadavg()[0]:.2f}")
            print(
                f"{arguments.rounds} rounds of {arguments.duration:g} s per load and variant, "
                f"wrk on {arguments.connections} connections; medians over the rounds.\n"
            )
            for variant in variants:
                print(f"- `{variant.label}`: {variant.revision} ({variant.commit})")
            for backend in arguments.backends.split(","):
                results = bench_backend(backend, variants, arguments, directory)
                report(backend, variants, arguments.loads, results)
            print(f"\nLoad after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""How long the web console's pages take, one person clicking (sequential requests), on a real gunicorn.

On each backend this sets the service up and serves it as bench_plans does, creates organisation `bench`
with a planner key, a 2026 budget with a committed plan starting in each month (12 plans) and a law fitted
to the API tests' 36 runs with `--bootstrap` bootstrap fits (its frontier band is the /laws page's heaviest
work), signs a browser session in, and then requests each page `--requests` times after one warm-up:

* the planner with 6 000 PF-days on 1 024 H100s under Chinchilla (an allocation and its IsoFLOP chart),
  beside POST /v1/allocations of the same request (what the page adds is rendering and the chart);
* the empty planner, plan history, the budget page (utilisation and burn), the frontier (5 published laws
  and the fitted one with its band), the cost report (2026 by month and budget) and its CSV.

The figures are the median and 90th percentile of the wall time per request as the client sees it, and the
size of the page. Not a test: nothing asserts on time.

    .venv/bin/python -m bench.bench_console [--requests 30] [--bootstrap 1000] [--backends sqlite,postgresql]
        [--postgres-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import requests

from bench.bench_plans import AUTH, call, committed_plan, create_budget, scratch_database, serving
from bench.machine import describe
from service.infra.config import Config
from tests.api.test_laws import fit_body

PLANNER_FORM = {
    "budget_kind": "pf_days",
    "budget": "6000",
    "hardware": "h100-sxm",
    "accelerators": "1024",
    "law": "chinchilla-2022",
}
ALLOCATION = {"pf_days": 6000, "hardware": "h100-sxm", "accelerators": 1024, "law": "chinchilla-2022"}


def prepare(base: str, bootstrap: int) -> tuple[requests.Session, str, str]:
    """The bench organisation and what the pages show; a signed-in session, its key and the budget's id."""
    call("POST", f"{base}/v1/organizations", 201, json={"slug": "bench", "name": "Bench"})
    key = call("POST", f"{base}/v1/keys", 201, json={"role": "planner", "organization": "bench", "name": "b"})
    budget = create_budget(base, "console bench")
    for month in range(1, 13):
        committed_plan(base, budget, f"2026-{month:02d}-15T00:00:00Z")
    body = fit_body(organization="bench", bootstrap={"samples": bootstrap, "seed": 7})
    fitted = requests.post(f"{base}/v1/scaling-laws", json=body, headers=AUTH, timeout=300)
    if fitted.status_code == 202:  # a large bootstrap is fitted in the background: wait for it
        job = fitted.json()["id"]
        while (status := call("GET", f"{base}/v1/fit-jobs/{job}", 200).json()["status"]) in (
            "queued",
            "running",
        ):
            time.sleep(1)
        if status != "succeeded":
            raise RuntimeError(f"fit job {job}: {status}")
    elif fitted.status_code != 201:
        raise RuntimeError(f"fit: {fitted.status_code} {fitted.text[:300]}")
    session = requests.Session()
    signed_in = session.post(
        f"{base}/sign-in", data={"key": key.json()["key"], "next": "/"}, headers={"Origin": base}
    )
    if signed_in.status_code != 200 or "Sign out" not in signed_in.text:
        raise RuntimeError(f"sign-in failed: {signed_in.status_code}")
    return session, key.json()["key"], budget


def measure(send, count: int) -> tuple[float, float, int]:
    """Median and 90th percentile milliseconds of `count` calls of send() after one warm-up, and the size."""
    send()
    times, size = [], 0
    for _ in range(count):
        started = time.perf_counter()
        response = send()
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{response.url}: {response.status_code} {response.text[:300]}")
        size = len(response.content)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))], size


def run_backend(backend: str, args: argparse.Namespace) -> list[tuple[str, float, float, int]]:
    with (
        tempfile.TemporaryDirectory() as directory,
        scratch_database(backend, args.postgres_url, Path(directory)) as url,
        serving(url, Config.web_concurrency, Config.threads, Path(directory) / "server.log") as server,
    ):
        base = server.base
        session, key, budget = prepare(base, args.bootstrap)
        bearer = {"Authorization": f"Bearer {key}"}
        year = {"from": "2026-01-01", "to": "2027-01-01", "grouped": "1", "group_budget": "1"}
        pages = {
            "POST /v1/allocations (the same request, JSON)": lambda: requests.post(
                f"{base}/v1/allocations", json=ALLOCATION, headers=bearer, timeout=30
            ),
            "planner: 6 000 PF-days, allocation + IsoFLOP chart": lambda: session.get(
                f"{base}/", params=PLANNER_FORM
            ),
            "planner: empty form": lambda: session.get(f"{base}/"),
            "plan history (12 plans)": lambda: session.get(f"{base}/plans"),
            "budget: utilisation + burn chart": lambda: session.get(f"{base}/budgets/{budget}"),
            f"frontier: 5 published + 1 fitted ({args.bootstrap} fits)": lambda: session.get(f"{base}/laws"),
            "cost report: 2026, month x budget": lambda: session.get(f"{base}/reports/costs", params=year),
            "cost report CSV": lambda: session.get(f"{base}/reports/costs.csv", params=year),
        }
        return [(name, *measure(send, args.requests)) for name, send in pages.items()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--postgres-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    print(describe())
    print(
        f"{args.requests} sequential requests a page after one warm-up; gunicorn {Config.web_concurrency} "
        f"workers x {Config.threads} threads\n"
    )
    for backend in args.backends.split(","):
        print(f"{backend}:")
        print(f"  {'page':58s} {'median':>9s} {'p90':>9s} {'size':>9s}")
        for name, median, p90, size in run_backend(backend, args):
            print(f"  {name:58s} {median:6.1f} ms {p90:6.1f} ms {size / 1024:5.1f} KiB")
        print()


if __name__ == "__main__":
    main()

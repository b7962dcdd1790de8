"""Speed of the cluster model's layout search (issue 21 targets), in the core and through HTTP.

Targets: the full search for a 405B shape on 16 384 accelerators in <= 100 ms in the core and <= 250 ms
through HTTP (POST /v1/estimates on a real gunicorn, SQLite, as `make run` serves it); how many layouts a
second the search evaluates. Also: choosing the cluster size (a deadline; ~50 counts searched) and the
"$5M and 60 days" allocation, which searches every count at several utilisations.

    .venv/bin/python -m bench.bench_cluster [--repeat 20]

Prints medians with the machine it ran on. Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import requests

from bench.bench_plans import AUTH, scratch_database, serving
from bench.machine import describe
from bench.published_runs import LLAMA3_405B, LLAMA3_405B_FIELDS, LLAMA3_CLUSTER
from service.core import performance

ESTIMATE = {
    "params": 405e9,
    "tokens": 15.6e12,
    "hardware": "h100-sxm",
    "accelerators": 16384,
    "shape": LLAMA3_405B_FIELDS,
    "layout": {"global_batch": 2048},
}
SIZED = {"params": 70e9, "tokens": 1.4e12, "hardware": "h100-sxm", "days": 30}
BUDGET = {"cost": "5000000", "currency": "USD", "days": 60, "hardware": "h100-sxm", "law": "chinchilla-2022"}


def timed(function, repeat: int) -> tuple[float, object]:
    """Median seconds of `repeat` calls after one warm-up, and the last result."""
    result = function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(describe())

    seconds, found = timed(
        lambda: performance.search(LLAMA3_405B, LLAMA3_CLUSTER, 16_384, global_batch=2048), args.repeat
    )
    assert isinstance(found, performance.Search)
    layout = found.best.layout
    print(
        f"\ncore: search of 405B on 16 384 H100: {1e3 * seconds:.1f} ms, {found.evaluated} layouts evaluated "
        f"({found.evaluated / seconds / 1e6:.2f} M layouts/s), {found.fitting} fit; "
        f"best TP {layout.tensor_parallel}"
        f" PP {layout.pipeline_parallel} DP {layout.data_parallel} interleave {layout.interleave} ZeRO "
        f"{layout.zero_stage} {layout.recomputation} recomputation, step {found.best.seconds:.2f} s, "
        f"MFU {100 * found.best.mfu:.1f}%"
    )

    with (
        tempfile.TemporaryDirectory() as directory,
        scratch_database("sqlite", "", Path(directory)) as url,
        serving(url, 2, 4, Path(directory) / "server.log") as server,
    ):

        def post(path: str, body: dict) -> dict:
            response = requests.post(f"{server.base}{path}", json=body, headers=AUTH, timeout=300)
            response.raise_for_status()
            return response.json()

        for label, path, body, repeat in (
            ("estimate, 405B on 16 384 H100 (one search)", "/v1/estimates", ESTIMATE, args.repeat),
            ("estimate, 70B by a 30-day deadline (cluster size chosen)", "/v1/estimates", SIZED, 5),
            ("allocation, $5M and 60 days on H100 (model, count, layout)", "/v1/allocations", BUDGET, 3),
        ):
            seconds, answer = timed(lambda path=path, body=body: post(path, body), repeat)
            assert isinstance(answer, dict)
            estimate = answer.get("estimate", answer)
            print(
                f"HTTP: {label}: {1e3 * seconds:.0f} ms (median of {repeat}); "
                f"{estimate['accelerators']} accelerators, {estimate['days']:.1f} days"
            )


if __name__ == "__main__":
    main()

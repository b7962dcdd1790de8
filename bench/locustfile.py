"""The load of bench/bench_load.py: locust users that send one request, described by the environment, in a
loop, without waiting between requests.

bench_load runs locust on this file in a subprocess per operation, so that gevent's monkeypatching stays in
that process. Environment:

* BENCH_REQUEST: JSON with the request's `name` (its label in locust's statistics), `method`, `path`,
  `headers`, optionally `json` (the body) and `idempotency_key` (true: a fresh Idempotency-Key each request).
* BENCH_WARMUP: seconds from the start of the test after which the statistics are reset; what they count
  from then on is the measurement.
* BENCH_CSV: where to write locust's CSV statistics (`<BENCH_CSV>_stats.csv`, `_failures.csv`,
  `_exceptions.csv`) when locust quits.
* BENCH_SERVER_PID and BENCH_CPU_FILE (optional): the gunicorn master's pid, and where to write, as JSON, the
  cores that locust, the server and other work kept busy over the measurement.
"""

from __future__ import annotations

import csv
import json
import os
import uuid
from dataclasses import asdict
from pathlib import Path

import gevent
from locust import FastHttpUser, events, task
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

from bench.machine import CpuMeter

REQUEST = json.loads(os.environ["BENCH_REQUEST"])
WINDOW: dict[str, CpuMeter] = {}

# gevent's loop caches the time, and importing this file (the service comes with bench_plans) takes a second
# or two: timers set from the stale time, --run-time's among them, would fire that much early.
gevent.get_hub().loop.update_now()


class Operation(FastHttpUser):
    """FastHttpUser rather than HttpUser: it costs a fraction of the CPU per request, and the client shares
    the machine's cores with the server. The default wait_time, constant(0), keeps the server saturated."""

    @task
    def send(self) -> None:
        headers = dict(REQUEST["headers"])
        if REQUEST.get("idempotency_key"):
            headers["Idempotency-Key"] = str(uuid.uuid4())
        with self.client.request(
            REQUEST["method"],
            REQUEST["path"],
            name=REQUEST["name"],
            headers=headers,
            json=REQUEST.get("json"),
            allow_redirects=False,  # a redirect is not the answer the benchmark asked for
            catch_response=True,  # locust alone would pass 1xx and 3xx answers as successes
        ) as response:
            if 200 <= response.status_code < 300:
                response.success()
            else:
                response.failure(failure_of(response))


def failure_of(response) -> str:
    """A short description that stays the same for the same kind of failure: locust counts failures by their
    text, so request ids and the like must stay out of it."""
    if not response.status_code:
        return f"no answer: {response.error!r}"
    try:
        problem = json.loads(response.text or "")
        return f"{response.status_code} {problem.get('title', '')}: {str(problem.get('detail', ''))[:160]}"
    except (ValueError, AttributeError):
        return f"{response.status_code} {(response.text or '')[:160]}"


@events.test_start.add_listener
def schedule_measurement(environment, **_kwargs) -> None:
    gevent.spawn_later(float(os.environ["BENCH_WARMUP"]), start_measurement, environment)


def start_measurement(environment) -> None:
    # The warm-up requests (new connections, first requests in each worker) must not count: drop them.
    environment.runner.stats.reset_all()
    if os.environ.get("BENCH_SERVER_PID"):
        WINDOW["meter"] = CpuMeter(int(os.environ["BENCH_SERVER_PID"]))


@events.test_stopping.add_listener
def stop_meter(**_kwargs) -> None:
    meter, path = WINDOW.pop("meter", None), os.environ.get("BENCH_CPU_FILE")
    if meter is not None and path:
        use = meter.stop()
        Path(path).write_text(json.dumps(None if use is None else asdict(use)))


@events.quitting.add_listener
def write_statistics(environment, **_kwargs) -> None:
    # Not locust's --csv: it rewrites its files once a second and not at exit, so they miss up to the last
    # second of the run. These are written once, from the final figures, by the same writer.
    writer = StatsCSV(environment, PERCENTILES_TO_REPORT)
    prefix = os.environ["BENCH_CSV"]
    for suffix, write in (
        ("stats", writer.requests_csv),
        ("failures", writer.failures_csv),
        ("exceptions", writer.exceptions_csv),
    ):
        with open(f"{prefix}_{suffix}.csv", "w", newline="") as file:
            write(csv.writer(file))

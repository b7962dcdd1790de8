"""Speed of the planning engine (issue 3 targets) and of POST /v1/allocations through the app.

Targets: closed-form allocation <= 20 µs per call in the core; data-constrained and inference-aware
<= 2 ms per call; the endpoint adds only the framework's own overhead.

    .venv/bin/python -m bench.bench_planning

Prints the median of several repeats (each the mean over many calls), with the machine it ran on.
Not a test: timings on shared machines vary, so nothing here asserts.
"""

from __future__ import annotations

import statistics
import tempfile
import timeit

from bench.machine import describe
from service import create_app
from service.core import allocate, engine
from service.core.laws import PUBLISHED_LAWS
from service.infra import migrate
from service.infra.db import get_db
from service.services.catalog import load_builtin_hardware

CHINCHILLA = PUBLISHED_LAWS["chinchilla-2022"].law
C4 = PUBLISHED_LAWS["muennighoff-2023-c4"].law
SARDANA = PUBLISHED_LAWS["sardana-2024"].law


def per_call(function, number: int, repeat: int = 7) -> float:
    """Median over `repeat` runs of the mean seconds per call."""
    return statistics.median(t / number for t in timeit.repeat(function, number=number, repeat=repeat))


def show(name: str, seconds: float, target: float | None = None) -> None:
    verdict = ""
    if target is not None:
        verdict = f"  (target <= {fmt(target)}: {'met' if seconds <= target else 'MISSED'})"
    print(f"  {name:<58} {fmt(seconds):>10}{verdict}")


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def core() -> None:
    print("core (service/core), per call:")
    show("fixed_ratio(1e23)", per_call(lambda: allocate.fixed_ratio(1e23), 100_000), 20e-6)
    show(
        "compute_optimal(1e23, chinchilla-2022)",
        per_call(lambda: allocate.compute_optimal(1e23, CHINCHILLA), 50_000),
        20e-6,
    )
    show(
        "for_target_loss(2.0, chinchilla-2022)",
        per_call(lambda: allocate.for_target_loss(2.0, CHINCHILLA), 50_000),
        20e-6,
    )
    show(
        "data_constrained(1e23, U=1e11, muennighoff-2023-c4)",
        per_call(lambda: allocate.data_constrained(1e23, 1e11, C4), 500),
        2e-3,
    )
    show(
        "inference_aware(1.958, D_inf=1e13, sardana-2024)",
        per_call(lambda: allocate.inference_aware(1.958, 1e13, SARDANA), 500),
        2e-3,
    )
    h100 = engine.Hardware(name="H100", peak_flops={"bf16": 989.4e12}, memory_bytes=80e9)
    on = engine.Cluster(hardware=h100, accelerators=1024, layout={"zero_stage": 3})
    show(
        "plan(1e24, law, cluster): allocation + estimate + memory",
        per_call(
            lambda: engine.plan(engine.Budget(flops=1e24), law=engine.published("chinchilla-2022"), on=on),
            5_000,
        ),
    )


def app() -> None:
    with tempfile.TemporaryDirectory() as directory:
        application = create_app({"database_url": f"sqlite:///{directory}/bench.db", "log_level": "WARNING"})
        database = get_db(application)
        migrate.upgrade(database.engine)
        with database.sessionmaker() as session:
            load_builtin_hardware(session)
        client = application.test_client()

        def post(body):
            response = client.post("/v1/allocations", json=body)
            assert response.status_code == 200, response.get_json()

        print("app (Flask test client, in process, SQLite), per request:")
        healthz = per_call(lambda: client.get("/healthz"), 2_000)
        show("GET /healthz (framework floor: routing, hooks, JSON)", healthz)
        fixed = per_call(lambda: post({"flops": 1e23}), 1_000)
        show("POST /v1/allocations {flops}", fixed)
        core_fixed = per_call(lambda: engine.plan(engine.Budget(flops=1e23)), 20_000)
        show("  of which the engine (engine.plan)", core_fixed)
        show(
            "POST /v1/allocations {flops, law, hardware slug, days}",
            per_call(
                lambda: post(
                    {
                        "flops": 1e24,
                        "law": "epoch-2024",
                        "hardware": "h100-sxm",
                        "accelerators": 1024,
                        "days": 60,
                    }
                ),
                500,
            ),
        )
        show(
            "POST /v1/allocations {flops, unique_tokens}",
            per_call(lambda: post({"flops": 1e23, "unique_tokens": 1e11}), 300),
        )
        database.engine.dispose()


if __name__ == "__main__":
    print(f"machine: {describe()}")
    core()
    app()

"""Speed of sizing a budget's accelerator count in the core (issue 51, "Fast enough to compare";
docs/decisions/0004-sizing-offers-fast.md).

Target: one cold sizing (the layout-search and shape caches cleared) in 0.025-0.05 s, and 20 offers of ~5
hardware profiles (the same physics at other prices and goodputs) well under 1 s in one process; both met
by engine 2.5 (bench/RESULTS.md).

    .venv/bin/python -m bench.bench_sizing [--repeat 5] [--grid 1]

Per case: the median of `--repeat` cold sizings, a warm one (every search remembered), the runs modelled (each
asks the layout search once, remembered or not), the layout searches made (the cache's misses), the counts
planned and the answer. Then 20 offers sized one after the other from cold caches (median total of
`--repeat`). With `--grid N`, every Nth budget of the sizing grid (tests/core/sizing_grid.py) is sized cold
and compared with the answers recorded for it (tests/core/data/sizing.json). Prints the machine it ran on;
nothing asserts on time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from unittest import mock

from bench.machine import describe
from service.core import engine, performance, wall_clock
from tests.core import sizing_grid

CASES = (  # (label, cost in USD or None, days or None)
    ("$5M, 60 days (README)", "5000000", 60.0),
    ("$500k, no deadline", "500000", None),
    ("$50k, 30 days", "50000", 30.0),
    ("14 days, no money", None, 14.0),
)
PROFILES = ("h100-sxm", "b200", "mi300x")
CHINCHILLA = engine.published("chinchilla-2022")
# A comparison's offers: each profile on demand (the catalog's price), reserved, on spot (cheaper, more
# interruptions and more lost to requeues) and owned (amortised, a run overhead of its own).
OFFER_PROFILES = ("h100-sxm", "h200", "b200", "mi300x", "a100-80gb")
# (pricing, price over the catalog's, failures per accelerator-hour over the profile's, run overhead)
OFFERS = (
    ("on_demand", Decimal("1"), 1.0, None),
    ("reserved", Decimal("0.6"), 1.0, None),
    ("spot", Decimal("0.3"), 5.0, 0.33),
    ("owned", Decimal("0.45"), 1.0, 0.2),
)
OFFER_BUDGET = ("5000000", 60.0)
RECORDED = Path(__file__).parent.parent / "tests" / "core" / "data" / "sizing.json"


def cold() -> None:
    """Forget every layout search and shape the process remembers, as a process that never sized these
    runs meets them (bench_comparisons too)."""
    performance._search.cache_clear()
    wall_clock.assumed_shape.cache_clear()
    wall_clock._layer_of.cache_clear()


def budget(cost: str | None, days: float | None, price: Decimal | None = None) -> engine.Budget:
    return engine.Budget(
        cost=None if cost is None else Decimal(cost),
        currency=None if cost is None else "USD",
        days=days,
        price_per_hour=price,
    )


def sized(limits: engine.Budget, on: engine.Cluster) -> engine.Plan:
    return engine.plan(limits, law=CHINCHILLA, on=on)


def counted(size: Callable[[], engine.Plan]) -> tuple[engine.Plan, int, int]:
    """A cold sizing, with the runs it modelled (layout searches asked) and the searches it made."""
    cold()
    with mock.patch.object(performance, "search", wraps=performance.search) as asked:
        result = size()
    return result, asked.call_count, performance._search.cache_info().misses


def seconds(size: Callable[[], object], *, warm: bool = False) -> float:
    if not warm:
        cold()
    start = time.perf_counter()
    size()
    return time.perf_counter() - start


def cases(repeat: int) -> None:
    print(f"one sizing, chinchilla-2022, cold = caches cleared (median of {repeat}):")
    print(
        "| profile | budget | cold s | warm s | runs modelled | searches | counts planned | accelerators |"
        " N | days | cost |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for slug in PROFILES:
        on = engine.Cluster(hardware=sizing_grid.hardware(slug))
        for label, cost, days in CASES:
            limits = budget(cost, days)

            def size(limits: engine.Budget = limits, on: engine.Cluster = on) -> engine.Plan:
                return sized(limits, on)

            times = [seconds(size) for _ in range(repeat)]
            warm = seconds(size, warm=True)
            result, asked, searches = counted(size)
            run = result.estimate
            assert run is not None
            assert run.sizing is not None
            print(
                f"| {slug} | {label} | {statistics.median(times):.3f} | {warm:.3f} | {asked} | {searches} | "
                f"{run.sizing.tried} | {run.accelerators} | {result.allocation.params:.3g} | "
                f"{run.runtime.days:.1f} | {run.cost} |"
            )


def offers() -> list[tuple[str, str, engine.Budget, engine.Cluster]]:
    """The 20 offers, those of one profile one after the other (they share its layout searches)."""
    found = []
    cost, days = OFFER_BUDGET
    for slug in OFFER_PROFILES:
        hardware = sizing_grid.hardware(slug)
        assert hardware.price_per_hour is not None
        for pricing, price, failures, overhead in OFFERS:
            rate = (
                hardware.failures_per_accelerator_hour or wall_clock.Reliability.failures_per_accelerator_hour
            )
            offered = dataclasses.replace(hardware, failures_per_accelerator_hour=rate * failures)
            on = engine.Cluster(hardware=offered, run_overhead=overhead)
            found.append(
                (
                    slug,
                    pricing,
                    budget(cost, days, (hardware.price_per_hour * price).quantize(Decimal("0.01"))),
                    on,
                )
            )
    return found


def comparison(repeat: int) -> None:
    every = offers()

    def size_all() -> list[engine.Plan]:
        return [sized(limits, on) for _, _, limits, on in every]

    totals = [seconds(size_all) for _ in range(repeat)]
    results, asked, searches = counted(size_all)
    total = statistics.median(totals)
    verdict = "met" if total < 1 else "MISSED"
    print(
        f"\n{len(every)} offers of {len(OFFER_PROFILES)} profiles (${OFFER_BUDGET[0]}, "
        f"{OFFER_BUDGET[1]:g} days), cold caches at the start, median of {repeat}: {total:.2f} s in total, "
        f"{total / len(every):.3f} s an offer (target < 1 s: {verdict}); {asked} runs modelled, "
        f"{searches} layout searches"
    )
    print("| profile | pricing | price/h | accelerators | N | days | cost |")
    print("|---|---|---|---|---|---|---|")
    for (slug, pricing, limits, _), result in zip(every, results, strict=True):
        run = result.estimate
        assert run is not None
        print(
            f"| {slug} | {pricing} | {limits.price_per_hour} | {run.accelerators} | "
            f"{result.allocation.params:.3g} | {run.runtime.days:.1f} | {run.cost} |"
        )


def grid(every: int) -> None:
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    chosen = list(sizing_grid.cases())[::every]
    times, identical, changes = [], 0, []
    for case in chosen:
        cold()
        start = time.perf_counter()
        answer = sizing_grid.sized(case)
        times.append(time.perf_counter() - start)
        before = {name: value for name, value in recorded["cases"][case.key].items() if name != "counts"}
        identical += answer == before
        if "flops" in answer and "flops" in before:
            changes.append(answer["flops"] / before["flops"] - 1)
    print(
        f"\ngrid: {len(chosen)} budgets (every {every}th of {len(recorded['cases'])}), cold, mean "
        f"{statistics.mean(times):.3f} s, median {statistics.median(times):.3f} s a sizing; answers "
        f"identical to engine {recorded['engine_version']}'s: {identical}; compute change from "
        f"{min(changes):+.2%} to {max(changes):+.2%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--grid", type=int, default=0, help="size every Nth budget of the grid (0: none)")
    arguments = parser.parse_args()
    print(describe())
    cases(arguments.repeat)
    comparison(arguments.repeat)
    if arguments.grid:
        grid(arguments.grid)


if __name__ == "__main__":
    main()

"""The grid of budgets a sizing's answers are recorded on (docs/decisions/0004-sizing-offers-fast.md):
every built-in priced profile, money from 1e4 to 1e8 USD in half-decades with no deadline or 7, 30, 60 and
180 days, and days only; under chinchilla-2022, epoch-2024, a fixed 20 tokens per parameter and a
mixture-of-experts law. Shared by the script that records the answers (tests/core/data/record_sizing.py),
the tests that compare with them, and bench/bench_sizing.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from service.core import engine, performance
from service.core.validation import InvalidInput
from service.data.catalog import builtin_hardware

COSTS_USD = ("1e4", "3e4", "1e5", "3e5", "1e6", "3e6", "1e7", "3e7", "1e8")
DEADLINES_DAYS = (None, 7, 30, 60, 180)
RULES = ("chinchilla-2022", "epoch-2024", "20-tokens-per-param", "krajewski-2024-g8")


@dataclass(frozen=True)
class Case:
    """One budget of the grid on one profile under one rule; `cost` None: days only."""

    hardware: str
    rule: str
    cost: str | None
    days: float | None

    @property
    def key(self) -> str:
        return f"{self.hardware} {self.rule} cost={self.cost} days={self.days}"

    def budget(self) -> engine.Budget:
        cost = None if self.cost is None else Decimal(self.cost)
        return engine.Budget(cost=cost, currency=None if cost is None else "USD", days=self.days)


def priced_profiles() -> list[str]:
    return [spec.slug for spec in builtin_hardware() if spec.price is not None]


def cases() -> Iterator[Case]:
    for slug in priced_profiles():
        for rule in RULES:
            for cost in COSTS_USD:
                for days in DEADLINES_DAYS:
                    yield Case(slug, rule, cost, days)
            for days in DEADLINES_DAYS[1:]:
                yield Case(slug, rule, None, days)


def hardware(slug: str) -> engine.Hardware:
    """A built-in profile as the engine sees it, at its catalog price (services.planning.hardware_of of a
    freshly loaded catalog)."""
    spec = next(spec for spec in builtin_hardware() if spec.slug == slug)
    assert spec.price is not None, f"{slug} has a price"
    return engine.Hardware(
        name=spec.name,
        slug=spec.slug,
        peak_flops=spec.peak_flops,
        memory_bytes=float(spec.memory_bytes),
        price_per_hour=spec.price.price_per_hour,
        currency=spec.price.currency,
        memory_bandwidth_bytes_per_second=float(spec.memory_bandwidth_bytes_per_second),
        accelerators_per_node=spec.accelerators_per_node,
        scale_up_bandwidth_bytes_per_second=_float(spec.scale_up_bandwidth_bytes_per_second),
        scale_out_bandwidth_bytes_per_second=_float(spec.scale_out_bandwidth_bytes_per_second),
        failures_per_accelerator_hour=spec.failures_per_accelerator_hour,
        run_overhead=spec.run_overhead,
        efficiency=performance.Efficiency(**spec.efficiency),
    )


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def rule_arguments(rule: str) -> dict[str, Any]:
    if rule == "20-tokens-per-param":
        return {"tokens_per_param": 20.0}
    return {"law": engine.published(rule)}


def plan_of(case: Case, size: Callable[..., engine.Plan] = engine.plan) -> engine.Plan:
    on = engine.Cluster(hardware=hardware(case.hardware))
    return size(case.budget(), on=on, **rule_arguments(case.rule))


def answer_of(result: engine.Plan) -> dict[str, Any]:
    """A sized plan's answer as recorded: the count, compute, model and run."""
    run = result.estimate
    assert run is not None, "a sized plan has its run"
    return {
        "accelerators": run.accelerators,
        "flops": result.allocation.flops,
        "params": result.allocation.params,
        "days": run.runtime.days,
        "cost": None if run.cost is None else str(run.cost),
    }


def sized(case: Case, size: Callable[..., engine.Plan] = engine.plan) -> dict[str, Any]:
    """The answer to a case as recorded, or the field it was refused on."""
    try:
        return answer_of(plan_of(case, size))
    except InvalidInput as refusal:
        return {"refused": refusal.argument}

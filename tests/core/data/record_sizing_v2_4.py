"""Record engine 2.4's answers on the sizing grid (tests/core/sizing_grid.py) into sizing_v2_4.json: the
count, compute, model and run it chose for each budget, and the compute it found at every count it planned.

    .venv/bin/python -m tests.core.data.record_sizing_v2_4

Run once, with engine 2.4's sizing (about 5 minutes on 2 cores): the tests compare engine 2.5's answers with
these instead of computing 2.4's again, which would double their time.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

from service.core import engine
from service.core.engine import sizing
from service.core.validation import InvalidInput
from tests.core.sizing_grid import COSTS_USD, DEADLINES_DAYS, RULES, Case, cases, priced_profiles, sized

RECORDED = Path(__file__).with_name("sizing_v2_4.json")


def recorded(case: Case) -> tuple[str, dict[str, Any]]:
    """The case's answer, and the compute of the plan at each count the sizing planned (None: refused)."""
    counts: dict[int, float | None] = {}
    plan_on = sizing._plan_on

    def recording(budget: engine.Budget, rules: Any, on: engine.Cluster) -> engine.Plan:
        try:
            result = plan_on(budget, rules, on)
        except InvalidInput:
            counts[on.accelerators] = None
            raise
        counts[on.accelerators] = float(f"{result.allocation.flops:.9g}")
        return result

    sizing._plan_on = recording  # type: ignore[assignment]
    try:
        answer = sized(case)
    finally:
        sizing._plan_on = plan_on  # type: ignore[assignment]
    return case.key, {**answer, "counts": sorted(counts.items())}


def main() -> None:
    assert engine.ENGINE_VERSION.startswith("2.4."), "2.4's answers are recorded with engine 2.4"
    with multiprocessing.Pool() as pool:
        answers = dict(pool.imap(recorded, list(cases()), chunksize=8))
    document = {
        "engine_version": engine.ENGINE_VERSION,
        "grid": {
            "profiles": priced_profiles(),
            "rules": list(RULES),
            "costs_usd": list(COSTS_USD),
            "deadlines_days": list(DEADLINES_DAYS),
        },
        "cases": answers,
    }
    RECORDED.write_text(json.dumps(document, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{len(answers)} cases written to {RECORDED}")


if __name__ == "__main__":
    main()

"""Record engine 2.4's answers on the sizing grid (tests/core/sizing_grid.py) into sizing_v2_4.json: the
count, compute, model and run it chose for each budget, and the compute it found at every count it planned.

    .venv/bin/python -m tests.core.data.record_sizing_v2_4 [path]

Run once, with engine 2.4's sizing (about 5 minutes on 2 cores): the tests compare engine 2.5's answers with
these instead of computing 2.4's again, which would double their time.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
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
    answer_of = sizing._Sizer.answer

    def recording(sizer: sizing._Sizer, on: engine.Cluster) -> Any:
        assert on.accelerators is not None, "a count is sized"
        try:
            answer = answer_of(sizer, on)
        except InvalidInput:
            counts[on.accelerators] = None
            raise
        counts[on.accelerators] = float(f"{answer.flops:.9g}")
        return answer

    sizing._Sizer.answer = recording  # type: ignore[method-assign]
    try:
        answer = sized(case)
    finally:
        sizing._Sizer.answer = answer_of  # type: ignore[method-assign]
    return case.key, {**answer, "counts": sorted(counts.items())}


def main(path: Path) -> None:
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
    path.write_text(json.dumps(document, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{len(answers)} cases written to {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else RECORDED)

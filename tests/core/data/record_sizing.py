"""Record this engine's answers on the sizing grid (tests/core/sizing_grid.py) into sizing.json: the count,
compute, model and run it chose for each budget, and the compute it found at every count it planned.

    .venv/bin/python -m tests.core.data.record_sizing [path]

Run when the engine's sizing changes on purpose (about 3 minutes on 2 cores), with its version moved: the
tests compare a spread sample with these answers instead of sizing the whole grid. Before it overwrites a
record of another version it prints how the answers moved (tests/core/data/sizing_change.py).
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
from tests.core.data.sizing_change import change
from tests.core.sizing_grid import COSTS_USD, DEADLINES_DAYS, RULES, Case, cases, priced_profiles, sized

RECORDED = Path(__file__).with_name("sizing.json")


def recorded(case: Case) -> tuple[str, dict[str, Any]]:
    """The case's answer, and the compute of the plan at each count the sizing planned (None: refused)."""
    counts: dict[int, float | None] = {}
    answer_of = sizing._Sizer.answer

    def recording(sizer: sizing._Sizer, on: engine.Cluster, *start: float) -> Any:
        assert on.accelerators is not None, "a count is sized"
        try:
            answer = answer_of(sizer, on, *start)
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
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        print(change(before, document))
    path.write_text(json.dumps(document, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{len(answers)} cases written to {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else RECORDED)

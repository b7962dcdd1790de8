"""How a sizing's answers moved between two records of the grid (record_sizing.py): per rule, how many
budgets kept their answer, the compute's change (mean, 5th and 95th percentiles, extremes, how many lost more
than 2% and 5%), the counts planned, and the budgets refused by one and not the other.

    .venv/bin/python -m tests.core.data.sizing_change before.json after.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def change(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The report of how `after`'s answers differ from `before`'s, one line per rule and a total."""
    moved: dict[str, list[float]] = defaultdict(list)
    same: dict[str, int] = defaultdict(int)
    planned: dict[str, list[tuple[int, int]]] = defaultdict(list)
    refusals = []
    for key, old in before["cases"].items():
        new = after["cases"][key]
        rule = key.split()[1]
        if "refused" in old or "refused" in new:
            if old.get("refused") != new.get("refused"):
                was, now = old.get("refused", "answered"), new.get("refused", "answered")
                refusals.append(f"  {key}: {was} -> {now}")
            continue
        moved[rule].append(new["flops"] / old["flops"] - 1)
        same[rule] += (new["accelerators"], new["flops"]) == (old["accelerators"], old["flops"])
        planned[rule].append((_planned(old), _planned(new)))
    lines = [f"engine {before['engine_version']} -> {after['engine_version']}: compute of the answer"]
    for rule in [*moved, "all"]:
        rules = list(moved) if rule == "all" else [rule]
        changes = sorted(change for each in rules for change in moved[each])
        counts = [pair for each in rules for pair in planned[each]]
        kept = sum(same[each] for each in rules)
        n = len(changes)
        lines.append(
            f"  {rule}: {n} budgets, {kept} unchanged; mean {statistics.mean(changes):+.2%}, "
            f"p5 {changes[n // 20]:+.2%}, p95 {changes[-1 - n // 20]:+.2%}, "
            f"min {changes[0]:+.1%}, max {changes[-1]:+.1%}; "
            f"{sum(c < -0.02 for c in changes)} lost more than 2%, "
            f"{sum(c < -0.05 for c in changes)} more than 5%; counts planned "
            f"{statistics.mean(o for o, _ in counts):.1f} -> {statistics.mean(n for _, n in counts):.1f}"
        )
    lines.append(f"  refused by one and not the other: {len(refusals)}")
    return "\n".join(lines + refusals)


def _planned(answer: dict[str, Any]) -> int:
    return sum(flops is not None for _, flops in answer["counts"])


if __name__ == "__main__":
    first, second = (json.loads(Path(name).read_text(encoding="utf-8")) for name in sys.argv[1:3])
    print(change(first, second))

"""Judge the FinOps Foundation validator's JUnit report of a FOCUS export: exit 1 if a rule failed.

    python .ci/judge_focus.py RULES_JSON JUNIT_XML
    python .ci/judge_focus.py backport    (with the validator's venv's Python)

focus-validator exits 0 whatever it finds, so its report is what CI reads. One kind of failure is not the
export's: a rule that is one alternative of an OR composite whose other alternative held, and the composite
with it. FOCUS 1.2's InvoiceId nullability is such a pair: "MUST be null when the charge is not associated
with an invoice" (InvoiceId-C-004-C) OR "MUST NOT be null when it is" (InvoiceId-C-005-C), and the validator
checks each alternative on every row, so one of the two always fails while their composite
(InvoiceId-C-003-C) passes. Such a failure is listed as excused, with the composite that held; any other
failure fails the run.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path


def rules_of(model: dict) -> dict[str, dict]:
    """Every rule of the validator's model by id, wherever the model nests them."""
    found: dict[str, dict] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, dict) and "ValidationCriteria" in value:
                    found[key] = value
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(model)
    return found


def alternatives_of(rules: dict[str, dict]) -> dict[str, list[str]]:
    """For each rule that is one alternative of an OR composite: the composites it is an alternative of."""
    parents: dict[str, list[str]] = defaultdict(list)
    for rule_id, rule in rules.items():
        requirement = rule["ValidationCriteria"].get("Requirement") or {}
        if requirement.get("CheckFunction") == "OR":
            for item in requirement.get("Items", []):
                if item.get("CheckFunction") == "CheckModelRule":
                    parents[item["ModelRuleId"]].append(rule_id)
    return parents


def outcomes_of(report: ET.Element) -> dict[str, str]:
    """passed, failed or skipped, by rule id (a test case is named "<rule id> :: <check>")."""
    outcomes = {}
    for case in report.iter("testcase"):
        rule_id = case.get("name", "").split(" :: ")[0]
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[rule_id] = "failed"
        elif case.find("skipped") is not None:
            outcomes[rule_id] = "skipped"
        else:
            outcomes[rule_id] = "passed"
    return outcomes


# focus-validator 2.2.1 declares Python >= 3.12 for one f-string (PEP 701, a quote escaped inside its braces);
# rewritten as 3.11 reads it, the package runs on Debian 12's Python. Harmless (and idempotent) on 3.12.
PEP_701 = """f"'{k.replace('\\"', '\\"\\"')}'" for k in ignore_keys"""
BEFORE_PEP_701 = """"'" + k.replace('"', '""') + "'" for k in ignore_keys"""


def backport() -> int:
    import focus_validator  # noqa: PLC0415 -- only in the validator's venv

    path = Path(focus_validator.__file__).parent / "config_objects" / "focus_to_duckdb_converter.py"
    source = path.read_text(encoding="utf-8")
    if PEP_701 in source:
        path.write_text(source.replace(PEP_701, BEFORE_PEP_701), encoding="utf-8")
    elif BEFORE_PEP_701 not in source:
        print(f"{path} is not the source this backport knows: pin the focus-validator it was written for")
        return 1
    return 0


def main(rules_path: str, junit_path: str) -> int:
    with open(rules_path, encoding="utf-8") as file:
        parents = alternatives_of(rules_of(json.load(file)))
    outcomes = outcomes_of(ET.parse(junit_path).getroot())
    counts = Counter(outcomes.values())
    tally = ", ".join(f"{counts[state]} {state}" for state in ("passed", "failed", "skipped"))
    print(f"  {len(outcomes)} rules: {tally}")
    failing = []
    for rule_id in sorted(rule for rule, state in outcomes.items() if state == "failed"):
        held = [parent for parent in parents.get(rule_id, []) if outcomes.get(parent) == "passed"]
        if held:
            print(f"  excused: {rule_id}, one alternative of {', '.join(held)}, which passed")
        else:
            print(f"  FAILED: {rule_id}")
            failing.append(rule_id)
    if not outcomes:
        print("  the report holds no rule: the validator did not run")
        return 1
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(backport() if sys.argv[1:] == ["backport"] else main(*sys.argv[1:]))

""".ci/judge_focus.py, which reads the FOCUS validator's report in CI: a failed rule fails the run unless it
is one alternative of an OR composite that passed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "judge_focus", Path(__file__).parent.parent / ".ci/judge_focus.py"
)
judge = importlib.util.module_from_spec(spec)
spec.loader.exec_module(judge)

# FOCUS 1.2's InvoiceId nullability, as the validator's model states it: C-003 is C-004 OR C-005.
RULES = {
    "ModelRules": {
        "InvoiceId-C-003-C": {
            "ValidationCriteria": {
                "Requirement": {
                    "CheckFunction": "OR",
                    "Items": [
                        {"CheckFunction": "CheckModelRule", "ModelRuleId": "InvoiceId-C-004-C"},
                        {"CheckFunction": "CheckModelRule", "ModelRuleId": "InvoiceId-C-005-C"},
                    ],
                }
            }
        },
        "InvoiceId-C-004-C": {"ValidationCriteria": {"Requirement": {"CheckFunction": "CheckValue"}}},
        "InvoiceId-C-005-C": {"ValidationCriteria": {"Requirement": {"CheckFunction": "CheckNotValue"}}},
        "BilledCost-C-001-M": {"ValidationCriteria": {"Requirement": {"CheckFunction": "TypeDecimal"}}},
    }
}


def report(**outcomes: str) -> str:
    cases = []
    for rule, outcome in outcomes.items():
        inner = {"failed": f'<failure name="{rule}">Failed</failure>', "skipped": "<skipped />"}.get(
            outcome, ""
        )
        cases.append(
            f'<testsuite name="{rule}"><testcase name="{rule} :: Check">{inner}</testcase></testsuite>'
        )
    return f"<testsuites>{''.join(cases)}</testsuites>"


@pytest.mark.parametrize(
    ("outcomes", "status"),
    [
        ({"InvoiceId-C-003-C": "passed", "InvoiceId-C-004-C": "passed", "InvoiceId-C-005-C": "failed"}, 0),
        ({"InvoiceId-C-003-C": "failed", "InvoiceId-C-004-C": "failed", "InvoiceId-C-005-C": "failed"}, 1),
        ({"InvoiceId-C-003-C": "passed", "BilledCost-C-001-M": "failed"}, 1),
        ({"BilledCost-C-001-M": "skipped"}, 0),
        ({}, 1),  # no rule at all: the validator did not run
    ],
)
def test_only_an_alternative_of_a_composite_that_held_is_excused(tmp_path, capsys, outcomes, status):
    rules, junit = tmp_path / "rules.json", tmp_path / "junit.xml"
    rules.write_text(json.dumps(RULES))
    junit.write_text(report(**outcomes) if outcomes else "<testsuites />")
    assert judge.main(str(rules), str(junit)) == status

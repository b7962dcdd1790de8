"""How tests/e2e/test_examples.py reads the README: which lines are a command, which show its output, and when
an answer is what they show. A checker that passes everything would let the README drift unseen."""

from __future__ import annotations

import pytest

from tests.examples import (
    CONTINUES,
    Step,
    agrees,
    chain,
    code_blocks,
    line_mismatch,
    mismatch,
    pages,
    step_problems,
    steps,
)


def shown(comment: str):
    """The JSON a comment line after a command shows."""
    (check,) = Step(1, "curl ...", [(1, comment)]).checks()
    return check.pattern


@pytest.mark.parametrize(
    ("figure", "answer", "agreed"),
    [
        ("1.910", 1.9102764, True),
        ("1.910", 1.9106, False),
        ("6.1e10", 6.1009876e10, True),
        ("6.1e10", 6.2e10, False),
        ("65726706900.6", 65726706900.619934, True),
        ("1", 1, True),
        ("1", 2, False),
    ],
)
def test_a_number_agrees_when_the_answer_rounded_to_the_digits_shown_is_the_figure(figure, answer, agreed):
    assert agrees(figure, answer) is agreed


def test_an_object_shown_without_an_ellipsis_has_exactly_its_members():
    assert mismatch(shown('{"status": "ok"}'), {"status": "ok"}) is None
    assert "['version'] too" in mismatch(shown('{"status": "ok"}'), {"status": "ok", "version": 2})
    assert mismatch(shown('{"status": "ok", ...}'), {"status": "ok", "version": 2}) is None


def test_members_shown_without_braces_are_some_of_the_answers():
    pattern = shown('"committed": "1000000.00", "remaining": "1500000.00"')
    budget = {"committed": "1000000.00", "remaining": "1500000.00", "amount": "2500000.00"}
    assert mismatch(pattern, budget) is None
    assert mismatch(pattern, budget | {"committed": "0.00"}) == ".committed is '0.00', not \"1000000.00\""


def test_an_ellipsis_in_an_array_leaves_items_out_but_keeps_their_order():
    pattern = shown('{"rows": [{"plans": 1, ...}, ..., {"plans": 3, ...}]}')
    assert mismatch(pattern, {"rows": [{"plans": 1}, {"plans": 2}, {"plans": 3}]}) is None
    assert "has no item" in mismatch(pattern, {"rows": [{"plans": 3}, {"plans": 1}]})
    assert "has no item" in mismatch(pattern, {"rows": []})
    assert mismatch(shown('{"rows": [1, 2]}'), {"rows": [1, 2, 3]}) == ".rows has 3 items, not 2"


def test_a_placeholder_is_any_value_and_a_string_ending_in_an_ellipsis_any_ending():
    pattern = shown('{"id": "<id>", "reason": "an IsoFLOP fit needs ..."}')
    assert mismatch(pattern, {"id": "0adc761b", "reason": "an IsoFLOP fit needs 3 budgets"}) is None
    assert mismatch(pattern, {"id": 7, "reason": "a fit needs 3 budgets"}) is not None


def test_booleans_and_null_are_not_numbers():
    assert mismatch(shown('{"fits": true, "law": null, "plans": 1}'), {"fits": 1, "law": None, "plans": 1})
    assert mismatch(shown('{"plans": 1}'), {"plans": True}) is not None


def test_a_command_runs_over_quotes_continuations_and_here_documents_and_what_follows_is_its_output():
    readme = "\n".join(
        [
            "```sh",
            "curl -s localhost:8000/v1/organizations -d '{",
            '  "slug": "acme"}'  # a quote open over two lines
            "'   # the new organisation",
            "python3 - > runs.csv <<'EOF'",
            "# a comment of the script, not an output",
            "EOF",
            "curl -si localhost:8000/v1/plans \\",
            "     -d @plan.json",
            "# 201 Created, Location: /v1/plans/<id>",
            '# {"status": "draft",',
            "#  ...}  (prose after the JSON)",
            "```",
        ]
    )
    first, script, plan = steps(code_blocks(readme))
    assert (first.line, first.command.count("\n"), first.checks()) == (2, 1, [])
    assert script.command.endswith("EOF")
    assert script.checks() == []
    status, body = plan.checks()
    assert (status.status, status.reason) == (201, "Created")
    assert status.headers == [("Location", "/v1/plans/<id>")]
    assert mismatch(body.pattern, {"status": "draft", "id": "x"}) is None


def test_a_block_marked_not_run_is_known_with_its_reason():
    readme = "<!-- not run by tests/e2e/test_examples.py: it starts the server -->\n```sh\nmake run\n```\n"
    (block,) = code_blocks(readme)
    assert block.not_run == "it starts the server"


def test_an_http_error_the_page_does_not_show_fails_the_command(tmp_path):
    problem = '{"type": "about:blank", "title": "Conflict", "status": 409, "detail": "over budget"}'
    assert step_problems(Step(1, "curl ..."), problem, tmp_path) == [
        "it answered HTTP 409, which the page does not show"
    ]
    shown_409 = Step(1, "curl ...", [(2, '"status": 409, "title": "Conflict"')])
    assert step_problems(shown_409, problem, tmp_path) == []
    assert step_problems(Step(1, "curl -si ..."), "HTTP/1.1 404 NOT FOUND\r\n\r\n", tmp_path) != []


def test_a_saved_file_begins_with_the_lines_shown_cell_by_cell(tmp_path):
    (tmp_path / "costs.csv").write_text("budget,plans,cost\n0adc761b,1,1000000.00\n")
    saves = [(2, "saves costs.csv:"), (3, "budget,plans,cost"), (4, "<id>,1,1000000.00")]
    assert step_problems(Step(1, "curl -OJ ..."), "", tmp_path) == []
    assert step_problems(Step(1, "curl -OJ ...", saves), "", tmp_path) == []
    (tmp_path / "costs.csv").write_text("budget,plans,cost\n")
    assert step_problems(Step(1, "curl -OJ ...", saves), "", tmp_path) == [
        "line 2: costs.csv has 1 lines, not 2 or more"
    ]


def printed_problems(shown: list[str], printed: str, tmp_path) -> list[str]:
    comments = [(2, "prints:"), *((3 + k, line) for k, line in enumerate(shown))]
    return step_problems(Step(1, "planner plan show ..."), printed, tmp_path) + step_problems(
        Step(1, "planner plan show ...", comments), printed, tmp_path
    )


def test_a_line_shown_agrees_to_its_digits_with_runs_of_spaces_as_one():
    assert line_mismatch("days  77.7 days", "days                    77.66 days") is None
    assert line_mismatch("days 77.7 days", "days 77.76 days") == "'days 77.76 days': 77.76, not 77.7"
    assert line_mismatch("cost 1,000,000.00 USD", "cost   1,000,000.00 USD") is None
    assert line_mismatch("MFU 39.0%", "MFU 39.04%") is None
    assert line_mismatch("hardware h100-sxm", "hardware h200") is not None  # a number inside a word is text
    assert line_mismatch("start 2026-01-01", "start 2026-01-02") is not None  # as is a date's tail
    assert line_mismatch("id <id> (draft)", "id 0adc761b-77 (draft)") is None


def test_the_lines_printed_are_the_lines_shown_in_order_with_an_ellipsis_for_lines_left_out(tmp_path):
    table = "name   days\nalpha  20.87\nbeta   10.43\n"
    assert printed_problems(["name days", "alpha 20.87", "beta 10.43"], table, tmp_path) == []
    assert printed_problems(["name days", "...", "beta 10.4"], table, tmp_path) == []
    assert printed_problems(["name days", "..."], table, tmp_path) == []
    assert printed_problems(["name days", "alpha 20.87"], table, tmp_path) == [
        "line 2: it printed 1 more lines (end the lines shown with ... to leave them out)"
    ]
    assert printed_problems(["name days", "...", "gamma 1"], table, tmp_path) == [
        "line 2: it printed no line 'gamma 1' after the ones shown before"
    ]
    assert printed_problems(["name days", "alpha 20.8", "..."], table, tmp_path) == [
        "line 2: line 2 of what it printed is 'alpha  20.87': 20.87, not 20.8"
    ]


def test_a_page_runs_after_the_pages_it_continues_from(tmp_path):
    (tmp_path / "a.md").write_text("# A\n")
    (tmp_path / "b.md").write_text("# B\n\n*Continues from [A](a.md): run its examples first.*\n")
    (tmp_path / "c.md").write_text("# C\n\n*Continues from [B](b.md): run its examples first.*\n")
    assert chain(tmp_path / "c.md") == [tmp_path / "a.md", tmp_path / "b.md", tmp_path / "c.md"]
    (tmp_path / "a.md").write_text("# A\n\n*Continues from [C](c.md).*\n")
    with pytest.raises(AssertionError, match="circle"):
        chain(tmp_path / "c.md")


def test_every_page_it_continues_from_is_a_page_of_the_docs():
    for page in pages():
        if CONTINUES.search(page.read_text()):
            assert len(chain(page)) > 1


def test_a_loop_over_lines_is_one_command():
    page = "```sh\nfor run in a b; do\n  echo $run   # prose\ndone\necho next\n```\n"
    loop, after = steps(code_blocks(page))
    assert loop.command == "for run in a b; do\n  echo $run   # prose\ndone"
    assert after.command == "echo next"

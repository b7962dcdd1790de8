"""The examples of the README and of every page of the docs site (docs/) as data, for
tests/e2e/test_examples.py: a page's ```sh blocks in order, each cut into commands with the output their
comments show, and the check of what a command printed against that.

What a page shows, and what of it is checked (keep to it when writing an example):

* Every ```sh block of a page runs, in the page's order, in one bash session (a variable one block sets, the
  next reads) in a scratch directory, against a fresh server standing in for `make run`'s, with
  `PLANNER_URL`, `PLANNER_API_KEY` and `AUTH` (the `Authorization` header) set for it. A page whose first
  lines say `*Continues from [title](other-page.md)...*` runs after that page's examples (and what that one
  continues from), on the same server. A block is left out when the line before its fence is
  `<!-- not run by tests/e2e/test_examples.py: why -->`; commands must not name a server's address.
* Then every ```python block of the page runs, in the same directory and environment, and must exit 0 (what
  it prints is not checked: its comments are prose). It reads the server's address and key from
  `PLANNER_URL` and `PLANNER_API_KEY`, as the shell blocks do.
* The comment lines after a command, and a comment at the end of its last line, show what it prints. Four
  kinds are checked; any other comment is prose for the reader, and so is what follows a JSON excerpt on
  its last line and a parenthesis after a status line.
  - JSON: a comment that starts with `{` or `[` (going on over the next comment lines until its brackets
    close), or one made only of `"name": value` members (an object's, its braces left out). What is shown
    must be in the answer: `...` stands for members or items left out, and at the end of a string for the
    rest of it; a string `"<...>"` (`"<id>"`) for any value; an object or array without `...` has exactly
    what is shown. A number agrees to the digits shown: the answer rounded there is the page's figure
    (within a relative 1e-9, for floating-point noise). Strings, booleans and null are exact.
  - A status line, for `curl -i`: `201 Created, Location: /v1/plans/<id>, ETag: "1"`: the status, its
    reason and every header shown (`<...>` for any text).
  - `saves NAME:`, then the file's first lines, one a comment line, compared cell by cell (numbers as
    above).
  - `prints:`, then the lines the command prints (a table of `planner`'s, say), one a comment line, in
    order: a line `...` stands for any lines left out, `<...>` for any text in a line; blank lines are not
    compared, runs of spaces are one space, and a number (`1,234.5`, `39.0%`) agrees to the digits shown as
    above.
* A command must exit 0, and must not answer an HTTP error (a problem document, a status of 400 or more)
  unless its comments show that status. A comment that starts like a check and does not parse fails the
  test rather than pass for prose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

NOT_RUN = re.compile(r"<!-- not run by tests/e2e/test_examples\.py: (.+?) -->")
CONTINUES = re.compile(r"^\*Continues from \[[^]]+\]\(([^)]+\.md)\)", re.MULTILINE)
MORE = "\0more"  # what `...` outside a string becomes: a member (key) or item of the answer not shown
ANY = re.compile(r"<[^<>]+>")  # "<id>": any value, or any text in a header or a cell


ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """The README and every page of the docs site that has shell examples."""
    found = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    return [
        page for page in found if code_blocks(page.read_text()) or code_blocks(page.read_text(), "python")
    ]


def page_name(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def chain(page: Path) -> list[Path]:
    """The pages whose examples run before `page`'s (what it continues from, first what that continues from),
    then `page`."""
    found: list[Path] = [page]
    while continued := CONTINUES.search(found[0].read_text()):
        previous = (found[0].parent / continued.group(1)).resolve()
        assert previous.is_file(), f"{page_name(found[0])} continues from {continued.group(1)}: no page"
        assert previous not in found, f"{page_name(page)}: its pages continue from each other in a circle"
        found.insert(0, previous)
    return found


@dataclass
class Block:
    line: int  # of the fence
    lines: list[tuple[int, str]]
    not_run: str | None  # why not, for a block left out


@dataclass
class Step:
    """One command of a block and what its comments show of its output."""

    line: int
    command: str
    comments: list[tuple[int, str]] = field(default_factory=list)

    def checks(self) -> list[Shown]:
        return list(_checks(self.comments))


def code_blocks(text: str, language: str = "sh") -> list[Block]:
    """The page's fenced blocks of `language`, in order."""
    blocks, lines = [], text.splitlines()
    number = 0
    while number < len(lines):
        if lines[number].strip() == f"```{language}":
            start = number
            number += 1
            body = []
            while lines[number].strip() != "```":
                body.append((number + 1, lines[number]))
                number += 1
            reason = NOT_RUN.fullmatch(lines[start - 1].strip()) if start else None
            blocks.append(Block(start + 1, body, reason.group(1) if reason else None))
        number += 1
    return blocks


def steps(blocks: list[Block]) -> list[Step]:
    """The commands of `blocks`, in order, as bash reads them (quotes, `\\` continuations, `$(...)` and
    here-documents may span lines), each with the comments that follow it."""
    found: list[Step] = []
    for block in blocks:
        scanner, pending, ours = _Scanner(), [], []
        for number, line in block.lines:
            if not pending and line.lstrip().startswith("#"):
                if ours:  # a comment before the block's first command is the reader's
                    ours[-1].comments.append((number, line.lstrip()[1:].strip()))
                continue
            if not pending and not line.strip():
                continue
            if not pending:
                ours.append(Step(number, ""))
            pending.append(line)
            trailing = scanner.feed(line)
            if trailing is not None:
                ours[-1].comments.append((number, trailing))
            if scanner.complete:
                ours[-1].command = "\n".join(pending)
                pending = []
        assert not pending, f"line {ours[-1].line}: the block ends inside a command"
        found += ours
    return found


class _Scanner:
    """Follows bash's quoting line by line, far enough to tell where a command ends."""

    def __init__(self) -> None:
        self.quote: str | None = None
        self.depth = 0  # of $( ... ) and ( ... )
        self.heredoc: str | None = None  # the delimiter being waited for
        self.continued = False
        self.compound = 0  # loops and ifs open: a `for ...; do` line to its `done`, an `if ...; then` to `fi`

    @property
    def complete(self) -> bool:
        return not (self.quote or self.depth or self.heredoc or self.continued or self.compound)

    def feed(self, line: str) -> str | None:
        """Takes one line; returns its trailing comment, if any."""
        if self.heredoc:
            if line.strip() == self.heredoc:
                self.heredoc = None
            return None
        if not self.quote and not self.continued:  # a line that starts a command
            code = line.split(" #", 1)[0].strip()
            opens = bool(re.match(r"(for|while|until)\b.*\bdo$|if\b.*\bthen$", code))
            self.compound += opens - bool(re.match(r"(done|fi)\b", code))
        return self._scan(line)

    def _scan(self, line: str) -> str | None:
        comment, delimiter, k = None, None, 0
        while k < len(line):
            c = line[k]
            if self.quote == "'":
                self.quote = None if c == "'" else self.quote
            elif self.quote == '"':
                if c == "\\":
                    k += 1
                elif c == '"':
                    self.quote = None
            elif c == "\\":
                k += 1
            elif c in "'\"":
                self.quote = c
            elif c == "#" and (k == 0 or line[k - 1].isspace()):
                comment = line[k + 1 :].strip()
                break
            elif heredoc := re.match(r"<<-?\s*(['\"]?)(\w+)\1", line[k:]):
                delimiter = heredoc.group(2)
                k += heredoc.end() - 1
            elif c in "()":
                self.depth += 1 if c == "(" else -1
            k += 1
        self.heredoc = delimiter
        self.continued = not self.quote and line[:k].rstrip().endswith("\\")
        return comment


# What the comments show ------------------------------------------------------------------------------------


@dataclass
class Shown:
    line: int


@dataclass
class JsonShown(Shown):
    pattern: Any


@dataclass
class StatusShown(Shown):
    status: int
    reason: str
    headers: list[tuple[str, str]]


@dataclass
class FileShown(Shown):
    name: str
    lines: list[str]


@dataclass
class PrintsShown(Shown):
    lines: list[str]


class Figure(str):
    """A number as a page writes it: its digits say how closely the answer must agree."""


def _checks(comments: list[tuple[int, str]]) -> Iterator[Shown]:
    k = 0
    while k < len(comments):
        number, text = comments[k]
        if text.startswith(("{", "[")):
            while (end := _closing(text)) is None:
                k += 1
                assert k < len(comments), f"line {number}: the JSON shown never closes"
                text += " " + comments[k][1]
            yield JsonShown(number, _pattern(text[:end], number))
        elif text.startswith('"'):
            yield JsonShown(number, _pattern("{" + text + ", ...}", number))
        elif status := re.fullmatch(r"(\d{3}) ([A-Za-z' -]+?)(?:, (.*?))?\s*(?:\(.*\))?", text):
            headers = re.split(r",\s+(?=[A-Za-z-]+: )", status.group(3)) if status.group(3) else []
            pairs = [tuple(part.strip() for part in header.split(":", 1)) for header in headers]
            yield StatusShown(number, int(status.group(1)), status.group(2), pairs)
        elif saved := re.fullmatch(r"saves (\S+):", text):
            yield FileShown(number, saved.group(1), [text for _, text in comments[k + 1 :]])
            return
        elif text == "prints:":
            yield PrintsShown(number, [text for _, text in comments[k + 1 :]])
            return
        k += 1


def _closing(text: str) -> int | None:
    """Where the bracket that `text` opens closes (the index after it), or None if it does not."""
    depth, in_string, k = 0, False, 0
    while k < len(text):
        c = text[k]
        if in_string:
            if c == "\\":
                k += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    return None


def _pattern(text: str, line: int) -> Any:
    """The JSON shown, `...` outside strings made a member or an item MORE, numbers kept as written."""
    out, stack, in_string, k = [], [], False, 0
    while k < len(text):
        c = text[k]
        if in_string:
            if c == "\\":
                out.append(text[k : k + 2])
                k += 2
                continue
            in_string = c != '"'
        elif text.startswith("...", k):
            out.append(f'"{MORE}": null' if stack and stack[-1] == "{" else f'"{MORE}"')
            k += 3
            continue
        elif c == '"':
            in_string = True
        elif c in "{[":
            stack.append(c)
        elif c in "}]":
            stack.pop()
        out.append(c)
        k += 1
    try:
        return json.loads("".join(out).replace("\0", "\\u0000"), parse_float=Figure, parse_int=Figure)
    except json.JSONDecodeError as error:
        raise AssertionError(f"line {line}: the JSON shown does not parse ({error}): {text}") from None


def mismatch(shown: Any, answer: Any, where: str = "") -> str | None:
    """Why `answer` is not what the JSON `shown` shows, or None when it is; `where` is the path to it."""
    if isinstance(shown, dict):
        return _object_mismatch(shown, answer, where)
    if isinstance(shown, list):
        return _list_mismatch(shown, answer, where)
    if _scalar_agrees(shown, answer):
        return None
    return f"{where or 'the answer'} is {answer!r}, not {_render(shown)}"


def _scalar_agrees(shown: Any, answer: Any) -> bool:
    if isinstance(shown, Figure):
        return isinstance(answer, int | float) and not isinstance(answer, bool) and agrees(shown, answer)
    if isinstance(shown, str):
        rest_left_out = shown.endswith("...") and isinstance(answer, str) and answer.startswith(shown[:-3])
        return bool(ANY.fullmatch(shown)) or answer == shown or rest_left_out
    return answer is shown  # true, false, null


def _object_mismatch(shown: dict, answer: Any, where: str) -> str | None:
    if not isinstance(answer, dict):
        return f"{where or 'the answer'} is {answer!r}, not an object"
    for name, value in shown.items():
        if name == MORE:
            continue
        if name not in answer:
            return f"{where or 'the answer'} has no {name!r}"
        if problem := mismatch(value, answer[name], f"{where}.{name}"):
            return problem
    if MORE not in shown and (extra := sorted(set(answer) - set(shown))):
        return f"{where or 'the answer'} has {extra} too (add ... to the page to leave them out)"
    return None


def _list_mismatch(shown: list, answer: Any, where: str) -> str | None:
    if not isinstance(answer, list):
        return f"{where or 'the answer'} is {answer!r}, not an array"
    items = [item for item in shown if item != MORE]
    if len(items) == len(shown):
        if len(answer) != len(items):
            return f"{where or 'the answer'} has {len(answer)} items, not {len(items)}"
        problems = (mismatch(item, answer[k], f"{where}[{k}]") for k, item in enumerate(items))
        return next((problem for problem in problems if problem), None)
    start = 0  # the items shown, in that order, among others
    for item in items:
        problems = [mismatch(item, answer[k], f"{where}[{k}]") for k in range(start, len(answer))]
        if None not in problems:
            nearest = problems[0] if problems else "no items left"
            return f"{where or 'the answer'} has no item {_render(item)} in the order shown ({nearest}, ...)"
        start += problems.index(None) + 1
    return None


def _render(pattern: Any) -> str:
    """A pattern as a page writes it."""
    if isinstance(pattern, Figure):
        return str(pattern)
    if pattern == MORE:
        return "..."
    if isinstance(pattern, dict):
        members = (f"{json.dumps(name)}: {_render(value)}" for name, value in pattern.items() if name != MORE)
        return "{" + ", ".join([*members, *(["..."] if MORE in pattern else [])]) + "}"
    if isinstance(pattern, list):
        return "[" + ", ".join(map(_render, pattern)) + "]"
    return json.dumps(pattern)


def agrees(figure: str, value: float) -> bool:
    """`value` rounded to the digits of `figure` is `figure` (half a unit of its last digit either way)."""
    shown = Decimal(figure)
    half_unit = Decimal(1).scaleb(shown.as_tuple().exponent) / 2
    return abs(Decimal(value) - shown) <= max(half_unit, abs(shown) * Decimal("1e-9"))


def cell_mismatch(shown: str, cell: str) -> str | None:
    if ANY.fullmatch(shown) or shown == cell:
        return None
    try:
        if agrees(shown, float(cell)):
            return None
    except (ArithmeticError, ValueError):  # a cell that is no number
        pass
    return f"{cell!r}, not {shown!r}"


def file_mismatch(shown: FileShown, directory: Path) -> str | None:
    path = directory / shown.name
    if not path.is_file():
        return f"no file {shown.name} (files: {sorted(p.name for p in directory.iterdir())})"
    lines = path.read_text().splitlines()
    for k, line in enumerate(shown.lines):
        if k >= len(lines):
            return f"{shown.name} has {len(lines)} lines, not {len(shown.lines)} or more"
        cells, shown_cells = lines[k].split(","), line.split(",")
        if len(cells) != len(shown_cells):
            return f"{shown.name} line {k + 1} is {lines[k]!r}, not {line!r}"
        for cell, shown_cell in zip(cells, shown_cells, strict=True):
            if problem := cell_mismatch(shown_cell, cell):
                return f"{shown.name} line {k + 1}: {problem}"
    return None


# A number in a line of text: not part of a word (h100, bf16) nor the tail of a date (2026-01-01).
NUMBER = re.compile(r"(?<![\w.-])-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])")


def line_mismatch(shown: str, line: str) -> str | None:
    """Why the printed `line` is not the `shown` one (`<...>` any text, numbers to the digits shown)."""
    pattern, figures, k = [], [], 0
    tokens = re.compile(rf"{ANY.pattern}|{NUMBER.pattern}|\s+")
    for token in tokens.finditer(shown):
        pattern.append(re.escape(shown[k : token.start()]))
        if ANY.fullmatch(token.group()):
            pattern.append(".+?")
        elif token.group().isspace():
            pattern.append(r"\s+")
        else:
            figures.append(token.group().replace(",", ""))
            pattern.append(f"({NUMBER.pattern})")
        k = token.end()
    pattern.append(re.escape(shown[k:]))
    found = re.fullmatch("".join(pattern), line.strip())
    if found is None:
        return f"{line.strip()!r}, not {shown!r}"
    for figure, printed in zip(figures, found.groups(), strict=True):
        if not agrees(figure, float(printed.replace(",", ""))):
            return f"{line.strip()!r}: {printed}, not {figure}"
    return None


def prints_mismatch(shown: PrintsShown, printed: str) -> str | None:
    """Why `printed` is not the lines shown, in order (`...` for any lines left out)."""
    lines = [line for line in printed.splitlines() if line.strip()]
    at, skipping = 0, False
    for want in shown.lines:
        if want == "...":
            skipping = True
            continue
        while skipping and at < len(lines) and line_mismatch(want, lines[at]):
            at += 1
        if at >= len(lines):
            return f"it printed no line {want!r}" + (" after the ones shown before" if skipping else "")
        if problem := line_mismatch(want, lines[at]):
            return f"line {at + 1} of what it printed is {problem}"
        at, skipping = at + 1, False
    if not skipping and at < len(lines):
        return f"it printed {len(lines) - at} more lines (end the lines shown with ... to leave them out)"
    return None


def step_problems(step: Step, printed: str, directory: Path) -> list[str]:
    """What `printed`, the output of `step` run in `directory`, lacks of what its page shows."""
    status, reason, headers, body = _http(printed)
    problems, shown_statuses = [], set()
    for check in step.checks():
        if isinstance(check, StatusShown):
            shown_statuses.add(check.status)
            problems += _status_problems(check, status, reason, headers)
        elif isinstance(check, JsonShown):
            if isinstance(check.pattern, dict) and isinstance(check.pattern.get("status"), Figure):
                shown_statuses.add(int(check.pattern["status"]))
            try:
                answer = json.loads(body)
            except ValueError:
                problems.append(f"line {check.line}: the answer is not JSON")
                continue
            if problem := mismatch(check.pattern, answer):
                problems.append(f"line {check.line}: {problem}")
        elif isinstance(check, PrintsShown):
            if problem := prints_mismatch(check, printed):
                problems.append(f"line {check.line}: {problem}")
        elif problem := file_mismatch(check, directory):
            problems.append(f"line {check.line}: {problem}")
    error = status if status is not None and status >= 400 else _problem_status(body)
    if error is not None and error not in shown_statuses:
        problems.append(f"it answered HTTP {error}, which the page does not show")
    return problems


def _http(printed: str) -> tuple[int | None, str, dict[str, str], str]:
    """The status, reason, headers and body of what `curl -i` printed; only a body for the rest."""
    if not printed.startswith("HTTP/"):
        return None, "", {}, printed
    head, _, body = printed.replace("\r\n", "\n").partition("\n\n")
    status_line, *header_lines = head.splitlines()
    _, status, reason = [*status_line.split(" ", 2), ""][:3]
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status), reason, {name.lower(): value for name, value in headers.items()}, body


def _status_problems(shown: StatusShown, status, reason: str, headers: dict[str, str]) -> list[str]:
    if status is None:
        return [f"line {shown.line}: it printed no status line (curl -i)"]
    problems = []
    if (status, reason.lower()) != (shown.status, shown.reason.lower()):
        problems.append(
            f"line {shown.line}: the status is {status} {reason}, not {shown.status} {shown.reason}"
        )
    for name, value in shown.headers:
        expected = ".+".join(re.escape(part) for part in ANY.split(value))
        if not re.fullmatch(expected, headers.get(name.lower(), "")):
            problems.append(f"line {shown.line}: {name} is {headers.get(name.lower())!r}, not {value!r}")
    return problems


def _problem_status(body: str) -> int | None:
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    if isinstance(answer, dict) and isinstance(answer.get("status"), int) and "title" in answer:
        return answer["status"] if answer["status"] >= 400 else None
    return None

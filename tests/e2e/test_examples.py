"""The examples of the README and of the docs site, run as a newcomer runs them: each page's shell blocks in
order against a fresh server (after the pages it continues from), each command's output checked against what
the page shows of it (tests/examples.py says how a page shows it, and how a block is left out)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.commands import ROOT, development_admin_key
from tests.examples import Block, Step, chain, code_blocks, page_name, pages, step_problems, steps

pytestmark = pytest.mark.e2e


@pytest.fixture
def server_env() -> dict[str, str]:
    return {"PLANNER_ADMIN_KEY": development_admin_key()}  # as `make run`, whose key the examples send


Ran = list[tuple[int, str, str]]


def run_in_one_shell(commands: list[Step], directory: Path, env: dict[str, str]) -> Ran:
    """(exit status, stdout, stderr) of each command, run in order by one bash in `directory` until one fails,
    so that what a command sets the next reads."""
    outputs = directory / ".outputs"
    outputs.mkdir()
    script = []
    for k, step in enumerate(commands):
        # A group, not a subshell: its variables stay set. The newline ends a comment on its last line.
        script.append(
            f'{{ {step.command}\n}} >"{outputs}/{k}.out" 2>"{outputs}/{k}.err"; status=$?\n'
            f'echo $status >"{outputs}/{k}.status"; [ $status = 0 ] || exit $status'
        )
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=directory, env=env, timeout=600, check=False)
    ran = []
    for k in range(len(commands)):
        if not (outputs / f"{k}.status").exists():
            break
        ran.append(
            (
                int((outputs / f"{k}.status").read_text()),
                (outputs / f"{k}.out").read_text(),
                (outputs / f"{k}.err").read_text(),
            )
        )
    return ran


def runnable(page: Path, language: str) -> list[Block]:
    """The page's blocks of `language` that are not marked as not run."""
    return [block for block in code_blocks(page.read_text(), language) if block.not_run is None]


def page_steps(page: Path) -> list[Step]:
    return steps(runnable(page, "sh"))


def terminal(base: str, directory: Path) -> dict[str, str]:
    """A newcomer's terminal after the setup the docs' first page gives: the server's address, the key, the
    header the curl lines send; at the repository's root, with its .venv (the one running these tests)."""
    key = development_admin_key()
    (directory / ".venv").symlink_to(Path(sys.prefix))
    return os.environ | {
        "PLANNER_URL": base,
        "PLANNER_API_KEY": key,
        "AUTH": f"Authorization: Bearer {key}",
        "XDG_CONFIG_HOME": str(directory / ".config"),  # `planner config` writes here, not in your home
    }


@pytest.mark.parametrize("page", pages(), ids=page_name)
def test_every_shell_example_of_a_page_runs_in_order_and_prints_what_the_page_shows(page, server, tmp_path):
    base, _, _ = server
    before = [step for earlier in chain(page)[:-1] for step in page_steps(earlier)]
    commands = page_steps(page)
    examples = tmp_path / "examples"  # where a newcomer's terminal is: files the examples write land here
    examples.mkdir()

    terminal_env = terminal(base, examples)
    ran = run_in_one_shell(before + commands, examples, terminal_env)

    problems = [
        f"{page_name(page)} continues from a page whose command failed: {step.command.splitlines()[0]}\n  "
        f"exit status {status}: {errors or printed}"
        for step, (status, printed, errors) in zip(before, ran, strict=False)
        if status != 0
    ]
    for step, (status, printed, errors) in zip(commands, ran[len(before) :], strict=False):
        found = [f"exit status {status}: {errors or printed}"] if status != 0 else []
        found += step_problems(step, printed, examples)
        if found:
            problems.append(
                f"{page_name(page)} line {step.line}: {step.command.splitlines()[0]}\n  "
                + "\n  ".join(found)
                + f"\n  it printed: {printed[:2000]}"
            )
    for block in runnable(page, "python"):
        done = subprocess.run(
            [sys.executable, "-c", "\n".join(line for _, line in block.lines)],
            cwd=examples,
            env=terminal_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            problems.append(
                f"{page_name(page)} line {block.line}: the Python block failed: {done.stderr[-2000:]}"
            )
    assert not problems, "\n".join(problems)
    assert len(ran) == len(before) + len(commands), f"{page_name(page)}: not every command ran"
    if page.name == "command-line.md":
        assert what_the_command_line_job_left(base) == {
            "budgets committed": ["47923.20"],  # committed, then its run's one day: the rest settled back
            "budgets spent": ["47923.20"],
            "plans": ["draft", "completed"],  # the revision, and its parent
            "price_per_hour": "1.95",
        }


def what_the_command_line_job_left(base: str) -> dict:
    """What the command-line walk-through's job (organisation globex) leaves on the server."""
    headers = {"Authorization": f"Bearer {development_admin_key()}"}

    def get(path: str, **params: str) -> dict:
        response = requests.get(f"{base}{path}", params=params, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    return {
        "budgets committed": [b["committed"] for b in get("/v1/budgets", organization="globex")["items"]],
        "budgets spent": [b["spent"] for b in get("/v1/budgets", organization="globex")["items"]],
        "plans": [plan["status"] for plan in get("/v1/plans", organization="globex")["items"]],
        "price_per_hour": get("/v1/hardware/globex-h100")["price_per_hour"],
    }


def test_no_example_that_runs_names_a_servers_address():
    """Every example reaches the server through $PLANNER_URL, so that it runs against any server: the one
    `make run` serves, or a test's on a port of its own."""
    named = [
        f"{page_name(page)} line {step.line}"
        for page in pages()
        for step in page_steps(page)
        if any(address in step.command for address in ("localhost:", "127.0.0.1:"))
    ]
    assert not named


def test_the_command_line_examples_find_planner_in_a_newcomers_terminal():
    """After `make run`, in another terminal at the repository's root: its PATH has no .venv/bin."""
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("the tests do not run in the repository's .venv, which the examples use")
    page = ROOT / "docs" / "how-to" / "command-line.md"
    lines = [line for step in page_steps(page) for line in step.command.splitlines()]
    first = next(k for k, line in enumerate(lines) if line.startswith("planner "))
    venv_bin = {str(Path(sys.prefix) / "bin"), str(ROOT / ".venv" / "bin")}
    path = [entry for entry in os.environ["PATH"].split(os.pathsep) if entry.rstrip("/") not in venv_bin]
    newcomer = {name: value for name, value in os.environ.items() if name != "VIRTUAL_ENV"}

    done = subprocess.run(
        ["bash", "-c", "\n".join([*lines[:first], "planner --help"])],
        cwd=ROOT,
        env=newcomer | {"PATH": os.pathsep.join(path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr

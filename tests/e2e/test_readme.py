"""The README's examples, run as a newcomer runs them: every shell block in order against a fresh server, each
command's output checked against what the README shows of it (tests/readme.py says how the README shows it,
and how a block is left out)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.commands import ROOT, development_admin_key
from tests.readme import Step, shell_blocks, step_problems, steps

pytestmark = pytest.mark.e2e

README = ROOT / "README.md"


@pytest.fixture
def server_env() -> dict[str, str]:
    return {"PLANNER_ADMIN_KEY": development_admin_key()}  # as `make run`, whose key the examples send


def run_in_one_shell(commands: list[Step], directory: Path, address: str) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each command, run in order by one bash in `directory` until one fails,
    so that what a command sets the next reads; `localhost:8000` is `address`."""
    outputs = directory / ".outputs"
    outputs.mkdir()
    script = []
    for k, step in enumerate(commands):
        command = step.command.replace("localhost:8000", address)
        # A group, not a subshell: its variables stay set. The newline ends a comment on its last line.
        script.append(
            f'{{ {command}\n}} >"{outputs}/{k}.out" 2>"{outputs}/{k}.err"; status=$?\n'
            f'echo $status >"{outputs}/{k}.status"; [ $status = 0 ] || exit $status'
        )
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=directory, env=os.environ, timeout=600, check=False)
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


def test_every_shell_example_of_the_readme_runs_in_order_and_prints_what_the_readme_shows(server, tmp_path):
    base, _, _ = server
    commands = steps([block for block in shell_blocks(README.read_text()) if block.not_run is None])
    examples = tmp_path / "examples"  # where a newcomer's terminal is: files the examples write land here
    examples.mkdir()
    # The command-line examples start with `. .venv/bin/activate`, said at the repository's root: the
    # terminal here has the same .venv, the one running these tests.
    (examples / ".venv").symlink_to(Path(sys.prefix))

    port = base.rsplit(":", 1)[1]
    ran = run_in_one_shell(commands, examples, f"localhost:{port}")

    problems = []
    for step, (status, printed, errors) in zip(commands, ran, strict=False):
        found = [f"exit status {status}: {errors or printed}"] if status != 0 else []
        found += step_problems(step, printed, examples)
        if found:
            problems.append(
                f"README line {step.line}: {step.command.splitlines()[0]}\n  "
                + "\n  ".join(found)
                + f"\n  it printed: {printed[:2000]}"
            )
    assert not problems, "\n".join(problems)
    assert len(ran) == len(commands), f"README line {commands[len(ran)].line} and after did not run"
    assert what_the_command_line_job_left(base) == {
        "budgets committed": ["47923.20"],  # committed, then its run's one day: the rest settled back
        "budgets spent": ["47923.20"],
        "plans": ["draft", "completed"],  # the revision, and its parent
        "price_per_hour": "1.95",
    }


def what_the_command_line_job_left(base: str) -> dict:
    """What the README's command-line job (organisation globex) leaves on the server, which its tables show
    in prose only."""
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


def test_the_readme_command_line_examples_find_planner_in_a_newcomers_terminal():
    """After `make run`, in another terminal at the repository's root: its PATH has no .venv/bin."""
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("the tests do not run in the repository's .venv, which the README's examples use")
    cli = next(
        block
        for block in shell_blocks(README.read_text())
        if any(line.startswith("planner ") for _, line in block.lines)
    )
    lines = [line for _, line in cli.lines]
    first = next(k for k, line in enumerate(lines) if line.startswith("planner "))
    venv_bin = {str(Path(sys.prefix) / "bin"), str(ROOT / ".venv" / "bin")}
    path = [entry for entry in os.environ["PATH"].split(os.pathsep) if entry.rstrip("/") not in venv_bin]
    terminal = {name: value for name, value in os.environ.items() if name != "VIRTUAL_ENV"}

    done = subprocess.run(
        ["bash", "-c", "\n".join([*lines[:first], "planner --help"])],
        cwd=ROOT,
        env=terminal | {"PATH": os.pathsep.join(path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr

"""`planner`'s tables fit: 100 columns for a file, a pipe or a document (the README's and the docs' examples),
the terminal's width on a terminal, COLUMNS' when it is set. Every command is run against a server the test
fills (an organisation, hardware, offers, budgets, plans through their life, usage, laws, a calibration,
keys, webhooks, profiles), and no line it prints is wider."""

from __future__ import annotations

import io
import os
import sys

import pytest

from planner_client import cli
from tests.client.test_command_line import leaves
from tests.client.test_command_line_served import VMS_CSV, named
from tests.client.test_command_line_served import served as served  # noqa: PLC0414 -- the fixture

# What prints no table: a shell's script, and FOCUS's CSV file (its rows are as long as their columns).
NOT_TABLES = {"completion", "report focus"}
# Runs measured on H100s, for the laws fitted and the calibration.
RUNS_CSV = "params,tokens,loss\n" + "".join(
    f"{n:g},{d:g},{1.69 + 406.4 / n**0.34 + 410.7 / d**0.28:.4f}\n"
    for n in (5e7, 1e8, 2e8, 5e8, 1e9, 2e9)
    for d in (1e9, 1e10, 1e11)
)
LONG_NAME = "FY27 flagship pretraining run, second attempt with the longer context and the new data mix"
DEEPSEEK_V3 = ["--params=671e9", "--tokens=14.8e12", "--layers=61", "--d-model=7168", "--heads=128"]
DEEPSEEK_V3 += ["--sequence-length=4096", "--experts=256", "--experts-per-token=8", "--shared-experts=1"]
DEEPSEEK_V3 += ["--expert-ffn=2048", "--dense-layers=3", "--kv-lora-rank=512", "--q-lora-rank=1536"]


class Commands:
    """`planner` run command after command (as planner of acme unless a key is given), each one's output kept
    with the command it ran."""

    def __init__(self, capsys):
        self.capsys = capsys
        self.printed: dict[str, list[str]] = {}

    def run(self, *argv: str, key: str | None = None, code: int = 0) -> str:
        given = ["--api-key", key] if key else []
        assert cli.main([*given, *argv]) == code, self.capsys.readouterr().err
        out = self.capsys.readouterr().out
        path = " ".join(word for word in argv if not word.startswith("-"))
        self.printed.setdefault(command_of(path), []).append(out)
        return out

    def made(self, *argv: str, key: str | None = None) -> str:
        """The id of what a command made, as its table shows it."""
        return named(self.run(*argv, key=key))["id"]


def command_of(words: str) -> str:
    """The command a line of words runs (its arguments left out)."""
    for path in sorted(leaves(cli.planner), key=len, reverse=True):
        if f"{words} ".startswith(f"{path} "):
            return path
    return words


@pytest.fixture
def commands(served, capsys, tmp_path, small_fit_grid, monkeypatch) -> Commands:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return Commands(capsys)


def organisations_hardware_and_offers(commands: Commands, admin: str, tmp_path) -> None:
    """Organisations, hardware, offers."""
    run = commands.run
    run("organization", "create", "globex", "--name", "Globex Research and Development", key=admin)
    run("organization", "list")
    run("organization", "show", "acme")
    profile = ["--slug=globex-h100", "--name=H100 (Globex negotiated price, 3-year reservation)"]
    profile += ["--vendor=NVIDIA", "--peak-flops=bf16=989.4e12", "--memory-bytes=80e9"]
    profile += ["--memory-bandwidth-bytes-per-second=3.35e12", "--source=NVIDIA H100 datasheet"]
    run("hardware", "create", *profile, "--price-per-hour=2.10", "--currency=USD", key=admin)
    run("hardware", "update", "globex-h100", "--price-per-hour=1.95", "--currency=USD", key=admin)
    run("hardware", "list", "--limit=100")
    run("hardware", "show", "h100-sxm")
    run("hardware", "prices", "globex-h100")
    catalog = tmp_path / "vms.csv"
    catalog.write_text(VMS_CSV)
    spot = ["--spot-preemptions-per-instance-hour=1.07e-4", "--spot-preemptions-source=Advisor 5-10%"]
    run("offer", "import", str(catalog), "--provider=aws", "--source=vms.csv", *spot, key=admin)
    owned = ["--slug=ours-h100", "--hardware=h100-sxm", "--pricing=on_demand", "--provider=ours"]
    owned += ["--region=home", "--price-per-hour=2.00", "--currency=USD", "--source=our books"]
    run("offer", "create", *owned, key=admin)
    run("offer", "list")
    run("offer", "show", "aws-p5-48xlarge-us-east-2")
    run("offer", "prices", "aws-p5-48xlarge-us-east-2")
    run("compare", "--params=7e9", "--tokens=1.4e11", "--days=10", "--hardware=h100-sxm")


def the_science(commands: Commands) -> None:
    """The science."""
    run = commands.run
    run("allocate", "--pf-days=6000")
    run(
        "allocate",
        "--cost=2000000.00",
        "--currency=USD",
        "--days=30",
        "--hardware=h100-sxm",
        "--law=epoch-2024",
    )
    run("estimate", *DEEPSEEK_V3, "--hardware=h100-sxm", "--accelerators=2048", "--expert-parallel=64")
    run("layout", *DEEPSEEK_V3, "--hardware=h100-sxm", "--accelerators=2048", "--context-parallel=2")


def a_budget_plans_and_their_runs(commands: Commands, finance: str) -> str:
    """A budget, plans through their life, their runs, what a webhook is sent of them."""
    run, made = commands.run, commands.made
    hook = ["webhook", "create", "--organization=acme", "--url=https://hooks.acme.example/planner/events"]
    webhook = made(*hook, "--event-type=plan.failed", "--description", LONG_NAME)
    budget = ["budget", "create", "--organization=acme", "--name", LONG_NAME, "--amount=20000000.00"]
    budget += ["--currency=USD", "--period-start=2026-10-01T00:00:00Z", "--period-end=2027-10-01T00:00:00Z"]
    budget_id = made(*budget, "--label=cost_center=ml-42", key=finance)
    run("budget", "update", budget_id, "--approval-above=2000000.00", key=finance)
    plan = ["plan", "create", "--organization=acme", f"--budget-id={budget_id}", "--name", LONG_NAME]
    plan += ["--hardware=h100-sxm", "--accelerators=1024", "--start-at=2026-11-01T00:00:00Z"]
    first = made(*plan, "--cost=1000000.00", "--currency=USD", "--law=chinchilla-2022")
    run("plan", "show", first)
    run("plan", "commit", first)
    larger, refused = (made(*plan, "--cost=3000000.00", "--currency=USD") for _ in range(2))
    run("plan", "commit", larger)
    run(
        "plan", "approve", larger, "--note", "Roadmap item 4: the flagship, approved by the CFO.", key=finance
    )
    run("plan", "commit", refused)
    run("plan", "reject", refused, "--note", "One flagship a quarter.", key=finance)
    revised = made("plan", "revise", first, "--accelerators=2048", "--name", f"{LONG_NAME}, 2048")
    run("plan", "compare", first, revised)
    run("plan", "cancel", revised)
    run("plan", "list")
    report = ["usage", "report", first, "--reporter=slurm-cluster-a", "--accelerator-hours=24576"]
    run(*report, "--from=2026-11-01T00:00:00Z", "--to=2026-11-02T00:00:00Z", "--tokens-per-second=3.1e6")
    wrong = made(*report, "--from=2026-11-02T06:30:00Z", "--to=2026-11-03T06:30:00Z", "--tokens=2e11")
    run("usage", "reverse", first, wrong, "--note", "Reported twice by the retry of a lost answer.")
    run("usage", "list", first)
    run("plan", "start", larger)
    run("plan", "fail", larger)
    run("budget", "list")
    run("budget", "show", budget_id)
    run("budget", "forecast", budget_id)
    run("budget", "utilization", budget_id)
    run("budget", "ledger", budget_id)
    window = ["--from=2026-01-01T00:00:00Z", "--to=2028-01-01T00:00:00Z"]
    run(
        "report",
        "costs",
        *window,
        "--group-by=budget,label:cost_center",
        "--granularity=month",
        "--measure=both",
    )
    run("report", "focus", *window)
    run("report", "accuracy", "--detail")
    calibration = made("calibration", "create", "--organization=acme", "--hardware=h100-sxm")
    run("calibration", "list")
    run("calibration", "show", calibration)
    run("plan", "complete", first)
    return webhook


def laws_keys_webhooks_and_profiles(commands: Commands, admin: str, webhook: str, tmp_path) -> None:
    """Events, laws, keys, webhooks, profiles."""
    run, made = commands.run, commands.made
    run("event", "list", key=admin)
    runs = tmp_path / "runs.csv"
    runs.write_text(RUNS_CSV)
    run("law", "fit", "--organization=acme", "--name=Acme sweep of 2026, 18 runs", f"--runs={runs}")
    run("law", "list", "--organization=acme")
    run("law", "show", "chinchilla-2022")
    key_id = made("key", "create", "--role=viewer", "--organization=acme", "--name", LONG_NAME, key=admin)
    run("key", "list", key=admin)
    run("key", "revoke", key_id, key=admin)
    run("webhook", "list")
    run("webhook", "show", webhook)
    run("webhook", "update", webhook, "--event-type=plan.failed", "--event-type=budget.threshold_crossed")
    run("webhook", "rotate-secret", webhook)
    assert "pending" in run("webhook", "deliveries", webhook)  # of the plan that failed
    delivery = run("webhook", "deliveries", webhook, "--get=id").split()[0]
    run("webhook", "redeliver", webhook, delivery, code=cli.EXIT_CONFLICT)  # only a failed one is sent again
    run("webhook", "delete", webhook)
    run("config", "set", "--profile=production", "url", "https://planner.example.com")
    run("config", "set", "--profile=production", "api_key_command", "pass show compute-planner/production")
    run("config", "use", "production")
    run("config", "unset", "--profile=production", "api_key_command")
    run("config", "list")
    run("config", "path")


def test_every_command_prints_tables_within_100_columns(commands, issue_key, tmp_path):
    admin, finance = issue_key("admin"), issue_key("finance", "acme")
    organisations_hardware_and_offers(commands, admin, tmp_path)
    the_science(commands)
    webhook = a_budget_plans_and_their_runs(commands, finance)
    laws_keys_webhooks_and_profiles(commands, admin, webhook, tmp_path)

    assert set(leaves(cli.planner)) - NOT_TABLES - set(commands.printed) == set()
    too_wide = {
        command: line
        for command, outputs in commands.printed.items()
        if command not in NOT_TABLES
        for line in "".join(outputs).splitlines()
        if len(line) > cli.TABLE_WIDTH
    }
    assert too_wide == {}


@pytest.mark.parametrize(("columns", "limit"), [(None, 100), ("60", 100), ("160", 160)])
def test_a_pipes_tables_are_100_columns_or_as_wide_as_columns_says(
    served, capsys, monkeypatch, columns, limit
):
    if columns:
        monkeypatch.setenv("COLUMNS", columns)

    assert cli.main(["hardware", "list", "--limit=100"]) == 0

    widest = max(len(line) for line in capsys.readouterr().out.splitlines())
    assert widest <= limit
    assert (widest > cli.TABLE_WIDTH) == (limit > cli.TABLE_WIDTH)  # its links shown when there is room


@pytest.mark.parametrize("columns", [60, 180])
def test_a_terminal_gets_tables_as_wide_as_it_is(served, capsys, monkeypatch, columns):
    terminal = io.StringIO()
    terminal.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(os, "get_terminal_size", lambda *_: os.terminal_size((columns, 50)))

    assert cli.main(["hardware", "list", "--limit=100"]) == 0

    widest = max(len(line) for line in terminal.getvalue().splitlines())
    assert widest <= columns
    assert (
        widest > cli.TABLE_WIDTH if columns > cli.TABLE_WIDTH else widest > columns - 10
    )  # it uses the room


def test_a_list_leaves_out_its_optional_columns_before_it_cuts_a_figure(monkeypatch, capsys):
    plan = {
        "id": "5e1f15fd-c368-49d6-9e28-70ff84047589",
        "name": "A name longer than a list has room for, of a plan with a story",
        "status": "committed",
        "organization": "acme",
        "params": 2.26e10,
        "tokens": 1.19e12,
        "days": 5.686,
        "cost": "961353.36",
        "currency": "USD",
        "created_at": "2026-12-07T08:40:00.123+00:00",
    }
    monkeypatch.setattr(cli.PlannerClient, "plans", lambda *_, **__: iter([plan]))

    assert cli.main(["plan", "list"]) == 0

    header, _, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["id", "name", "status", "days", "cost"]
    assert row.split()[0] == plan["id"]  # an id is never cut
    assert row.endswith("committed  5.686  961,353.36 USD")  # nor a figure; the name is, with an ellipsis
    assert row.split("  ")[1].startswith("A name longer than a list")
    assert row.split("  ")[1].endswith("…")
    assert len(row) <= cli.TABLE_WIDTH


def test_a_long_value_wraps_under_itself_and_reads_the_same_joined():
    text = " · ".join(f"part {k} of a layout line that goes on" for k in range(8))

    lines = cli.key_value_table([("layout", text), ("days", "5.686 days")]).splitlines()

    assert all(len(line) <= cli.TABLE_WIDTH for line in lines)
    assert lines[0].startswith("layout  part 0")
    assert all(line.startswith(" " * len("layout  ")) for line in lines[1:-1])
    assert all(line.endswith(" ·") for line in lines[:-2])  # broken after a separator
    assert " ".join(line[len("layout  ") :] for line in lines[:-1]) == text
    assert lines[-1] == "days    5.686 days"


@pytest.mark.parametrize("width", [40, 73, 100])
def test_fitted_columns_add_up_to_the_width_at_most(width):
    natural = [36, 49, 9, 12, 5, 5, 6, 14, 17]
    cells = [36, 49, 9, 4, 5, 5, 5, 14, 17]

    shown, widths = cli.fit_columns(natural, cells, width, text={1}, keep={0}, optional=[8, 3])

    assert sum(widths[k] for k in shown) + cli.GAP * (len(shown) - 1) <= width
    assert all(widths[k] >= 1 for k in shown)
    assert (0 in shown, widths[0] == 36) == (True, width >= 60)  # the id cut only when nothing else can be

"""`planner`'s command tree, read without a server: every use case has a command, every option says what it
does, every command can answer in JSON, and figures read as people read them."""

from __future__ import annotations

import click
import pytest

from planner_client import __version__, cli

# What an operator or a finance user runs by hand (README, Python client and command line).
USE_CASES = [
    "allocate",
    "estimate",
    "organization create",
    "organization list",
    "organization show",
    "hardware create",
    "hardware list",
    "hardware show",
    "hardware update",
    "hardware prices",
    "budget create",
    "budget list",
    "budget show",
    "budget update",
    "budget utilization",
    "budget ledger",
    "key create",
    "key list",
    "key revoke",
    "plan create",
    "plan list",
    "plan show",
    "plan revise",
    "plan commit",
    "plan cancel",
    "plan compare",
    "report costs",
    "law fit",
    "law list",
    "law show",
]


def command(path: str) -> click.Command:
    found: click.Command = cli.planner
    for name in path.split():
        assert isinstance(found, click.Group), f"{found.name} has no commands"
        assert name in found.commands, f"`planner {path}`: no command {name!r}"
        found = found.commands[name]
    return found


def leaves(group: click.Group, prefix: str = "") -> list[str]:
    """Every command that runs (not a group of commands), by its path."""
    found = []
    for name, sub in group.commands.items():
        path = f"{prefix}{name}"
        found += leaves(sub, path + " ") if isinstance(sub, click.Group) else [path]
    return found


@pytest.mark.parametrize("path", USE_CASES)
def test_every_use_case_has_a_command_that_says_what_it_does(path):
    assert command(path).get_short_help_str().strip()


@pytest.mark.parametrize("path", leaves(cli.planner))
def test_every_option_of_every_command_has_help_text(path):
    undocumented = [
        param.opts[0] for param in command(path).params if isinstance(param, click.Option) and not param.help
    ]
    assert not undocumented, f"`planner {path}`: {undocumented} without help"


@pytest.mark.parametrize("path", leaves(cli.planner))
def test_every_command_answers_in_json_for_scripts(path):
    assert "--json" in [opt for param in command(path).params for opt in param.opts]


def test_a_plan_names_the_budget_it_is_charged_to_apart_from_the_money_it_may_spend():
    options = {opt: param for param in command("plan create").params for opt in param.opts}
    assert "--budget" not in options  # was "remaining" or nothing, beside --budget-id
    assert "commit" in options["--budget-id"].help
    assert "remaining" in options["--spend-remaining"].help


def test_planner_version_is_the_releases(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"planner {__version__}"


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("params", 6.5726706900e10, "65.7B"),
        ("tokens", 1.3145e12, "1.31T"),
        ("unique_tokens", 5e8, "500M"),
        ("flops", 3.9e23, "3.9e+23 FLOPs"),
        ("pf_days", 6000.0, "6,000 PF-days"),
        ("days", 23.684, "23.68 days"),
        ("accelerator_hours", 512820.51, "512,821"),
        ("memory_bytes", 80000000000, "80 GB"),
        ("total_bytes", 28.31e9, "28.3 GB"),
        ("memory_bandwidth_bytes_per_second", 3.35e12, "3.35 TB/s"),
        ("peak_flops.bf16", 989.4e12, "989.4 TFLOP/s"),
        ("utilization", 0.4, "40%"),
        ("predicted_loss", 1.98371, "1.984"),
        ("built_in", True, "yes"),
    ],
)
def test_figures_are_shown_in_the_units_people_read(name, value, shown):
    assert cli.human(name, value) == shown


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("cost", "1000000.00", "1,000,000.00 USD"),
        ("remaining", "0.00", "0.00 USD"),
        ("price_per_hour", "2.10", "2.10 USD/h"),
        ("burn_rate_per_day", "11111.11", "11,111.11 USD/day"),
    ],
)
def test_money_is_shown_exactly_with_its_currency(name, value, shown):
    assert cli.human(name, value, currency="USD") == shown


# --- Hardware as installed in a cluster ---------------------------------------------------------------------

H100_AS_INSTALLED = {
    "slug": "our-h100",
    "name": "Our H100",
    "accelerators_per_node": 8,
    "scale_up_bandwidth_bytes_per_second": 450_000_000_000,
    "scale_out_bandwidth_bytes_per_second": 6_250_000_000,
    "failures_per_accelerator_hour": 1.97e-5,
}


def test_hardware_create_takes_links_in_gb_per_second_and_sends_bytes_per_second(monkeypatch, capsys):
    sent = {}

    def create_hardware(_client, **request):
        sent.update(request)
        return request

    monkeypatch.setattr(cli.PlannerClient, "create_hardware", create_hardware)

    code = cli.main(
        [
            "hardware",
            "create",
            "--slug=our-h100",
            "--name=Our H100",
            "--accelerators-per-node=8",
            "--scale-up-gb-per-second=450",
            "--scale-out-gb-per-second=6.25",
            "--failures-per-accelerator-hour=1.97e-5",
        ]
    )

    assert code == 0
    assert sent == H100_AS_INSTALLED
    shown = capsys.readouterr().out
    assert "450 GB/s" in shown
    assert "6.25 GB/s" in shown


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_link_that_is_not_a_finite_number_is_refused_before_it_is_sent(monkeypatch, capsys, value):
    monkeypatch.setattr(cli.PlannerClient, "create_hardware", lambda *_, **__: pytest.fail("sent"))

    code = cli.main(["hardware", "create", "--slug=our-h100", f"--scale-up-gb-per-second={value}"])

    assert code == 2
    assert "--scale-up-gb-per-second" in capsys.readouterr().err


def test_hardware_list_shows_per_node_and_each_way_links_in_gb_per_second(monkeypatch, capsys):
    monkeypatch.setattr(cli.PlannerClient, "hardware", lambda *_, **__: iter([H100_AS_INSTALLED]))

    assert cli.main(["hardware", "list"]) == 0

    header, _, row = capsys.readouterr().out.splitlines()[:3]
    assert "per node" in header
    assert "scale-up each way" in header
    assert "scale-out each way" in header
    assert row.split()[0] == "our-h100"
    assert "450 GB/s" in row
    assert "6.25 GB/s" in row

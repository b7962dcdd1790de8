"""`planner`'s command tree, read without a server: every use case has a command, every option says what it
does, every command can answer in JSON, and figures read as people read them."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time

import click
import pytest
import requests

from planner_client import PlannerClient, __version__, cli

# What an operator or a finance user runs by hand (README, Python client and command line).
USE_CASES = [
    "allocate",
    "estimate",
    "layout",
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
    "report focus",
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


def groups(group: click.Group, prefix: str = "") -> list[str]:
    """Every group of commands, by its path."""
    found = []
    for name, sub in group.commands.items():
        if isinstance(sub, click.Group):
            found += [f"{prefix}{name}", *groups(sub, f"{prefix}{name} ")]
    return found


def leaves(group: click.Group, prefix: str = "") -> list[str]:
    """Every command that runs (not a group of commands), by its path."""
    found = []
    for name, sub in group.commands.items():
        path = f"{prefix}{name}"
        found += leaves(sub, path + " ") if isinstance(sub, click.Group) else [path]
    return found


GROUPS = groups(cli.planner)


@pytest.mark.parametrize("path", USE_CASES)
def test_every_use_case_has_a_command_that_says_what_it_does(path):
    assert command(path).get_short_help_str().strip()


@pytest.mark.parametrize("path", [*leaves(cli.planner), *GROUPS])
def test_lists_of_commands_say_what_each_does_whole_not_cut_at_45_characters(path):
    # planner --help and the docs' reference (mkdocs-click) list a command by its short help.
    said = command(path).get_short_help_str(limit=45)
    assert said
    assert not said.endswith("...")
    assert "\n" not in command(path).short_help


@pytest.mark.parametrize("path", leaves(cli.planner))
def test_every_option_of_every_command_has_help_text(path):
    undocumented = [
        param.opts[0] for param in command(path).params if isinstance(param, click.Option) and not param.help
    ]
    assert not undocumented, f"`planner {path}`: {undocumented} without help"


# Commands whose answer is not data but a script for a shell.
SCRIPTS = {"completion"}


@pytest.mark.parametrize("path", [path for path in leaves(cli.planner) if path not in SCRIPTS])
def test_every_command_answers_in_json_or_csv_for_scripts(path):
    options = [opt for param in command(path).params for opt in param.opts]
    assert {"--json", "--output", "-o", "--get"} <= set(options)


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

    top, header, _, row = capsys.readouterr().out.splitlines()[:4]  # headers of two lines, to fit
    assert top.split() == ["per", "scale-up", "scale-out"]
    assert header.split()[-6:] == ["node", "each", "way", "each", "way", "price"]
    assert row.split()[0] == "our-h100"
    assert "450 GB/s" in row
    assert "6.25 GB/s" in row


# --- The cluster model: planner estimate and planner layout -------------------------------------------------


def layout_document(**overrides) -> dict:
    return {
        "tensor_parallel": 8,
        "pipeline_parallel": 16,
        "data_parallel": 128,
        "micro_batch": 1,
        "global_batch": 2048,
        "context_parallel": 1,
        "interleave": 8,
        "sequence_parallel": True,
        "recomputation": "none",
        "zero_stage": 1,
        "flash_attention": True,
        **overrides,
    }


# layout_document() as planner writes it.
LAYOUT_LINE = "TP 8 · PP 16 · DP 128 · micro-batch 1 · interleave 8 · ZeRO 1 · no recomputation"


def estimate_answer(**performance_overrides) -> dict:
    """An answer of POST /v1/estimates as the cluster model gives it: a 20 s step, 64% of it computing."""
    breakdown = {
        "compute": 12.8,
        "memory_bound": 0.4,
        "tensor_parallel": 2.6,
        "context_parallel": 0.0,
        "pipeline_bubble": 3.2,
        "pipeline_transfers": 0.2,
        "data_parallel": 0.6,
        "optimizer": 0.2,
    }
    alternative = {
        "layout": layout_document(pipeline_parallel=32, data_parallel=64, recomputation="selective"),
        "step_seconds": 21.5,
        "mfu": 0.372,
        "memory_bytes": 58.5e9,
    }
    return {
        "params": 405e9,
        "tokens": 15.6e12,
        "days": 54.21,
        "accelerator_hours": 21316000.0,
        "accelerators": 16384,
        "mfu": 0.4,
        "cost": "146654080.00",
        "currency": "USD",
        "memory": {"total_bytes": 70.7e9, "capacity_bytes": 80e9, "fits": True},
        "intervals": {
            "confidence": 0.8,
            "categories": ["parallelism", "scale"],
            "step_seconds": [16.4, 26.1],
            "days": [49.1, 92.3],
            "accelerator_hours": [19300000.0, 36300000.0],
            "cost": ["132784000.00", "249744000.00"],
        },
        "performance": {
            "framework": "torchtitan",
            "hardware_efficiency": {
                "gemm": 0.602,
                "attention": 0.199,
                "provenance": "calibrated",
                "basis": "...",
            },
            "step_seconds": 20.0,
            "steps": 7617,
            "tokens_per_step": 16777216,
            "mfu": 0.4,
            "hfu": 0.412,
            "breakdown": breakdown,
            "layout": layout_document(),
            "memory_bytes": 70.7e9,
            "alternatives": [alternative],
            "layouts_evaluated": 444,
            "layouts_fitting": 125,
            "goodput": {
                "interruptions": 693.4,
                "checkpoint_interval_seconds": 1137.5,
                "useful_fraction": 0.838,
                "run_overhead": 0.1,
                "run_overhead_source": "calibration",
            },
            "sizing": None,
            **performance_overrides,
        },
        "warnings": [],
    }


@pytest.fixture
def sent(monkeypatch) -> dict:
    """What planner sends to POST /v1/estimates; the server answers with estimate_answer()."""
    request: dict = {}

    def estimate(_client, **body):
        request.update(body)
        return estimate_answer()

    monkeypatch.setattr(cli.PlannerClient, "estimate", estimate)
    return request


def named(table: str) -> dict[str, str]:
    """A table of names and values, as planner prints an answer: its columns are two spaces or more apart,
    and a long value goes on under itself, on lines of its own that the space joins."""
    rows: list[list[str]] = []
    for line in table.splitlines():
        if line.startswith(" "):
            rows[-1][1] += " " + line.strip()
        else:
            rows.append([*re.split(r"\s{2,}", line, maxsplit=1), ""][:2])  # a value left empty too
    return dict(rows)


LLAMA3_405B_OPTIONS = ["--params=405e9", "--tokens=15.6e12", "--hardware=h100-sxm", "--layers=126"]
LLAMA3_405B_OPTIONS += [
    "--d-model=16384",
    "--heads=128",
    "--kv-heads=8",
    "--ffn=53248",
    "--activation=swiglu",
]
LLAMA3_405B_OPTIONS += ["--vocabulary=128256", "--sequence-length=8192"]


@pytest.mark.parametrize("command", ["estimate", "layout"])
def test_shape_layout_and_reliability_options_are_sent_as_the_requests_objects(sent, command):
    layout = ["--tensor-parallel=8", "--interleave=4", "--recomputation=selective", "--zero-stage=1"]
    layout += ["--no-sequence-parallel", "--no-flash-attention"]
    reliability = ["--checkpoint-write-gb-per-second=500", "--restart-seconds=300"]

    code = cli.main([command, *LLAMA3_405B_OPTIONS, "--days=90", *layout, *reliability])

    assert code == 0
    assert sent == {
        "params": 405e9,
        "tokens": 15.6e12,
        "hardware": "h100-sxm",
        "days": 90.0,
        "shape": {
            "layers": 126,
            "d_model": 16384,
            "heads": 128,
            "kv_heads": 8,
            "ffn": 53248,
            "activation": "swiglu",
            "vocabulary": 128256,
            "sequence_length": 8192,
        },
        "layout": {
            "tensor_parallel": 8,
            "interleave": 4,
            "recomputation": "selective",
            "zero_stage": 1,
            "sequence_parallel": False,
            "flash_attention": False,
        },
        "reliability": {"checkpoint_write_bytes_per_second": 500_000_000_000, "restart_seconds": 300.0},
    }


MOE_OPTIONS = ["--experts=256", "--experts-per-token=8", "--shared-experts=1", "--expert-ffn=2048"]
MOE_OPTIONS += ["--moe-every=1", "--dense-layers=3", "--capacity-factor=1.25", "--head-dim=128"]
MOE_OPTIONS += ["--kv-lora-rank=512", "--q-lora-rank=1536", "--rope-head-dim=64", "--mtp-depth=1"]


@pytest.mark.parametrize("command", ["estimate", "layout"])
def test_mixture_of_experts_options_are_sent_in_the_shape_and_the_layout(sent, command):
    code = cli.main(
        [
            command,
            "--params=671e9",
            "--tokens=14.8e12",
            *MOE_OPTIONS,
            "--expert-parallel=64",
            "--expert-overlap",
        ]
    )

    assert code == 0
    assert sent["shape"] == {
        "experts": 256,
        "experts_per_token": 8,
        "shared_experts": 1,
        "expert_ffn": 2048,
        "moe_every": 1,
        "dense_layers": 3,
        "capacity_factor": 1.25,
        "head_dim": 128,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "rope_head_dim": 64,
        "mtp_depth": 1,
    }
    assert sent["layout"] == {"expert_parallel": 64, "expert_overlap": True}


@pytest.mark.parametrize("command", ["estimate", "layout"])
def test_active_parameters_are_sent_beside_the_parameters(sent, command):
    assert cli.main([command, "--params=671e9", "--active-params=37e9", "--tokens=14.8e12"]) == 0
    assert sent == {"params": 671e9, "active_params": 37e9, "tokens": 14.8e12}
    assert cli.main([command, "--params=7e9", "--tokens=2e12", "--no-expert-overlap"]) == 0
    assert sent["layout"] == {"expert_overlap": False}


def test_layout_options_join_the_layout_of_body_and_win_over_it(sent, tmp_path):
    body = tmp_path / "run.json"
    body.write_text(json.dumps({"layout": {"tensor_parallel": 4, "micro_batch": 2}, "max_accelerators": 512}))

    code = cli.main(["estimate", "--params=7e9", "--tokens=2e12", f"--body={body}", "--tensor-parallel=8"])

    assert code == 0
    assert sent["layout"] == {"tensor_parallel": 8, "micro_batch": 2}
    assert sent["max_accelerators"] == 512


def test_an_estimate_with_no_layout_option_sends_no_layout(sent):
    assert cli.main(["estimate", "--params=7e9", "--tokens=2e12", "--hardware=h100-sxm"]) == 0
    assert not {"layout", "shape", "reliability"} & set(sent)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_checkpoint_bandwidth_that_is_not_finite_is_refused_before_it_is_sent(monkeypatch, capsys, value):
    monkeypatch.setattr(cli.PlannerClient, "estimate", lambda *_, **__: pytest.fail("sent"))

    code = cli.main(
        ["estimate", "--params=7e9", "--tokens=2e12", f"--checkpoint-write-gb-per-second={value}"]
    )

    assert code == 2
    assert "--checkpoint-write-gb-per-second" in capsys.readouterr().err


def test_estimate_prints_the_run_in_human_units_and_its_layout_in_one_line(sent, capsys):
    assert cli.main(["estimate", *LLAMA3_405B_OPTIONS, "--accelerators=16384"]) == 0

    shown = named(capsys.readouterr().out.split("\n\n")[0])
    assert shown["days"] == "54.21 days"
    assert shown["accelerator_hours"] == "21,316,000"
    assert shown["accelerators"] == "16,384"
    assert shown["cost"] == "146,654,080.00 USD"
    assert (shown["MFU"], shown["HFU"]) == ("40.0%", "41.2%")
    assert shown["layout"] == LAYOUT_LINE
    assert shown["steps"] == "7,617 of 20 s, 2,048 sequences (16.8M tokens) each"
    assert shown["goodput"] == (
        "83.8% useful · checkpoint every 19 min · 693 interruptions expected · 10.0% lost besides (as your "
        "runs lost: your calibration)"
    )
    assert shown["memory per accelerator"] == "70.7 GB of 80 GB (fits)"
    assert shown["80% interval"] == (
        "49.1-92.3 days · 19.3M-36.3M accelerator-hours · 132,784,000.00-249,744,000.00 USD "
        "(runs like this: parallelism, scale)"
    )
    assert shown["framework"] == "torchtitan"
    assert shown["hardware efficiency"] == "GEMM 60.2%, attention 19.9% of peak (calibrated)"


def test_estimate_shows_where_the_steps_time_goes_in_seconds_and_percent(sent, capsys):
    assert cli.main(["estimate", "--params=405e9", "--tokens=15.6e12", "--accelerators=16384"]) == 0

    table = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert table[0].split() == ["step", "time", "seconds", "%", "of", "step"]
    rows = {line.rsplit(None, 2)[0]: line.rsplit(None, 2)[1:] for line in table[2:] if line[0] != "-"}
    assert rows["compute"] == ["12.80", "64.0%"]
    assert rows["pipeline bubble"] == ["3.20", "16.0%"]
    assert rows["tensor parallel (exposed)"] == ["2.60", "13.0%"]
    assert rows["step"] == ["20.00", "100.0%"]
    assert math.isclose(sum(float(share[:-1]) for name, (_, share) in rows.items() if name != "step"), 100)


def test_a_cluster_size_the_planner_chose_says_what_chose_it(monkeypatch, capsys):
    sizing = {"chosen_by": "days", "max_accelerators": 32768, "counts_tried": 30}
    monkeypatch.setattr(cli.PlannerClient, "estimate", lambda *_, **__: estimate_answer(sizing=sizing))

    assert cli.main(["estimate", "--params=405e9", "--tokens=15.6e12", "--days=60"]) == 0

    accelerators = named(capsys.readouterr().out.split("\n\n")[0])["accelerators"]
    assert accelerators.startswith("16,384 (chosen by days: the fewest that finish by the deadline;")


def test_a_given_mfu_is_said_to_replace_the_model_and_no_step_is_shown(monkeypatch, capsys):
    answer = {**estimate_answer(), "performance": None, "mfu": 0.35}
    monkeypatch.setattr(cli.PlannerClient, "estimate", lambda *_, **__: answer)

    assert cli.main(["estimate", "--params=7e9", "--tokens=2e12", "--mfu=0.35"]) == 0

    shown = capsys.readouterr().out
    assert "35.0% (given" in shown
    assert "layout" not in shown
    assert "step time" not in shown


def test_estimate_json_is_the_apis_answer(sent, capsys):
    assert cli.main(["estimate", "--params=7e9", "--tokens=2e12", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == estimate_answer()


def test_layout_prints_the_chosen_layout_its_alternatives_and_the_search(sent, capsys):
    assert cli.main(["layout", *LLAMA3_405B_OPTIONS, "--accelerators=16384"]) == 0

    summary, table = capsys.readouterr().out.split("\n\n")
    shown = named(summary)
    assert shown["layout"] == LAYOUT_LINE
    assert shown["step"] == "20 s at 40.0% MFU"
    assert shown["layouts"] == "444 evaluated, 125 fit in memory"
    _, header, _, chosen, alternative = table.splitlines()
    assert header.split() == [
        *("TP", "PP", "DP", "micro", "leave", "recompute", "ZeRO"),  # inter-leave, on two lines
        *("batch", "step", "s", "MFU", "%", "GB"),
    ]
    assert " ".join(chosen.split()) == "chosen 8 16 128 1 8 none 1 2,048 20.00 40.0 70.7"
    assert " ".join(alternative.split()) == "8 32 64 1 8 selective 1 2,048 21.50 37.2 58.5"


MOE_SHAPE_DOCUMENT = {
    "layers": 61,
    "params": 671.0e9,
    "active_params": 37.6e9,
    "experts": 256,
    "experts_per_token": 8,
    "shared_experts": 1,
    "moe_layers": 58,
}


def moe_answer() -> dict:
    """estimate_answer() of a mixture of experts, its layouts spreading the experts over 64 ranks."""
    answer = estimate_answer(shape=MOE_SHAPE_DOCUMENT)
    performance = answer["performance"]
    performance["layout"] = layout_document(expert_parallel=64, expert_overlap=True)
    performance["alternatives"][0]["layout"] |= {"expert_parallel": 32, "expert_overlap": False}
    performance["breakdown"] = {**performance["breakdown"], "expert_parallel": 1.0, "compute": 11.8}
    return answer


def test_an_moe_estimate_shows_its_active_parameters_experts_and_expert_parallelism(monkeypatch, capsys):
    monkeypatch.setattr(cli.PlannerClient, "estimate", lambda *_, **__: moe_answer())

    assert cli.main(["estimate", "--params=671e9", "--tokens=14.8e12", "--accelerators=16384"]) == 0

    summary, breakdown = capsys.readouterr().out.split("\n\n")
    shown = named(summary)
    assert shown["active params"] == "37.6B of 671B"
    assert shown["experts"] == "256, 8 per token + 1 shared, on 58 of 61 layers"
    assert shown["layout"] == LAYOUT_LINE.replace("DP 128 ·", "DP 128 · EP 64 · all-to-all overlapped ·")
    rows = {line.rsplit(None, 2)[0]: line.rsplit(None, 2)[1:] for line in breakdown.splitlines()[2:]}
    assert rows["expert all-to-all (exposed)"] == ["1.00", "5.0%"]


def test_an_moe_layout_table_has_the_expert_parallel_degree_and_overlap_of_each_layout(monkeypatch, capsys):
    monkeypatch.setattr(cli.PlannerClient, "estimate", lambda *_, **__: moe_answer())

    assert cli.main(["layout", "--params=671e9", "--tokens=14.8e12", "--accelerators=16384"]) == 0

    summary, table = capsys.readouterr().out.split("\n\n")
    assert named(summary)["active params"] == "37.6B of 671B"
    _, header, _, chosen, alternative = table.splitlines()
    assert header.split()[:7] == ["TP", "PP", "DP", "EP", "overlap", "micro", "leave"]
    assert " ".join(chosen.split()) == "chosen 8 16 128 64 yes 1 8 none 1 2,048 20.00 40.0 70.7"
    assert " ".join(alternative.split()) == "8 32 64 32 no 1 8 selective 1 2,048 21.50 37.2 58.5"


def test_a_dense_estimate_shows_no_experts(sent, capsys):
    assert cli.main(["layout", "--params=405e9", "--tokens=15.6e12"]) == 0
    output = capsys.readouterr().out
    assert "active params" not in output
    assert "EP" not in output.split()


def test_layout_has_no_mfu_option_which_would_leave_no_layout_to_show():
    assert "--mfu" not in [opt for param in command("layout").params for opt in param.opts]
    assert "--mfu" in [opt for param in command("estimate").params for opt in param.opts]


def test_a_server_that_is_down_is_said_in_one_line_at_once(monkeypatch, capsys):
    tried = []

    def refused(session, method, url, **options):
        tried.append(options["timeout"])
        raise requests.ConnectionError("HTTPConnectionPool(...): Max retries exceeded with url: ...")

    monkeypatch.setattr(requests.Session, "request", refused)

    code = cli.main(["--url", "http://127.0.0.1:9", "organization", "list"])

    assert code == 1
    assert tried == [(3.05, 30.0)]  # no retry, and a connect timeout of seconds
    error = capsys.readouterr().err
    said = "cannot reach http://127.0.0.1:9: is the server running? (set PLANNER_URL or --url to another)"
    assert error.strip().splitlines() == [f"planner: {said}"]


def test_a_library_caller_keeps_the_retries_on_a_connection_error(monkeypatch):
    tried = []

    def refused(session, method, url, **options):
        tried.append(url)
        raise requests.ConnectionError("refused")

    monkeypatch.setattr(requests.Session, "request", refused)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)

    with pytest.raises(requests.ConnectionError):
        PlannerClient("http://127.0.0.1:9", retries=2).organizations().__next__()
    assert len(tried) == 3


CLOSED_PIPE_SCRIPT = """
import sys
from unittest import mock

import requests

from planner_client import cli

answer = requests.Response()
answer.status_code = 200
answer._content = b'{"items": [{"slug": "acme", "name": "Acme"}], "next_cursor": null}'
with mock.patch.object(requests.Session, "request", return_value=answer):
    sys.exit(cli.main(["organization", "list"]))
"""


def test_a_closed_pipe_ends_the_command_quietly():
    # `planner organization list | head -0`: the reader is gone before the command writes. Until 52 the
    # command turned the broken pipe into an error of its own, and Python's flush at exit said so again.
    child = subprocess.Popen(
        [sys.executable, "-c", CLOSED_PIPE_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    child.stdout.close()
    _, error = child.communicate(timeout=60)

    assert child.returncode == 1
    assert error == b""


@pytest.mark.parametrize(
    ("status", "code"),
    [
        *[(404, 3), (410, 3), (401, 4), (403, 4), (409, 5), (412, 5), (428, 5)],
        *[(400, 6), (422, 6), (429, 7), (500, 7), (503, 7), (418, 1)],
    ],
)
def test_an_api_refusal_exits_by_its_class(monkeypatch, capsys, status, code):
    answer = requests.Response()
    answer.status_code = status
    answer.headers["Content-Type"] = "application/problem+json"
    answer._content = json.dumps({"status": status, "title": "Refused", "detail": "Said why."}).encode()
    monkeypatch.setattr(requests.Session, "request", lambda *_, **__: answer)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)

    assert cli.main(["organization", "show", "acme"]) == code
    said = "not found" if code == cli.EXIT_NOT_FOUND else "Said why."
    assert capsys.readouterr().err.startswith(f"planner: organization acme: {said} ({status}")

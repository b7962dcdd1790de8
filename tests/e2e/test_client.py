"""planner_client and the `planner` command line against a real server: one for the module, on which each
test works in an organisation of its own."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from planner_client import PlannerClient, ProblemError, cli
from tests.commands import ROOT
from tests.e2e.conftest import ADMIN_KEY

pytestmark = pytest.mark.e2e

PLANNER = Path(sys.executable).parent / "planner"


@pytest.fixture
def server(module_server):
    return module_server


@pytest.fixture
def org() -> str:
    """The test's own organisation on the shared server."""
    return f"acme-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def plan(org) -> dict:
    return {
        "organization": org,
        "pf_days": 100,
        "hardware": "h100-sxm",
        "accelerators": 64,
        "start_at": "2027-02-01T00:00:00Z",
    }


@pytest.fixture
def planner(server, org) -> PlannerClient:
    base, _, _ = server
    client = PlannerClient(base, ADMIN_KEY, backoff=0.05)
    client.create_organization(org, "Acme")
    return client


@pytest.fixture
def budget(planner, org) -> dict:
    return planner.create_budget(
        organization=org,
        name="FY27",
        amount="5000000.00",
        currency="USD",
        period_start="2027-01-01T00:00:00Z",
        period_end="2028-01-01T00:00:00Z",
    )


def test_the_client_allocates_and_estimates(planner):
    allocation = planner.allocate(pf_days=6000)
    assert allocation["tokens_per_param"] == pytest.approx(20)
    assert 6 * allocation["params"] * allocation["tokens"] == pytest.approx(6000 * 8.64e19, rel=1e-9)
    estimate = planner.estimate(params=7e9, tokens=2e12, hardware="h100-sxm", accelerators=256)
    assert estimate["days"] > 0
    assert estimate["currency"] == "USD"


def test_plans_are_created_once_per_idempotency_key_committed_and_listed(planner, budget, org, plan):
    key = str(uuid.uuid4())
    first = planner.create_plan(idempotency_key=key, budget_id=budget["id"], **plan)
    again = planner.create_plan(idempotency_key=key, budget_id=budget["id"], **plan)
    assert again["id"] == first["id"]  # the retry got the first response back
    other = planner.create_plan(**plan)  # a key of its own, made up by the client
    assert other["id"] != first["id"]
    assert planner.commit_plan(first["id"])["status"] == "committed"
    assert [found["id"] for found in planner.plans(organization=org)] == [other["id"], first["id"]]
    committed = planner.plans(organization=org, status="committed")
    assert [found["id"] for found in committed] == [first["id"]]
    assert planner.budget_utilization(budget["id"])["committed"] == first["cost"]


def test_lists_are_iterated_across_pages(planner, org):
    for n in range(5):
        planner.create_organization(f"{org}-{n}", f"Org {n}")
    slugs = [organization["slug"] for organization in planner.organizations(limit=2)]
    # Newest first, two a page: this test's six, then those the module's other tests made before.
    assert slugs[:6] == [f"{org}-4", f"{org}-3", f"{org}-2", f"{org}-1", f"{org}-0", org]
    assert len(slugs) == len(set(slugs))


def test_errors_are_raised_with_their_problem_details(planner, plan):
    with pytest.raises(ProblemError) as missing:
        planner.get_plan(str(uuid.uuid4()))
    assert missing.value.status == 404
    assert missing.value.request_id
    with pytest.raises(ProblemError) as invalid:
        planner.create_plan(**{**plan, "accelerators": 0})
    assert invalid.value.status == 422
    assert [entry["pointer"] for entry in invalid.value.errors] == ["#/accelerators"]


def test_updates_use_the_current_etag_and_a_stale_one_is_refused(planner, budget):
    renamed = planner.update_budget(budget["id"], {"name": "FY27 pretraining"})
    assert renamed["name"] == "FY27 pretraining"
    with pytest.raises(ProblemError) as stale:
        planner.update_budget(budget["id"], {"name": "again"}, if_match='"stale"')
    assert stale.value.status == 412


def test_a_large_fit_runs_in_the_background_and_the_client_waits_for_its_law(planner, org):
    runs = [
        {"params": n, "tokens": d, "loss": 1.8 + 480 / n**0.35 + 2100 / d**0.37}
        for n in (5e7, 1e8, 3e8, 1e9, 3e9)
        for d in (1e9, 5e9, 2e10, 1e11)
    ]
    law = planner.fit_scaling_law(
        organization=org, name="Sweep", runs=runs, bootstrap={"samples": 300, "seed": 1}
    )
    assert law["slug"] == "sweep"
    assert law["alpha"] == pytest.approx(0.35, abs=0.01)


def test_the_cost_report_comes_as_json_or_csv(planner, budget, org, plan):
    plan = planner.create_plan(budget_id=budget["id"], **plan)
    planner.commit_plan(plan["id"])
    window = ("2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z")
    report = planner.cost_report(*window, organization=org, granularity="month", group_by=["budget"])
    assert [row["cost"] for row in report["rows"]] == [plan["cost"]]
    csv_text = planner.cost_report_csv(*window, organization=org, group_by="budget")
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert [(row["budget"], row["planned_plans"]) for row in rows] == [(budget["id"], "1")]
    totals = list(
        csv.DictReader(io.StringIO(planner.cost_report_csv(*window, organization=org, part="totals")))
    )
    assert [(row["currency"], row["planned_cost"]) for row in totals] == [(plan["currency"], plan["cost"])]


# --- The command line ---------------------------------------------------------------------------------------


# A plan's cluster and start, as options of `planner plan create`.
PLAN_OPTIONS = ["--pf-days", "100", "--hardware", "h100-sxm", "--accelerators", "64"]
PLAN_OPTIONS += ["--start-at", "2027-02-01T00:00:00Z"]


def planner_cli(server, *arguments: str) -> subprocess.CompletedProcess:
    base, _, _ = server
    env = {**os.environ, "PLANNER_URL": base, "PLANNER_API_KEY": ADMIN_KEY}
    command = [PLANNER, *arguments]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_planner_allocate_prints_a_table_or_json(server, planner):
    table = planner_cli(server, "allocate", "--pf-days", "6000")
    assert table.returncode == 0, table.stderr
    assert "params" in table.stdout
    assert "65.7B" in table.stdout  # 6.57e10 parameters, as people read them
    as_json = planner_cli(server, "--json", "allocate", "--pf-days", "6000")
    assert json.loads(as_json.stdout)["params"] == pytest.approx(6.5726706900e10, rel=1e-6)


def test_planner_creates_commits_lists_plans_and_downloads_the_csv(server, planner, budget, org):
    created = planner_cli(
        server,
        "--json",
        "plan",
        "create",
        "--organization",
        org,
        "--budget-id",
        budget["id"],
        *PLAN_OPTIONS,
        "--label",
        "team=alpha",
    )
    assert created.returncode == 0, created.stderr
    plan = json.loads(created.stdout)
    assert plan["labels"] == {"team": "alpha"}
    assert planner_cli(server, "plan", "commit", plan["id"]).returncode == 0
    listed = planner_cli(server, "plan", "list", "--status", "committed")
    assert plan["id"] in listed.stdout
    report = planner_cli(
        server,
        "report",
        "costs",
        "--from",
        "2027-01-01T00:00:00Z",
        "--to",
        "2028-01-01T00:00:00Z",
        "--group-by",
        "budget",
        "--format",
        "csv",
    )
    assert report.returncode == 0, report.stderr
    assert report.stdout.splitlines()[0].startswith("budget,budget_name,currency,planned_plans")


def test_planner_fits_a_law_to_runs_from_a_csv_file(server, planner, org, tmp_path):
    runs = tmp_path / "runs.csv"
    lines = ["params,tokens,loss"] + [
        f"{n:g},{d:g},{1.69 + 406.4 / n**0.34 + 410.7 / d**0.28:.4f}"
        for n in (5e7, 1e8, 2e8, 5e8, 1e9, 2e9)
        for d in (1e9, 1e10, 1e11)
    ]
    runs.write_text("\n".join(lines) + "\n")
    fitted = planner_cli(
        server, "--json", "law", "fit", "--organization", org, "--name", "CSV sweep", "--runs", str(runs)
    )
    assert fitted.returncode == 0, fitted.stderr
    law = json.loads(fitted.stdout)
    assert (law["slug"], law["fit"]["runs"]) == ("csv-sweep", 18)


def test_planner_reports_an_error_with_its_fields_and_exits_by_its_class(server, planner, org):
    refused = planner_cli(server, "plan", "create", "--organization", org, "--pf-days", "-5")
    assert refused.returncode == cli.EXIT_INVALID
    assert "422" in refused.stderr
    assert "#/pf_days" in refused.stderr
    missing = planner_cli(server, "plan", "show", str(uuid.uuid4()))
    assert missing.returncode == cli.EXIT_NOT_FOUND
    assert "404" in missing.stderr


def test_a_plan_made_without_a_budget_is_revised_onto_one_and_then_commits(server, planner, budget, org):
    made = planner_cli(server, "plan", "create", "--organization", org, *PLAN_OPTIONS, "--get", "id")
    assert made.returncode == 0, made.stderr
    draft = made.stdout.strip()
    refused = planner_cli(server, "plan", "commit", draft)
    assert refused.returncode == cli.EXIT_CONFLICT
    assert "409" in refused.stderr
    assert "budget" in refused.stderr
    revised = planner_cli(server, "plan", "revise", draft, "--budget-id", budget["id"], "--get", "id")
    assert revised.returncode == 0, revised.stderr
    committed = planner_cli(server, "--json", "plan", "commit", revised.stdout.strip())
    assert committed.returncode == 0, committed.stderr
    assert json.loads(committed.stdout)["budget_id"] == budget["id"]
    assert planner.get_budget(budget["id"])["committed"] == json.loads(committed.stdout)["cost"]


def test_planner_shows_hardware_and_plans_in_the_units_people_read(server, planner, budget, plan):
    hardware = planner_cli(server, "hardware", "list", "--vendor", "NVIDIA", "--limit", "100")
    assert hardware.returncode == 0, hardware.stderr
    h100 = next(line for line in hardware.stdout.splitlines() if line.startswith("h100-sxm "))
    assert "80 GB" in h100
    assert "989.4 TFLOP/s" in h100
    assert "USD/h" in h100
    assert "80000000000" not in hardware.stdout
    made = planner.create_plan(budget_id=budget["id"], **plan)
    shown = planner_cli(server, "plan", "show", made["id"])
    assert shown.returncode == 0, shown.stderr
    assert f"{made['days']:.4g} days" in shown.stdout
    assert f"{float(made['cost']):,.2f} USD" in shown.stdout


def test_keys_are_issued_listed_and_revoked_from_the_command_line(server, planner, org):
    issued = planner_cli(
        server, "--json", "key", "create", "--role", "viewer", "--organization", org, "--name", "dashboard"
    )
    assert issued.returncode == 0, issued.stderr
    key = json.loads(issued.stdout)
    as_viewer = planner_cli(server, "--api-key", key["key"], "organization", "show", org)
    assert as_viewer.returncode == 0, as_viewer.stderr
    listed = planner_cli(server, "key", "list", "--get", "id", "--limit", "100")
    assert key["id"] in listed.stdout.split()
    assert planner_cli(server, "key", "revoke", key["id"]).returncode == 0
    refused = planner_cli(server, "--api-key", key["key"], "organization", "show", org)
    assert refused.returncode == cli.EXIT_NOT_ALLOWED
    assert "401" in refused.stderr


def test_every_command_takes_json_after_its_name_too(server, planner, org):
    listed = planner_cli(server, "organization", "list", "--json", "--limit", "1")
    assert listed.returncode == 0, listed.stderr
    assert [organization["slug"] for organization in json.loads(listed.stdout)] == [org]


# The shape of Llama 3 405B (Llama 3 report, table 3) as options of planner estimate and planner layout.
LLAMA3_405B = ["--params", "405e9", "--tokens", "15.6e12", "--hardware", "h100-sxm", "--layers", "126"]
LLAMA3_405B += ["--d-model", "16384", "--heads", "128", "--kv-heads", "8", "--ffn", "53248"]
LLAMA3_405B += ["--activation", "swiglu", "--vocabulary", "128256", "--sequence-length", "8192"]


def test_planner_estimates_llama3_405b_on_16384_h100_with_meta_s_tensor_parallelism(server, planner):
    estimated = planner_cli(server, "estimate", *LLAMA3_405B, "--accelerators", "16384")
    assert estimated.returncode == 0, estimated.stderr
    summary, breakdown = estimated.stdout.split("\n\n")
    shown = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in summary.splitlines())
    assert shown["layout"].startswith("TP 8 · PP ")
    assert shown["accelerators"] == "16,384"
    assert re.fullmatch(r"\d\d\.\d%", shown["MFU"])
    assert "interruptions expected" in shown["goodput"]
    assert shown["memory per accelerator"].endswith("of 80 GB (fits)")
    assert "pipeline bubble" in breakdown
    assert breakdown.splitlines()[-1].split()[-1] == "100.0%"

    layouts = planner_cli(server, "layout", *LLAMA3_405B, "--accelerators", "16384")
    assert layouts.returncode == 0, layouts.stderr
    assert "TP 8 · PP " in layouts.stdout
    chosen = next(line for line in layouts.stdout.splitlines() if line.startswith("chosen "))
    assert chosen.split()[1] == "8"
    as_json = planner_cli(server, "--json", "layout", *LLAMA3_405B, "--accelerators", "16384")
    performance = json.loads(as_json.stdout)["performance"]
    assert performance["layout"]["tensor_parallel"] == 8
    assert f"{performance['layouts_evaluated']:,} evaluated" in layouts.stdout


def test_planner_shows_a_layout_that_cannot_run_as_the_422_naming_the_field(server, planner):
    refused = planner_cli(server, "layout", *LLAMA3_405B, "--accelerators", "1024", "--tensor-parallel", "5")
    assert refused.returncode == cli.EXIT_INVALID
    assert refused.stdout == ""
    assert "422" in refused.stderr
    assert "#/layout/tensor_parallel: Must divide the heads (128)" in refused.stderr
    assert "1, 2, 4, 8, 16, 32, 64, 128 would" in refused.stderr


# --- The client on its own ----------------------------------------------------------------------------------

SERVER_PACKAGES = {"flask", "gunicorn", "numpy", "scipy", "psycopg", "sqlalchemy", "compute-planner"}


@pytest.fixture(scope="module")
def client_alone(tmp_path_factory) -> Path:
    """A fresh venv with the client pip-installed from the repository path, as a user would: its bin/. Made
    once for the module: the install does not depend on the server's database."""
    venv = tmp_path_factory.mktemp("client-alone") / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", ROOT / "clients" / "python"],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return venv / "bin"


def test_the_client_installs_alone_in_a_fresh_venv_and_plans_against_a_live_server(
    client_alone, server, planner
):
    listed = subprocess.run(
        [client_alone / "python", "-m", "pip", "list", "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    installed = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert "compute-planner-client" in installed
    assert not installed & SERVER_PACKAGES
    base, _, _ = server
    env = {"PATH": os.environ["PATH"], "PLANNER_URL": base, "PLANNER_API_KEY": ADMIN_KEY}
    done = subprocess.run(
        [client_alone / "planner", "--json", "allocate", "--pf-days", "6000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["params"] == pytest.approx(6.5726706900e10, rel=1e-6)


def test_planner_allocates_a_budget_for_its_inference_and_prices_the_serving(server, planner):
    allocated = planner_cli(
        server,
        "--json",
        "allocate",
        "--pf-days",
        "600",
        "--law",
        "chinchilla-2022",
        "--inference-tokens",
        "2e12",
        "--hardware",
        "h100-sxm",
        "--accelerators",
        "64",
        "--inference-hardware",
        "h100-sxm",
        "--inference-batch",
        "8",
    )
    assert allocated.returncode == 0, allocated.stderr
    inference = json.loads(allocated.stdout)["inference"]
    assert (inference["constraint"], inference["minimised"]) == ("budget", "lifetime_flops")
    assert inference["serving"]["hardware"]["slug"] == "h100-sxm"
    assert inference["serving"]["batch"] == 8
    assert inference["serving"]["currency"] == "USD"

"""`planner` against the service itself, in process: the command line's requests go through the client to
the Flask app (the test's transaction), so that what the options send is what the API takes, and what it
answers is what the command prints. tests/e2e/test_client.py does the same against a real server."""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import urlsplit

import pytest
import requests
from requests.structures import CaseInsensitiveDict

from planner_client import PlannerClient, cli
from service.services.catalog import load_builtin_hardware
from tests.client.test_command_line import named


class FlaskAdapter(requests.adapters.BaseAdapter):
    """A transport for `requests` that hands each request to a Flask test client instead of the network."""

    def __init__(self, test_client):
        super().__init__()
        self.test_client = test_client

    def send(self, request, **kwargs):
        url = urlsplit(request.url)
        answer = self.test_client.open(
            url.path,
            query_string=url.query,
            method=request.method,
            headers=dict(request.headers),
            data=request.body,
        )
        response = requests.Response()
        response.status_code = answer.status_code
        response.headers = CaseInsensitiveDict(answer.headers)
        response._content = answer.get_data()
        response.encoding = "utf-8"
        response.url = request.url
        response.request = request
        return response

    def close(self):
        pass


@pytest.fixture
def served(app, session, issue_key, monkeypatch):
    """`planner` as a planner of acme (or as the key --api-key gives), its requests answered by the app, with
    the built-in hardware."""
    load_builtin_hardware(session)
    transport = requests.Session()
    transport.mount("http://", FlaskAdapter(app.test_client()))
    key = issue_key("planner", "acme")
    monkeypatch.delenv("PLANNER_API_KEY", raising=False)
    monkeypatch.setattr(
        cli,
        "PlannerClient",
        lambda url, given, **options: PlannerClient(url, given or key, session=transport, **options),
    )


# DeepSeek-V3's shape (DeepSeek-V3 technical report, section 4.2) as options of planner estimate and layout.
DEEPSEEK_V3 = ["--layers=61", "--d-model=7168", "--heads=128", "--head-dim=128", "--sequence-length=4096"]
DEEPSEEK_V3 += ["--vocabulary=129280", "--activation=swiglu", "--ffn=18432", "--experts=256"]
DEEPSEEK_V3 += ["--experts-per-token=8", "--shared-experts=1", "--expert-ffn=2048", "--dense-layers=3"]
DEEPSEEK_V3 += ["--kv-lora-rank=512", "--q-lora-rank=1536", "--rope-head-dim=64", "--mtp-depth=1"]
RUN = ["--params=671e9", "--tokens=14.8e12", "--hardware=h100-sxm", "--accelerators=2048"]


def test_planner_estimates_deepseek_v3_with_its_active_parameters_experts_and_expert_parallelism(
    served, capsys
):
    assert cli.main(["estimate", *RUN, *DEEPSEEK_V3, "--expert-parallel=64", "--expert-overlap"]) == 0

    summary, breakdown = capsys.readouterr().out.split("\n\n")
    shown = named(summary)
    assert re.fullmatch(r"37\.\dB of 67\dB", shown["active params"])
    assert shown["experts"] == "256, 8 per token + 1 shared, on 58 of 61 layers"
    assert " · EP 64 · all-to-all overlapped · " in shown["layout"]
    assert re.search(r"^expert all-to-all \(exposed\) +\d+\.\d+ +\d+\.\d%$", breakdown, re.M)


def test_planner_layout_shows_the_expert_parallel_degree_of_each_layout(served, capsys):
    assert cli.main(["layout", *RUN, *DEEPSEEK_V3, "--no-expert-overlap", "--zero-stage=1"]) == 0

    summary, table = capsys.readouterr().out.split("\n\n")
    shown = named(summary)
    assert shown["experts"].startswith("256, 8 per token + 1 shared")
    expert_parallel = re.search(r" · EP (\d+) · ", shown["layout"]).group(1)
    assert int(expert_parallel) == 1 or "all-to-all not overlapped" in shown["layout"]
    _, header, _, *rows = table.splitlines()  # a header of two lines: inter-leave
    assert header.split()[:5] == ["TP", "PP", "DP", "EP", "overlap"]
    layouts = [row.split()[-13:] for row in rows]  # the chosen layout's, then the alternatives'
    assert layouts[0][3] == expert_parallel
    assert all(layout[4] == "no" and layout[8] == "1" for layout in layouts)  # as given: ZeRO 1 too


def test_an_moe_given_by_its_active_parameters_alone_is_modelled_as_one(served, capsys):
    assert cli.main(["estimate", *RUN, "--active-params=37e9"]) == 0

    shown = named(capsys.readouterr().out.split("\n\n")[0])
    assert re.fullmatch(r"3\d\.\dB of 6\d\dB", shown["active params"])
    assert "per token" in shown["experts"]
    assert "warning" in shown  # the shape it assumed


def test_planner_allocate_shows_the_active_parameters_and_experts_an_moe_law_sizes(served, capsys):
    assert cli.main(["--json", "allocate", "--pf-days=600", "--law=krajewski-2024-g8"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["active_params"] < answer["params"]

    allocate = ["allocate", "--pf-days=600", "--law=krajewski-2024-g8", "--hardware=h100-sxm"]
    assert cli.main([*allocate, "--accelerators=256"]) == 0

    printed = capsys.readouterr().out.splitlines()
    shown = named("\n".join(line for line in printed if not line.startswith("warning")))
    # The law's figures, once: not the modelled shape's (with its embeddings) beside them.
    assert shown["active params"] == (
        f"{cli.human('active_params', answer['active_params'])} of {cli.human('params', answer['params'])}"
    )
    assert shown["experts"] == f"{answer['experts']}, {answer['experts_per_token']} per token"
    assert " · EP " in shown["layout"]
    assert sum(line.startswith("active params") for line in printed) == 1


def test_planner_plan_create_takes_an_moes_active_parameters_and_shows_them(served, capsys):
    plan = ["plan", "create", "--organization=acme", "--params=671e9", "--active-params=37e9"]
    assert cli.main([*plan, "--tokens=14.8e12", "--hardware=h100-sxm", "--accelerators=2048"]) == 0

    shown = named(capsys.readouterr().out)
    assert shown["params"] == "671B"
    assert shown["active params"] == "37B of 671B"  # as given, the plan's result says
    assert "8 per token" in shown["experts"]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            [
                "--layers=61",
                "--d-model=7168",
                "--heads=128",
                "--sequence-length=4096",
                "--experts-per-token=8",
            ],
            "#/shape/experts: Needs experts (a mixture-of-experts shape).",
        ),
        (["--active-params=700e9"], "#/params: Must be greater than active_params"),
        (["--active-params=37e9", *DEEPSEEK_V3], "#/active_params: A shape gives its own active parameters."),
        (["--expert-parallel=8"], "#/layout/expert_parallel: Needs a mixture-of-experts shape (experts)"),
    ],
)
def test_a_bad_moe_option_is_refused_naming_its_field(served, capsys, options, said):
    assert cli.main(["estimate", *RUN, *options]) == cli.EXIT_INVALID

    output = capsys.readouterr()
    assert output.out == ""
    assert "422" in output.err
    assert said in output.err


def test_planner_reports_planned_against_actual_and_exports_focus(served, client, session, capsys):
    """A run of acme's spent 60.25 of the 100.00 its plan planned: the table's total says so, and the FOCUS
    export has its day's charge."""
    from datetime import date  # noqa: PLC0415
    from decimal import Decimal  # noqa: PLC0415

    from service.data.models import Organization, Plan, UsageDay  # noqa: PLC0415

    organization = session.query(Organization).filter_by(slug="acme").one()
    body = {"organization": "acme", "params": 1e9, "tokens": 2e10, "hardware": "h100-sxm", "accelerators": 8}
    plan = client.post("/v1/plans", json={**body, "start_at": "2026-01-05T00:00:00Z"}).get_json()
    stored = session.get(Plan, uuid.UUID(plan["id"]))
    stored.status = "running"  # as its first usage record makes it (main's usage service, not here yet)
    session.add(
        UsageDay(
            plan_id=stored.id,
            day=date(2026, 1, 6),
            organization_id=organization.id,
            accelerator_hours=8.0,
            cost=Decimal("60.25"),
            currency="USD",
        )
    )
    session.commit()
    window = ["--from=2026-01-01T00:00:00Z", "--to=2026-02-01T00:00:00Z"]

    assert cli.main(["report", "costs", *window, "--measure=both"]) == 0
    table = capsys.readouterr().out
    assert cli.main(["report", "focus", *window]) == 0
    focus = capsys.readouterr().out

    planned = Decimal(plan["cost"])
    assert (
        f"total: {planned:,.2f} USD planned, 60.25 USD spent, variance {Decimal('60.25') - planned:,.2f} USD"
        in table
    )
    header, line = focus.splitlines()
    assert header.startswith("BilledCost,EffectiveCost,ListCost,ContractedCost,BillingCurrency,")
    assert line.startswith("60.25,60.25,60.25,60.25,USD,2026-01-01T00:00:00Z,2026-02-01T00:00:00Z,2026-01-06")


# Rows of SkyPilot's catalogs/v8/aws/vms.csv (@00148f2; docs/research/energy-and-offers.md, 4.2).
VMS_CSV = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
p5.48xlarge,H100,8.0,192.0,2048.0,,55.04,11.2543,us-east-2,use2-az1
p5.48xlarge,H100,8.0,192.0,2048.0,,68.80,19.8326,us-west-1,usw1-az3
m7i.large,,,2.0,8.0,,0.1008,0.0389,us-east-1,use1-az1
"""


def test_planner_imports_a_catalog_and_compares_its_offers_by_a_date(served, issue_key, tmp_path, capsys):
    catalog = tmp_path / "vms.csv"
    catalog.write_text(VMS_CSV)
    admin = ["--api-key", issue_key("admin")]
    rate = ["--spot-preemptions-per-instance-hour=1.07e-4", "--spot-preemptions-source=Advisor 5-10%"]
    assert (
        cli.main([*admin, "offer", "import", str(catalog), "--provider=aws", "--source=vms.csv", *rate]) == 0
    )
    shown = named(capsys.readouterr().out)
    assert (shown["rows"], shown["created"], shown["without accelerator"], shown["refused"]) == (
        "3",
        "4",
        "1",
        "0",
    )

    assert cli.main(["compare", "--params=7e9", "--tokens=1.4e11", "--days=10", "--hardware=h100-sxm"]) == 0
    table = capsys.readouterr().out.splitlines()
    # In 100 columns the emissions are the first to go (--output json and wider terminals have them).
    assert table[0].split() == ["rank", "offer", "pricing", "count", "days", "cost", "kWh", "frontier"]
    offers = [line.split()[1] for line in table[2:]]
    assert offers[0] == "aws-p5-48xlarge-use2-az1-spot"  # the cheapest: spot in Ohio
    assert set(offers) == {
        "aws-p5-48xlarge-us-east-2",
        "aws-p5-48xlarge-us-west-1",
        "aws-p5-48xlarge-use2-az1-spot",
        "aws-p5-48xlarge-usw1-az3-spot",
    }

    assert cli.main(["--json", "offer", "list", "--hardware=h100-sxm", "--pricing=spot"]) == 0
    zones = {offer["availability_zone"] for offer in json.loads(capsys.readouterr().out)}
    assert zones == {"use2-az1", "usw1-az3"}
    assert (
        cli.main(["--json", "compare", "--params=7e9", "--tokens=1.4e11", "--days=10", "--rank-by=days"]) == 0
    )
    answer = json.loads(capsys.readouterr().out)
    assert answer["rank_by"] == "days"
    assert answer["frontier"]

    spot = ["compare", "--params=7e9", "--tokens=1.4e11", "--days=10", "--pricing=spot", "--save=acme"]
    assert cli.main(spot) == 0
    saved = [line for line in capsys.readouterr().out.splitlines() if "saved as plan" in line]
    assert len(saved) == 2
    assert cli.main(["--json", "plan", "list", "--label=pricing:spot"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_a_budget_compared_on_every_offer_shows_the_model_each_buys_and_its_loss(
    served, issue_key, tmp_path, capsys
):
    catalog = tmp_path / "vms.csv"
    catalog.write_text(VMS_CSV)
    admin = ["--api-key", issue_key("admin")]
    assert cli.main([*admin, "offer", "import", str(catalog), "--provider=aws", "--source=vms.csv"]) == 0
    capsys.readouterr()
    budget = ["compare", "--cost=200000", "--days=20", "--law=chinchilla-2022", "--hardware=h100-sxm"]
    assert cli.main(budget) == 0
    table = capsys.readouterr().out.splitlines()
    header = table[0].split()
    assert header[header.index("count") + 1 : header.index("count") + 3] == ["params", "loss"]
    assert cli.main(["--json", *budget]) == 0
    best = json.loads(capsys.readouterr().out)["offers"][0]
    first = dict(zip(header, table[2].split(), strict=False))
    assert first["params"] == f"{best['params'] / 1e9:.3g}B"
    assert first["loss"] == f"{best['predicted_loss']:.4g}"


def test_planner_estimate_shows_the_energy_and_the_emissions_at_a_site(served, tmp_path, capsys):
    run = ["estimate", "--params=7e9", "--tokens=2e12", "--hardware=h100-sxm", "--accelerators=256"]
    assert cli.main(run) == 0
    energy = named(capsys.readouterr().out.split("\n\n")[0])["energy"]
    assert energy.endswith("(PUE 1.2), no emissions: give a site region or its grid intensity")
    site = tmp_path / "site.json"
    site.write_text(json.dumps({"site": {"region": "FR"}}))
    assert cli.main([*run, f"--body={site}"]) == 0
    energy = named(capsys.readouterr().out.split("\n\n")[0])["energy"]
    assert re.fullmatch(r"[\d,]+ kWh \(PUE 1\.2\), [\d.,]+ t CO2e at FR's \d+ g/kWh \(2023\)", energy), energy

"""Plans meet reality over HTTP: the cluster model's predicted throughput against usage records' measured
throughput per hardware profile (GET /v1/reports/model-accuracy), and an organisation's own calibration
fitted to its runs (/v1/calibrations), which its later plans on that hardware use, name and replay with."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from service.core import engine, performance
from service.core.goodput import DEFAULT_RUN_OVERHEAD
from service.data.models import AuditEntry, Calibration, Plan, UsageRecord
from service.services import calibrations, plan_documents
from service.services.plans import reevaluate
from tests.api.test_plans import OMIT, add_gpu, plan_body
from tests.builders import reversal_of, usage_record
from tests.conftest import bearer
from tests.problems import assert_problem

# Every field fixed: the cluster model evaluates this one layout, so a plan's prediction is that layout's.
LAYOUT = {
    "tensor_parallel": 2,
    "pipeline_parallel": 1,
    "data_parallel": 4,
    "micro_batch": 1,
    "global_batch": 64,
    "recomputation": "none",
    "zero_stage": 1,
}
DAY = datetime(2027, 1, 4, tzinfo=UTC)
REPORT = "/v1/reports/model-accuracy"


@pytest.fixture
def world(client):
    """acme and globex; lab-gpu and other-gpu, custom profiles of 1e15 bf16 FLOP/s at 2.50 USD an hour."""
    for slug in ("acme", "globex"):
        assert client.post("/v1/organizations", json={"slug": slug, "name": slug.title()}).status_code == 201
    add_gpu(client, "lab-gpu")
    add_gpu(client, "other-gpu")


def modelled_plan(client, **overrides) -> dict:
    """A model already chosen, paced by the cluster model at LAYOUT on 8 accelerators."""
    body = plan_body(mfu=OMIT, accelerators=8, layout=LAYOUT, **overrides)
    response = client.post("/v1/plans", json=body)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def predicted(plan: dict) -> float:
    performance = plan["result"]["estimate"]["performance"]
    return performance["tokens_per_step"] / performance["step_seconds"]


def throughput_at(plan: dict, efficiency: float) -> float:
    """The plan's throughput at its layout with `efficiency` for its hardware: what runs at that efficiency
    would measure."""
    run = plan_documents.replay(plan["inputs"], plan["snapshot"]).estimate
    step = engine.step_of(run, efficiency)
    return step.layout.global_batch * run.shape.sequence_length / step.seconds


def measure(session, plan: dict, *periods: tuple[float, float], start: datetime = DAY) -> list[UsageRecord]:
    """Usage records of `plan`, one per (hours, tokens_per_second), back to back from `start`."""
    row = session.get(Plan, uuid.UUID(plan["id"]))
    records = []
    for hours, rate in periods:
        records.append(usage_record(row, start=start, hours=hours, tokens_per_second=rate))
        start += timedelta(hours=hours)
    session.add_all(records)
    session.commit()
    return records


def calibrate_on(client, key: str | None = None, **body):
    headers = {} if key is None else bearer(key)
    return client.post(
        "/v1/calibrations", json={"organization": "acme", "hardware": "lab-gpu", **body}, headers=headers
    )


def pointers(response) -> list[str]:
    return [error["pointer"] for error in assert_problem(response, 422)["errors"]]


# --- The report ---------------------------------------------------------------------------------------------


def test_with_nothing_measured_the_report_has_no_rows(client, world):
    modelled_plan(client)
    response = client.get(REPORT)
    assert response.status_code == 200
    assert response.get_json()["rows"] == []


def test_the_report_weighs_each_period_by_its_length_and_leaves_reversed_records_out(client, session, world):
    slow, fast = modelled_plan(client, name="slow"), modelled_plan(client, name="fast", tokens=1.2e11)
    # 1 h at 70% and 3 h at 90% of the prediction: 85% on the whole; a reversed record at 10x counts not.
    measure(session, slow, (1, 0.7 * predicted(slow)), (3, 0.9 * predicted(slow)))
    wrong = measure(session, slow, (2, 10 * predicted(slow)), start=DAY + timedelta(days=1))
    session.add(reversal_of(wrong[0]))
    measure(session, fast, (2, 1.1 * predicted(fast)))
    unmeasured = session.get(Plan, uuid.UUID(modelled_plan(client)["id"]))
    session.add(usage_record(unmeasured, start=DAY, hours=1, tokens_per_second=None))  # not a measurement
    session.commit()

    report = client.get(REPORT, query_string={"detail": "true"}).get_json()

    [row] = report["rows"]
    assert row["hardware"] == "lab-gpu"
    assert (row["runs"], row["periods"], row["hours"], row["accelerator_hours"]) == (2, 3, 6, 48)
    assert row["mean_error"] == pytest.approx((-0.15 + 0.1) / 2)
    assert row["median_error"] == pytest.approx((-0.15 + 0.1) / 2)
    assert row["rms_error"] == pytest.approx(((0.15**2 + 0.1**2) / 2) ** 0.5)
    assert row["worst_error"] == pytest.approx(-0.15)
    assert row["worst_plan_id"] == slow["id"]
    runs = {run["name"]: run for run in row["plans"]}
    assert runs["slow"]["measured_tokens_per_second"] == pytest.approx(0.85 * predicted(slow))
    assert runs["slow"]["predicted_tokens_per_second"] == pytest.approx(predicted(slow), rel=1e-12)
    assert runs["slow"]["layout"].startswith("tensor 2 · pipeline 1 · data 4; micro-batch 1, batch 64")
    assert runs["slow"]["modelled"] is True
    assert runs["slow"]["calibration_id"] is None
    assert client.get(REPORT).get_json()["rows"][0]["plans"] is None  # without detail


def test_a_plan_at_a_given_mfu_is_compared_with_the_pace_that_mfu_sets(client, session, world):
    plan = client.post("/v1/plans", json=plan_body()).get_json()  # 3.6e20 FLOPs at MFU 0.5 in 72 000 s
    measure(session, plan, (1, 6e10 / 72_000 * 1.2))
    [run] = client.get(REPORT, query_string={"detail": "true"}).get_json()["rows"][0]["plans"]
    assert run["modelled"] is False
    assert run["predicted_tokens_per_second"] == pytest.approx(6e10 / 72_000)
    assert run["error"] == pytest.approx(0.2)


def test_the_report_filters_by_hardware_and_by_when_periods_start(client, session, world):
    on_lab, on_other = modelled_plan(client), modelled_plan(client, hardware="other-gpu")
    measure(session, on_lab, (1, predicted(on_lab)))
    measure(session, on_other, (1, predicted(on_other)), start=DAY + timedelta(days=10))

    assert [row["hardware"] for row in client.get(REPORT).get_json()["rows"]] == ["lab-gpu", "other-gpu"]
    only_other = client.get(REPORT, query_string={"hardware": "other-gpu"}).get_json()["rows"]
    assert [row["hardware"] for row in only_other] == ["other-gpu"]
    window = {"from": DAY.isoformat(), "to": (DAY + timedelta(days=1)).isoformat()}
    assert [row["hardware"] for row in client.get(REPORT, query_string=window).get_json()["rows"]] == [
        "lab-gpu"
    ]
    backwards = {"from": window["to"], "to": window["from"]}
    problem = assert_problem(client.get(REPORT, query_string=backwards), 422)
    assert [error["parameter"] for error in problem["errors"]] == ["to"]


def test_each_organisation_reads_only_its_own_runs_and_an_admin_may_choose(client, session, world, issue_key):
    ours, theirs = modelled_plan(client), modelled_plan(client, organization="globex")
    measure(session, ours, (1, predicted(ours)))
    measure(session, theirs, (1, 2 * predicted(theirs)))
    viewer = bearer(issue_key("viewer", "acme"))

    [row] = client.get(REPORT, headers=viewer).get_json()["rows"]
    assert row["runs"] == 1
    assert row["mean_error"] == pytest.approx(0)
    assert (
        client.get(REPORT, query_string={"organization": "globex"}, headers=viewer).get_json()["rows"] == []
    )
    assert client.get(REPORT).get_json()["rows"][0]["runs"] == 2  # an admin: every organisation
    [globex] = client.get(REPORT, query_string={"organization": "globex"}).get_json()["rows"]
    assert globex["mean_error"] == pytest.approx(1)


# --- Calibrations -------------------------------------------------------------------------------------------


# What acme's runs on lab-gpu reached: below the default of uncalibrated hardware, which calibration replaces.
MEASURED = 0.4


@pytest.fixture
def measured_slow(client, session, world):
    """Three acme plans on lab-gpu whose runs measured what the model gives at an efficiency of MEASURED."""
    plans = [modelled_plan(client, params=params, tokens=20 * params) for params in (5e8, 1e9, 2e9)]
    for plan in plans:
        measure(session, plan, (2, throughput_at(plan, MEASURED)))
    return plans


def test_a_calibration_recovers_the_efficiency_the_runs_measured_and_keeps_them(
    client, session, measured_slow
):
    response = calibrate_on(client)

    assert response.status_code == 201, response.get_json()
    calibration = response.get_json()
    assert response.headers["Location"] == f"/v1/calibrations/{calibration['id']}"
    assert (calibration["organization"], calibration["hardware"]) == ("acme", "lab-gpu")
    assert calibration["matmul_efficiency"] == pytest.approx(MEASURED, abs=1e-3)
    assert {run["plan_id"] for run in calibration["runs"]} == {plan["id"] for plan in measured_slow}
    for run in calibration["runs"]:
        assert run["predicted_tokens_per_second_after"] == pytest.approx(
            run["measured_tokens_per_second"], rel=1e-3
        )
        assert run["error_before"] < -0.05  # the default promised more than the runs gave
    fit = calibration["fit"]
    # lab-gpu's profile states no efficiency: the default of uncalibrated hardware is what it replaces.
    assert fit["default_matmul_efficiency"] == performance.CALIBRATION.matmul_efficiency
    assert fit["previous"] is None
    assert fit["errors_after"]["rms"] < 1e-3 < fit["errors_before"]["rms"]
    assert fit["at_bound"] is False
    assert client.get(f"/v1/calibrations/{calibration['id']}").get_json() == calibration
    audited = session.scalars(select(AuditEntry).where(AuditEntry.action == "calibration.create")).one()
    assert audited.object_id == calibration["id"]


def test_a_plan_after_calibration_predicts_the_measured_throughput_says_so_and_replays(
    client, session, measured_slow
):
    calibration = calibrate_on(client).get_json()
    first = measured_slow[1]

    again = modelled_plan(client, params=1e9, tokens=2e10)

    assert predicted(again) == pytest.approx(throughput_at(first, MEASURED), rel=1e-3)
    assert again["calibration"]["id"] == calibration["id"]
    assert again["calibration"]["matmul_efficiency"] == calibration["matmul_efficiency"]
    assert again["calibration"]["runs"] == 3
    assert again["snapshot"]["cluster_model"]["organization_calibration"] == again["calibration"]
    efficiency = again["snapshot"]["hardware"]["efficiency"]
    assert efficiency["gemm"]["bf16"] == calibration["matmul_efficiency"]
    assert efficiency["provenance"] == "calibrated"
    assert calibration["id"] in efficiency["basis"]
    [caveat] = [w for w in again["result"]["warnings"] if w["code"] == "calibrated"]
    assert "calibrated on 3 of your runs" in caveat["message"]
    assert caveat["details"]["calibration_id"] == calibration["id"]
    assert reevaluate(session.get(Plan, uuid.UUID(again["id"]))) == again["result"]
    # Plans made before it, another organisation's and another hardware's keep the published constants.
    assert client.get(f"/v1/plans/{first['id']}").get_json()["calibration"] is None
    assert modelled_plan(client, organization="globex")["calibration"] is None
    assert modelled_plan(client, hardware="other-gpu")["calibration"] is None
    assert client.post("/v1/plans", json=plan_body(hardware="lab-gpu")).get_json()["calibration"] is None


def test_a_calibration_replaces_the_gemm_fraction_and_keeps_the_profile_s_other_figures():
    stated = performance.Efficiency(
        gemm={"bf16": 0.6}, provenance="derived", basis="a datasheet", memory=0.7, link=0.8, attention=0.3
    )
    peaks = {"bf16": 1e15, "fp8": 2e15}
    hardware = engine.Hardware(name="GPU", slug="gpu", peak_flops=peaks, memory_bytes=8e10)
    own = SimpleNamespace(id="c1", matmul_efficiency=0.45, runs=[object()] * 3, run_overhead=None)
    efficiency = calibrations.applied(own, dataclasses.replace(hardware, efficiency=stated)).efficiency
    assert efficiency == performance.Efficiency(
        gemm={"bf16": 0.45, "fp8": 0.45},
        provenance="calibrated",
        basis="calibration c1: 3 of the organisation's runs",
        memory=0.7,
        link=0.8,
        attention=0.3,
    )
    assert calibrations.applied(own, hardware).efficiency == dataclasses.replace(
        efficiency, memory=None, link=None, attention=None
    )


def goodput_of(plan: dict) -> dict:
    return plan["result"]["estimate"]["performance"]["goodput"]


def ran_with_overhead(session, plan: dict, overhead: float) -> float:
    """Record on `plan`'s row that its run trained all its tokens at its measured pace and took the hours
    that pace, failures, checkpoints and `overhead` add up to (as usage reports would have summed them);
    the hours its pace alone took, failures and checkpoints paid."""
    row = session.get(Plan, uuid.UUID(plan["id"]))
    rate = sum(
        record.tokens_per_second
        for record in session.scalars(select(UsageRecord).where(UsageRecord.plan_id == row.id))
    )
    useful = goodput_of(plan)
    of_failures = useful["useful_fraction"] / (1 - useful["run_overhead"])
    paced = plan["tokens"] / rate * row.accelerators / 3600 / of_failures
    row.tokens_trained, row.actual_accelerator_hours = plan["tokens"], paced / (1 - overhead)
    session.commit()
    return paced


def test_a_calibration_fits_the_run_overhead_the_runs_hours_show_and_later_plans_lose_it(
    client, session, measured_slow
):
    # Two runs took a quarter more time than their pace; the third reported no tokens and says nothing.
    paced = [ran_with_overhead(session, plan, 0.2) for plan in measured_slow[:2]]
    before = goodput_of(modelled_plan(client, params=1e9, tokens=2e10))
    assert (before["run_overhead"], before["run_overhead_source"]) == (DEFAULT_RUN_OVERHEAD, "default")

    calibration = calibrate_on(client).get_json()

    assert calibration["run_overhead"] == pytest.approx(0.2, rel=1e-9)
    fit = calibration["fit"]["run_overhead"]
    assert (fit["runs"], fit["clipped"], fit["default"]) == (2, False, DEFAULT_RUN_OVERHEAD)
    assert fit["paced_accelerator_hours"] == pytest.approx(sum(paced), rel=1e-9)
    assert fit["actual_accelerator_hours"] == pytest.approx(sum(paced) / 0.8, rel=1e-9)
    runs = {run["plan_id"]: run for run in calibration["runs"]}
    assert runs[measured_slow[2]["id"]]["paced_accelerator_hours"] is None
    after = modelled_plan(client, params=1e9, tokens=2e10)
    assert goodput_of(after)["run_overhead"] == pytest.approx(0.2, rel=1e-9)
    assert goodput_of(after)["run_overhead_source"] == "calibration"
    assert after["calibration"]["run_overhead"] == calibration["run_overhead"]
    assert reevaluate(session.get(Plan, uuid.UUID(after["id"]))) == after["result"]
    # A request's own overhead wins: at 0.1, the same run takes 0.8 / 0.9 of the time.
    stated = modelled_plan(client, params=1e9, tokens=2e10, reliability={"run_overhead": 0.1})
    assert (goodput_of(stated)["run_overhead"], goodput_of(stated)["run_overhead_source"]) == (0.1, "request")
    assert stated["days"] == pytest.approx(after["days"] * 0.8 / 0.9, rel=1e-9)
    other = modelled_plan(client, params=1e9, tokens=2e10, organization="globex")
    assert goodput_of(other)["run_overhead_source"] == "default"


def test_runs_that_took_less_than_their_pace_fit_no_overhead_and_say_it_was_clipped(
    client, session, measured_slow
):
    for plan in measured_slow:
        row = session.get(Plan, uuid.UUID(plan["id"]))
        ran_with_overhead(session, plan, 0.0)
        row.actual_accelerator_hours *= 0.9
    session.commit()
    calibration = calibrate_on(client).get_json()
    assert calibration["run_overhead"] == 0
    assert calibration["fit"]["run_overhead"]["clipped"] is True


def test_a_calibration_of_runs_that_reported_no_tokens_fits_no_overhead(client, measured_slow):
    calibration = calibrate_on(client).get_json()
    assert calibration["run_overhead"] is None
    assert calibration["fit"]["run_overhead"] is None
    later = modelled_plan(client, params=1e9, tokens=2e10)
    assert goodput_of(later)["run_overhead_source"] == "default"
    assert later["calibration"]["run_overhead"] is None


def test_a_calibrated_plan_reads_back_as_it_was_created(client, measured_slow):
    assert calibrate_on(client).status_code == 201
    again = modelled_plan(client, params=1e9, tokens=2e10)
    assert again["calibration"] is not None

    response = client.get(f"/v1/plans/{again['id']}")

    assert response.get_json() == again


def test_a_revision_of_an_older_plan_uses_the_calibration_in_force(client, measured_slow):
    calibration = calibrate_on(client).get_json()
    revised = client.post(f"/v1/plans/{measured_slow[0]['id']}/revise", json={"name": "again"})
    assert revised.status_code == 201, revised.get_json()
    assert revised.get_json()["calibration"]["id"] == calibration["id"]


def test_the_newest_calibration_is_in_force_and_names_the_one_it_replaces(client, session, measured_slow):
    first = calibrate_on(client).get_json()
    second = calibrate_on(client, plans=[measured_slow[0]["id"]]).get_json()

    assert [run["plan_id"] for run in second["runs"]] == [measured_slow[0]["id"]]
    assert second["fit"]["previous"] == {"id": first["id"], "matmul_efficiency": first["matmul_efficiency"]}
    assert modelled_plan(client)["calibration"]["id"] == second["id"]
    page = client.get("/v1/calibrations", query_string={"limit": 1}).get_json()
    assert [item["id"] for item in page["items"]] == [second["id"]]
    rest = client.get("/v1/calibrations", query_string={"limit": 1, "cursor": page["next_cursor"]}).get_json()
    assert [item["id"] for item in rest["items"]] == [first["id"]]
    assert rest["next_cursor"] is None


def test_a_calibration_without_a_measured_run_is_a_422_naming_the_hardware(client, world):
    modelled_plan(client)
    assert pointers(calibrate_on(client)) == ["#/hardware"]
    assert pointers(calibrate_on(client, hardware="no-such-gpu")) == ["#/hardware"]
    assert pointers(calibrate_on(client, organization="nobody")) == ["#/organization"]


def test_each_plan_that_cannot_calibrate_is_a_422_naming_it(client, session, measured_slow):
    theirs = modelled_plan(client, organization="globex")
    elsewhere = modelled_plan(client, hardware="other-gpu")
    at_mfu = client.post("/v1/plans", json=plan_body()).get_json()
    unmeasured = modelled_plan(client)
    for plan in (theirs, elsewhere, at_mfu):
        measure(session, plan, (1, 1e6))
    ours = measured_slow[0]["id"]

    for plan, says in (
        (theirs, "No plan"),
        (elsewhere, "runs on other-gpu, not lab-gpu"),
        (at_mfu, "planned at a given MFU"),
        (unmeasured, "no measured throughput"),
        ({"id": str(uuid.uuid4())}, "No plan"),
    ):
        problem = assert_problem(calibrate_on(client, plans=[ours, plan["id"]]), 422)
        assert [error["pointer"] for error in problem["errors"]] == ["#/plans/1"]
        assert says in problem["errors"][0]["detail"]
    assert pointers(calibrate_on(client, plans=[])) == ["#/plans"]
    assert session.scalars(select(Calibration)).all() == []


def test_planners_finance_and_admins_calibrate_viewers_may_only_read(client, issue_key, measured_slow):
    assert calibrate_on(client, issue_key("planner", "acme")).status_code == 201
    assert calibrate_on(client, issue_key("finance", "acme")).status_code == 201
    assert_problem(calibrate_on(client, issue_key("viewer", "acme")), 403)
    assert client.get("/v1/calibrations", headers=bearer(issue_key("viewer", "acme"))).status_code == 200


def test_another_organisations_calibrations_are_invisible(client, issue_key, measured_slow):
    calibration = calibrate_on(client).get_json()
    theirs = bearer(issue_key("viewer", "globex"))
    assert_problem(client.get(f"/v1/calibrations/{calibration['id']}", headers=theirs), 404)
    assert client.get("/v1/calibrations", headers=theirs).get_json()["items"] == []
    assert pointers(calibrate_on(client, issue_key("planner", "globex"))) == ["#/organization"]
    ours = bearer(issue_key("viewer", "acme"))
    assert [c["id"] for c in client.get("/v1/calibrations", headers=ours).get_json()["items"]] == [
        calibration["id"]
    ]

"""The cluster model through the API: layouts, performance, goodput and the cluster size chosen."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from bench.published_runs import CALIBRATION_RUNS, LLAMA3_405B_FIELDS
from service.core import accuracy
from service.core.goodput import DEFAULT_RUN_OVERHEAD
from service.services.catalog import load_builtin_hardware
from tests.problems import assert_problem


@pytest.fixture
def catalog(session):
    load_builtin_hardware(session)


def estimate(client, **body):
    body = {"hardware": "h100-sxm", **body}
    return client.post("/v1/estimates", json=body)


def codes(body) -> list[str]:
    return [warning["code"] for warning in body["warnings"]]


def test_llama3_405b_on_16384_h100_is_modelled_with_its_layout_breakdown_and_goodput(client, catalog):
    response = estimate(client, params=405e9, tokens=15.6e12, accelerators=16384, shape=LLAMA3_405B_FIELDS)
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    performance = body["performance"]
    assert performance["layout"]["tensor_parallel"] == 8
    assert performance["layout"]["pipeline_parallel"] * performance["layout"]["data_parallel"] == 2048
    assert sum(performance["breakdown"].values()) == pytest.approx(performance["step_seconds"])
    assert 0.3 <= performance["mfu"] <= 0.5
    assert body["mfu"] == performance["mfu"]
    assert performance["alternatives"]
    assert performance["layouts_evaluated"] >= performance["layouts_fitting"] > 0
    goodput = performance["goodput"]
    # The default: what whole runs lose beyond failures and checkpoints.
    assert (goodput["run_overhead"], goodput["run_overhead_source"]) == (DEFAULT_RUN_OVERHEAD, "default")
    assert 0.8 < goodput["useful_fraction"] / (1 - goodput["run_overhead"]) < 1
    assert performance["goodput"]["interruptions"] > 100
    # Days and accelerator-hours follow from the steps, the step time and goodput.
    wall = performance["training_seconds"] / performance["goodput"]["useful_fraction"]
    assert body["seconds"] == pytest.approx(wall)
    assert body["accelerator_hours"] == pytest.approx(16384 * wall / 3600)
    assert performance["steps"] * performance["step_seconds"] == pytest.approx(
        performance["training_seconds"]
    )
    assert body["memory"]["fits"]
    assert performance["shape"]["params"] == pytest.approx(405.9e9, rel=1e-3)
    assert "assumed_shape" not in codes(body)


def test_a_given_mfu_overrides_the_model_and_says_so(client, catalog):
    body = estimate(client, params=7e9, tokens=1.4e11, accelerators=64, mfu=0.4).get_json()
    assert body["performance"] is None
    assert body["mfu"] == 0.4
    assert "mfu_given" in codes(body)
    flops = 6 * 7e9 * 1.4e11
    assert body["seconds"] == pytest.approx(flops / (64 * 989.4e12 * 0.4))


def test_without_a_shape_one_is_assumed_and_said(client, catalog):
    body = estimate(client, params=7e9, tokens=1.4e11, accelerators=64).get_json()
    assert "assumed_shape" in codes(body)
    assert body["performance"]["shape"]["params"] == pytest.approx(7e9, rel=0.25)


def test_the_top_level_tensor_parallel_still_works_as_a_layout_field_with_a_deprecation(client, catalog):
    body = estimate(client, params=7e9, tokens=1.4e11, accelerators=64, tensor_parallel=2).get_json()
    assert body["performance"]["layout"]["tensor_parallel"] == 2
    deprecated = next(w for w in body["warnings"] if w["code"] == "deprecated_field")
    assert deprecated["details"]["use"] == ["layout.tensor_parallel"]


def test_given_layout_fields_are_kept_and_the_rest_searched(client, catalog):
    layout = {"tensor_parallel": 4, "recomputation": "full", "global_batch": 512}
    body = estimate(client, params=7e9, tokens=1.4e11, accelerators=64, layout=layout).get_json()
    chosen = body["performance"]["layout"]
    assert (chosen["tensor_parallel"], chosen["recomputation"], chosen["global_batch"]) == (4, "full", 512)
    assert chosen["tensor_parallel"] * chosen["pipeline_parallel"] * chosen["data_parallel"] == 64


def test_without_accelerators_the_fewest_that_finish_by_the_deadline_are_chosen(client, catalog):
    body = estimate(client, params=70e9, tokens=1.4e12, days=30).get_json()
    assert body["performance"]["sizing"]["chosen_by"] == "days"
    assert body["days"] <= 30
    assert body["accelerators"] % 8 == 0


def test_five_million_dollars_without_a_deadline_are_planned_on_a_cluster_that_finishes_within_a_year(
    client, catalog
):
    body = client.post(
        "/v1/allocations",
        json={"cost": "5000000", "currency": "USD", "hardware": "h100-sxm", "law": "chinchilla-2022"},
    ).get_json()
    run = body["estimate"]
    assert run["performance"]["sizing"]["chosen_by"] == "budget"
    assert run["days"] <= 365  # the cheapest compute would take 48 accelerators 617 days
    assert Decimal(run["cost"]) <= Decimal("5000000")
    assert "implausibly_long_run" not in codes(body)


def test_five_million_dollars_and_60_days_on_h100s_buy_a_model_a_cluster_and_a_layout(client, catalog):
    response = client.post(
        "/v1/allocations",
        json={
            "cost": "5000000",
            "currency": "USD",
            "days": 60,
            "hardware": "h100-sxm",
            "law": "chinchilla-2022",
        },
    )
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    run = body["estimate"]
    assert run["performance"]["sizing"]["chosen_by"] == "budget"
    assert Decimal(run["cost"]) <= Decimal("5000000")
    assert run["days"] <= 60
    assert body["params"] > 1e10
    assert run["accelerators"] > 8
    binding = [limit["kind"] for limit in body["limits"] if limit["binding"]]
    assert binding in (["cost"], ["days"])


@pytest.mark.parametrize(
    ("layout", "pointer", "says"),
    [
        ({"tensor_parallel": 5}, "/layout/tensor_parallel", "1, 2, 4, 8"),
        ({"pipeline_parallel": 200}, "/layout/pipeline_parallel", "layers (126)"),
        (
            {"tensor_parallel": 8, "pipeline_parallel": 16, "data_parallel": 4, "context_parallel": 1},
            "/layout",
            "512",
        ),
        ({"data_parallel": 64, "global_batch": 128, "micro_batch": 3}, "/layout/micro_batch", "1, 2"),
    ],
)
def test_a_layout_that_cannot_run_is_a_422_naming_the_field(client, catalog, layout, pointer, says):
    response = estimate(
        client, params=405e9, tokens=1e12, accelerators=1024, shape=LLAMA3_405B_FIELDS, layout=layout
    )
    problem = assert_problem(response, 422)
    (error,) = problem["errors"]
    assert error["pointer"] == f"#{pointer}"
    assert says in error["detail"]


def test_a_model_no_layout_fits_is_a_422_saying_what_would(client, catalog):
    response = estimate(client, params=405e9, tokens=1e12, accelerators=8, shape=LLAMA3_405B_FIELDS)
    problem = assert_problem(response, 422)
    (error,) = problem["errors"]
    assert error["pointer"] == "#/layout"
    assert "would fit" in error["detail"]


def test_a_given_mfu_without_accelerators_runs_on_the_count_the_model_chooses(client, catalog):
    body = estimate(client, params=70e9, tokens=1.4e12, mfu=0.4, days=30).get_json()
    assert body["performance"] is None
    assert body["mfu"] == 0.4
    assert body["accelerators"] % 8 == 0
    assert "mfu_given" in codes(body)


def test_an_estimate_carries_80_percent_intervals_around_its_figures(client, catalog):
    body = estimate(client, params=7e9, tokens=1.4e11, accelerators=64).get_json()
    intervals = body["intervals"]
    assert intervals["confidence"] == 0.8
    step = body["performance"]["step_seconds"]
    judged = accuracy.widest(intervals["categories"])
    assert intervals["step_seconds"] == pytest.approx(list(judged.interval(step)))
    # Time takes the wider spread of the step's and whole runs', with whole runs' lean.
    assert intervals["days"] == pytest.approx(list(accuracy.WHOLE_RUN.interval(body["days"], widest=judged)))
    for figure in ("days", "accelerator_hours"):
        low, high = intervals[figure]
        assert 0 < low < high
        assert high / low == pytest.approx(intervals["days"][1] / intervals["days"][0])
    hours_low, hours_high = intervals["accelerator_hours"]
    price = Decimal(body["price_per_hour"])
    assert [Decimal(value) for value in intervals["cost"]] == [
        (price * Decimal(hours)).quantize(Decimal("0.01")) for hours in (hours_low, hours_high)
    ]


def test_the_groups_of_a_run_follow_its_hardware_layout_and_context(client, catalog):
    def groups(**body) -> list[str]:
        answer = estimate(client, params=7e9, tokens=1.4e11, **body).get_json()
        return answer["intervals"]["categories"]

    assert groups(accelerators=64, precision="fp8") == ["fp8"]  # H100's fp8 is calibrated, but fp8
    assert "uncalibrated hardware" in groups(accelerators=64, hardware="mi300x")  # no run calibrates it
    assert "parallelism" in groups(accelerators=64, layout={"tensor_parallel": 8})
    assert "scale" in groups(accelerators=1024)


def test_an_estimate_at_a_given_mfu_has_intervals_of_whole_runs_only(client, catalog):
    body = estimate(client, params=7e9, tokens=1.4e11, accelerators=64, mfu=0.4).get_json()
    intervals = body["intervals"]
    assert intervals["step_seconds"] is None
    assert intervals["categories"] == []
    low, high = intervals["days"]
    assert low < high


def test_unpriced_hardware_has_no_cost_interval(client, catalog):
    body = estimate(client, params=7e9, tokens=1.4e11, accelerators=64, hardware="mi325x").get_json()
    assert body["cost"] is None
    assert body["intervals"]["cost"] is None
    assert "uncalibrated hardware" in body["intervals"]["categories"]
    [unpriced] = [warning for warning in body["warnings"] if warning["code"] == "unpriced_hardware"]
    assert "no price per hour" in unpriced["message"]
    priced = estimate(client, params=7e9, tokens=1.4e11, accelerators=64).get_json()
    assert "unpriced_hardware" not in {warning["code"] for warning in priced["warnings"]}


def test_an_uncalibrated_parts_step_interval_straddles_its_point_wider_than_a_calibrated_ones(
    client, catalog
):
    # Nobody knows whether a part no run calibrates beats the lowest calibrated family's fractions it runs
    # at or falls below them: its interval leans neither way, and spans how far calibrated families differ.
    def step(hardware):
        answer = estimate(client, params=7e9, tokens=1.4e11, accelerators=64, hardware=hardware).get_json()
        low, high = answer["intervals"]["step_seconds"]
        return low, answer["performance"]["step_seconds"], high

    low, point, high = step("mi300x")
    assert point / low == pytest.approx(high / point)
    calibrated_low, _, calibrated_high = step("h100-sxm")
    assert high / low > calibrated_high / calibrated_low


def test_the_run_overhead_is_the_requests_or_the_default(client, catalog):
    default = estimate(client, params=7e9, tokens=1.4e11, accelerators=64).get_json()
    steady = estimate(
        client, params=7e9, tokens=1.4e11, accelerators=64, reliability={"run_overhead": 0}
    ).get_json()
    assert default["performance"]["goodput"]["run_overhead"] == DEFAULT_RUN_OVERHEAD
    assert steady["performance"]["goodput"]["run_overhead"] == 0
    assert default["seconds"] == pytest.approx(steady["seconds"] / (1 - DEFAULT_RUN_OVERHEAD))
    refused = estimate(client, params=7e9, tokens=1.4e11, accelerators=64, reliability={"run_overhead": 0.95})
    assert [error["pointer"] for error in assert_problem(refused, 422)["errors"]] == [
        "#/reliability/run_overhead"
    ]


def test_an_estimate_given_a_shape_takes_its_parameters_from_it(client, catalog):
    shaped = estimate(client, tokens=15.6e12, accelerators=16384, shape=LLAMA3_405B_FIELDS)
    assert shaped.status_code == 200, shaped.get_json()
    body = shaped.get_json()
    assert body["params"] == pytest.approx(body["performance"]["shape"]["params"])
    assert body["params"] == pytest.approx(405.9e9, rel=1e-3)
    assert "shape_scaled" not in codes(body)
    neither = estimate(client, tokens=1e12, accelerators=64)
    assert [error["pointer"] for error in assert_problem(neither, 422)["errors"]] == ["#/params"]


def test_a_searched_layout_leaves_the_memory_headroom_free(client, catalog):
    default = estimate(client, params=70e9, tokens=1.4e12, accelerators=64).get_json()
    assert default["performance"]["memory_bytes"] <= 80e9  # no headroom by default
    roomy = estimate(client, params=70e9, tokens=1.4e12, accelerators=64, memory_headroom=0.4).get_json()
    assert roomy["performance"]["memory_bytes"] <= 0.6 * 80e9
    assert roomy["performance"]["step_seconds"] >= default["performance"]["step_seconds"]


def test_a_given_layout_inside_memory_but_not_its_headroom_is_answered_with_a_warning(client, catalog):
    layout = {
        "tensor_parallel": 8,
        "pipeline_parallel": 1,
        "data_parallel": 8,
        "micro_batch": 1,
        "global_batch": 64,
        "recomputation": "none",
        "zero_stage": 1,
        "interleave": 1,
    }
    body = estimate(client, params=70e9, tokens=1.4e12, accelerators=64, layout=layout).get_json()
    used = body["performance"]["memory_bytes"] / 80e9
    headroom = 1 - used  # set the headroom just above what is left: the layout then crosses it
    crossed = estimate(
        client, params=70e9, tokens=1.4e12, accelerators=64, layout=layout, memory_headroom=headroom + 0.01
    ).get_json()
    [note] = [warning for warning in crossed["warnings"] if warning["code"] == "does_not_fit_memory"]
    assert "memory_headroom" in note["message"]
    assert note["details"]["memory_headroom"] == pytest.approx(headroom + 0.01)


def test_a_published_layout_a_little_over_memory_by_the_models_count_is_answered_with_a_warning(
    client, catalog
):
    # Llama 3 405B on 8 192 H100s ran in 80 GB; the model counts its activations at about 85 GB.
    [run] = [run for run in CALIBRATION_RUNS if run.name == "Llama 3 405B, 8192 H100, context 8192"]
    layout = dataclasses.asdict(run.layout)
    response = estimate(
        client, params=405e9, tokens=1e12, accelerators=8192, shape=LLAMA3_405B_FIELDS, layout=layout
    )
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert 80e9 < body["memory"]["total_bytes"] <= 1.15 * 80e9
    assert body["memory"]["fits"] is False
    assert "does_not_fit_memory" in codes(body)

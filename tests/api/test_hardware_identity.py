"""A hardware's efficiency is a figure of its profile: the same figures give the same answer under any name,
inline or stored, and hardware nobody calibrated says so (issue 48)."""

from __future__ import annotations

import copy

import pytest

from service.core import performance
from service.core.goodput import DEFAULT_RUN_OVERHEAD
from service.data.models import HARDWARE_FIGURES
from service.schemas.cluster import InlineHardwareSchema
from service.services import plan_documents
from service.services.catalog import load_builtin_hardware
from tests.api.test_plans import OMIT, plan_body
from tests.problems import assert_problem

RUN = {"params": 7e9, "tokens": 1.4e11, "accelerators": 64}
# What GET /v1/hardware/{slug} shows that a request may send back (the rest is the service's), and what of
# it inline hardware takes.
WRITABLE = ("peak_flops", *HARDWARE_FIGURES)
INLINE = tuple(name for name in InlineHardwareSchema().load_fields if name in WRITABLE)


@pytest.fixture
def catalog(session):
    load_builtin_hardware(session)


def estimate(client, hardware) -> dict:
    response = client.post("/v1/estimates", json={**RUN, "hardware": hardware})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def patch(client, slug: str, changes: dict):
    etag = client.get(f"/v1/hardware/{slug}").headers["ETag"]
    return client.patch(f"/v1/hardware/{slug}", json=changes, headers={"If-Match": etag})


def codes(body) -> list[str]:
    return [warning["code"] for warning in body["warnings"]]


def test_every_built_in_profile_says_where_its_efficiency_came_from(client, catalog):
    items = client.get("/v1/hardware?limit=100").get_json()["items"]
    assert items
    for profile in items:
        efficiency = profile["efficiency"]
        assert efficiency["provenance"] in ("calibrated", "derived", "uncalibrated"), profile["slug"]
        assert efficiency["basis"], profile["slug"]
        assert set(efficiency["gemm"]) <= set(profile["peak_flops"]), profile["slug"]
    by_slug = {profile["slug"]: profile["efficiency"]["provenance"] for profile in items}
    assert by_slug["h100-sxm"] == by_slug["a100-80gb"] == "calibrated"
    assert by_slug["mi300x"] == "uncalibrated"


def test_the_same_figures_inline_or_under_another_slug_give_the_same_answer(client, catalog):
    profile = client.get("/v1/hardware/h100-sxm").get_json()
    published = estimate(client, "h100-sxm")

    inline = estimate(client, {name: profile[name] for name in INLINE})
    copy = {name: profile[name] for name in WRITABLE}
    assert client.post("/v1/hardware", json={**copy, "slug": "acme-h100"}).status_code == 201
    renamed = estimate(client, "acme-h100")

    for other in (inline, renamed):
        assert other["days"] == published["days"]
        assert other["performance"]["step_seconds"] == published["performance"]["step_seconds"]
    assert "uncalibrated_hardware" not in codes(published)


def test_figures_without_an_efficiency_run_at_the_uncalibrated_default_and_say_so(client, catalog):
    profile = client.get("/v1/hardware/h100-sxm").get_json()
    bare = estimate(client, {name: profile[name] for name in INLINE if name != "efficiency"})
    [note] = [warning for warning in bare["warnings"] if warning["code"] == "uncalibrated_hardware"]
    assert note["details"] == {
        "precision": "bf16",
        "matmul_efficiency": performance.CALIBRATION.matmul_efficiency,
    }
    assert "uncalibrated_hardware" in codes(estimate(client, "mi300x"))


def test_a_profiles_efficiency_can_be_set_and_moves_the_answer(client, catalog):
    profile = client.get("/v1/hardware/h100-sxm").get_json()
    copy = {name: profile[name] for name in WRITABLE}
    assert client.post("/v1/hardware", json={**copy, "slug": "our-h100"}).status_code == 201
    before = estimate(client, "our-h100")
    slower = {"gemm": {"bf16": 0.45}, "provenance": "calibrated", "basis": "our Megatron runs, May 2026"}
    response = patch(client, "our-h100", {"efficiency": slower})
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["efficiency"] == slower
    assert estimate(client, "our-h100")["days"] > 1.2 * before["days"]
    cleared = patch(client, "our-h100", {"efficiency": None}).get_json()
    assert cleared["efficiency"] is None
    assert "uncalibrated_hardware" in codes(estimate(client, "our-h100"))


@pytest.mark.parametrize(
    ("efficiency", "pointer"),
    [
        ({"gemm": {"bf16": 1.5}, "provenance": "derived", "basis": "x"}, "#/hardware/efficiency/gemm/bf16"),
        ({"gemm": {"bf16": 0.01}, "provenance": "derived", "basis": "x"}, "#/hardware/efficiency/gemm/bf16"),
        ({"gemm": {}, "provenance": "derived", "basis": "x"}, "#/hardware/efficiency/gemm"),
        ({"gemm": {"bf16": 0.6}, "provenance": "guessed", "basis": "x"}, "#/hardware/efficiency/provenance"),
        ({"gemm": {"bf16": 0.6}, "provenance": "derived"}, "#/hardware/efficiency/basis"),
    ],
)
def test_a_bad_efficiency_is_a_422_naming_the_field(client, catalog, efficiency, pointer):
    profile = client.get("/v1/hardware/h100-sxm").get_json()
    hardware = {**{name: profile[name] for name in INLINE}, "efficiency": efficiency}
    response = client.post("/v1/estimates", json={**RUN, "hardware": hardware})
    assert [error["pointer"] for error in assert_problem(response, 422)["errors"]] == [pointer]


def test_a_plan_from_before_profiles_stated_efficiencies_replays_at_the_one_its_constants_gave(
    client, catalog
):
    # Snapshots of engine 2.1 kept efficiencies by slug prefix in the constants and none in the hardware.
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    body = plan_body(hardware="h100-sxm", mfu=OMIT, accelerators=8, start_at=OMIT)
    response = client.post("/v1/plans", json=body)
    assert response.status_code == 201, response.get_json()
    plan = response.get_json()
    snapshot = plan["snapshot"]
    legacy = copy.deepcopy(snapshot)
    del legacy["hardware"]["efficiency"]
    legacy["cluster_model"]["calibration"] |= {
        "matmul_efficiency": 0.751,
        "matmul_efficiency_by_hardware": {"a100": 0.751, "h100": 0.5},
    }
    same_today = copy.deepcopy(snapshot)
    same_today["hardware"]["efficiency"]["gemm"]["bf16"] = 0.5

    def step(snapshot) -> float:
        return plan_documents.replay(plan["inputs"], snapshot).estimate.run.search.best.seconds

    assert step(legacy) == step(same_today) > step(snapshot)
    assert step(snapshot) == plan["result"]["estimate"]["performance"]["step_seconds"]


def test_an_estimate_says_what_it_ran_the_hardware_at_and_how_that_is_known(client, catalog):
    profile = client.get("/v1/hardware/h100-sxm").get_json()
    used = estimate(client, "h100-sxm")["performance"]["hardware_efficiency"]
    assert used == {
        "gemm": profile["efficiency"]["gemm"]["bf16"],
        "attention": profile["efficiency"]["attention"],
        "provenance": "calibrated",
        "basis": profile["efficiency"]["basis"],
    }
    unknown = estimate(client, "mi300x")["performance"]["hardware_efficiency"]
    assert unknown["provenance"] == "uncalibrated"
    assert unknown["gemm"] == performance.CALIBRATION.matmul_efficiency
    assert unknown["attention"] == performance.CALIBRATION.attention_efficiency


def test_a_profile_s_attention_fraction_sets_the_pace_of_long_context(client, catalog):
    # At 32K tokens attention is most of a 7B model's work: a profile whose fused attention reaches twice
    # the fraction trains markedly faster, and says so.
    profile = client.get("/v1/hardware/h100-sxm").get_json()
    inline = {name: profile[name] for name in INLINE}
    long_context = {**RUN, "shape": {"layers": 32, "d_model": 4096, "heads": 32, "sequence_length": 32768}}
    efficiency = inline["efficiency"]
    slow, fast = (
        client.post(
            "/v1/estimates",
            json={**long_context, "hardware": {**inline, "efficiency": {**efficiency, "attention": a}}},
        ).get_json()
        for a in (0.2, 0.4)
    )
    assert slow["performance"]["hardware_efficiency"]["attention"] == 0.2
    assert fast["performance"]["hardware_efficiency"]["attention"] == 0.4
    assert 1.3 < slow["performance"]["step_seconds"] / fast["performance"]["step_seconds"] < 2


def test_a_profile_s_run_overhead_is_what_its_runs_lose_unless_the_request_says(client, catalog):
    copy = {name: client.get("/v1/hardware/h100-sxm").get_json()[name] for name in WRITABLE}
    assert client.post("/v1/hardware", json={**copy, "slug": "acme-h100"}).status_code == 201
    assert patch(client, "acme-h100", {"run_overhead": 0.25}).status_code == 200
    default = estimate(client, "h100-sxm")["performance"]["goodput"]
    ours = estimate(client, "acme-h100")
    inline = estimate(client, {**{name: copy[name] for name in INLINE}, "run_overhead": 0.25})
    asked = client.post(
        "/v1/estimates",
        json={**RUN, "hardware": "acme-h100", "reliability": {"run_overhead": DEFAULT_RUN_OVERHEAD}},
    ).get_json()

    assert (default["run_overhead"], default["run_overhead_source"]) == (DEFAULT_RUN_OVERHEAD, "default")
    goodput = ours["performance"]["goodput"]
    assert (goodput["run_overhead"], goodput["run_overhead_source"]) == (0.25, "hardware")
    kept = 0.75 / (1 - DEFAULT_RUN_OVERHEAD)
    assert goodput["useful_fraction"] == pytest.approx(default["useful_fraction"] * kept, rel=1e-12)
    assert inline["days"] == ours["days"]
    assert asked["performance"]["goodput"]["run_overhead_source"] == "request"
    assert asked["days"] == estimate(client, "h100-sxm")["days"]
    refused = assert_problem(patch(client, "acme-h100", {"run_overhead": 0.95}), 422)
    assert [error["pointer"] for error in refused["errors"]] == ["#/run_overhead"]


def test_transformer_engine_s_attention_is_the_frameworks_that_run_it(client, catalog):
    # The H100 states FlashAttention-2's fraction and Transformer Engine's apart; Megatron-Core runs the
    # latter, torchtitan the former; a profile stating one figure runs it for both.
    stated = client.get("/v1/hardware/h100-sxm").get_json()["efficiency"]
    assert stated["attention_transformer_engine"] > stated["attention"]
    long_context = {**RUN, "shape": {"layers": 32, "d_model": 4096, "heads": 32, "sequence_length": 32768}}

    def run(hardware, framework):
        body = client.post(
            "/v1/estimates", json={**long_context, "hardware": hardware, "framework": framework}
        )
        assert body.status_code == 200, body.get_json()["errors"]
        return body.get_json()["performance"]

    nemo, titan = run("h100-sxm", "megatron-core"), run("h100-sxm", "torchtitan")
    assert nemo["hardware_efficiency"]["attention"] == stated["attention_transformer_engine"]
    assert titan["hardware_efficiency"]["attention"] == stated["attention"]
    one = {name: client.get("/v1/hardware/h100-sxm").get_json()[name] for name in INLINE}
    one["efficiency"] = {
        name: value for name, value in stated.items() if name != "attention_transformer_engine"
    }
    a100 = client.get("/v1/hardware/a100-80gb").get_json()["efficiency"]
    assert "attention_transformer_engine" not in a100  # stated by no run: left out, not null
    assert run(one, "megatron-core")["hardware_efficiency"]["attention"] == stated["attention"]

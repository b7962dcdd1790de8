"""Mixture-of-experts models over HTTP (issue 22): allocated by an MoE law, estimated with a shape or with
active parameters alone, planned, committed and reported like dense ones."""

from __future__ import annotations

import pytest

from tests.api.test_plans import add_gpu, make_budget, transition
from tests.problems import assert_problem


def pointers(response) -> list[str]:
    return [error["pointer"] for error in assert_problem(response, 422)["errors"]]


# A small fine-grained mixture of experts: 8 layers of width 1024, 32 experts of 512, 4 per token and one
# shared, the first layer dense; latent attention and one prediction module, as DeepSeek-V3 has.
MOE_SHAPE = {
    "layers": 8,
    "d_model": 1024,
    "heads": 8,
    "head_dim": 128,
    "sequence_length": 2048,
    "vocabulary": 32_000,
    "activation": "swiglu",
    "ffn": 4096,
    "experts": 32,
    "experts_per_token": 4,
    "shared_experts": 1,
    "expert_ffn": 512,
    "dense_layers": 1,
    "kv_lora_rank": 256,
    "q_lora_rank": 512,
    "mtp_depth": 1,
}


@pytest.fixture
def world(client):
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    add_gpu(client, "lab-gpu")


def test_an_moe_law_allocates_total_and_active_parameters_and_experts_and_models_that_model(client, world):
    response = client.post(
        "/v1/allocations",
        json={"flops": 1e21, "law": "krajewski-2024-g8", "hardware": "lab-gpu", "accelerators": 64},
    )

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert (body["experts"], body["experts_per_token"]) == (512, 8)
    # Krajewski et al.'s N: all non-embedding parameters, 43 times those a token uses at expansion rate 64.
    assert body["params"] == pytest.approx(43 * body["active_params"], rel=1e-9)
    assert body["law"]["counts_embeddings"] is False
    shape = body["estimate"]["performance"]["shape"]
    assert (shape["experts"], shape["experts_per_token"]) == (512, 8)
    # The model the cluster runs: the law's layers, with embeddings on top (the law leaves them out).
    assert shape["params"] - shape["embedding_params"] == pytest.approx(body["params"], rel=0.1)
    assert shape["active_params"] < shape["params"] / 10
    assert "assumed_shape" in {warning["code"] for warning in body["warnings"]}


@pytest.mark.parametrize("field", ["target_loss", "inference_tokens", "unique_tokens"])
def test_rules_derived_for_dense_laws_are_refused_with_an_moe_law_naming_the_field(client, world, field):
    value = {"target_loss": 2.5, "inference_tokens": 1e12, "unique_tokens": 1e10}[field]
    body = {"law": "krajewski-2024-g8", field: value}
    if field != "target_loss":
        body["flops"] = 1e21
    response = client.post("/v1/allocations", json=body)
    assert pointers(response) == [f"#/{field}"]


def test_an_estimate_of_a_mixture_of_experts_counts_the_flops_of_its_active_parameters(client, world):
    response = client.post(
        "/v1/estimates",
        json={
            "params": 47e9,
            "active_params": 13e9,
            "tokens": 1e11,
            "hardware": "lab-gpu",
            "accelerators": 64,
        },
    )

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["flops"] == pytest.approx(6 * 13e9 * 1e11)
    shape = body["performance"]["shape"]
    assert shape["params"] == pytest.approx(47e9, rel=0.05)
    assert shape["experts_per_token"] == 8


def test_active_params_with_a_shape_or_above_params_is_refused(client, world):
    base = {"params": 47e9, "tokens": 1e11, "hardware": "lab-gpu", "accelerators": 64}
    assert pointers(client.post("/v1/estimates", json={**base, "active_params": 48e9})) == ["#/params"]
    with_shape = {**base, "active_params": 13e9, "shape": MOE_SHAPE}
    assert pointers(client.post("/v1/estimates", json=with_shape)) == ["#/active_params"]


def test_a_bad_moe_shape_or_expert_layout_is_a_422_naming_the_field(client, world):
    base = {"params": 1e9, "tokens": 1e10, "hardware": "lab-gpu", "accelerators": 8}
    no_experts = {k: v for k, v in MOE_SHAPE.items() if k != "experts"}
    assert pointers(client.post("/v1/estimates", json={**base, "shape": no_experts})) == ["#/shape/experts"]
    dense = {"layers": 8, "d_model": 1024, "heads": 8, "sequence_length": 2048}
    expert_layout = {**base, "shape": dense, "layout": {"expert_parallel": 2}}
    assert pointers(client.post("/v1/estimates", json=expert_layout)) == ["#/layout/expert_parallel"]
    odd = {**base, "shape": MOE_SHAPE, "layout": {"expert_parallel": 3}}
    assert pointers(client.post("/v1/estimates", json=odd)) == ["#/layout/expert_parallel"]


def test_an_moe_plan_is_made_committed_and_reported_like_a_dense_one(client, world):
    budget = make_budget(client, amount="100000.00")
    plan = {
        "organization": "acme",
        "budget_id": budget["id"],
        "hardware": "lab-gpu",
        "accelerators": 16,
        "params": 1.16e9,
        "tokens": 2e10,
        "shape": MOE_SHAPE,
        "start_at": "2027-01-04T00:00:00Z",
    }

    created = client.post("/v1/plans", json=plan)
    assert created.status_code == 201, created.get_json()
    body = created.get_json()
    performance = body["result"]["estimate"]["performance"]
    assert performance["shape"]["experts"] == 32
    assert MOE_SHAPE["experts"] % performance["layout"]["expert_parallel"] == 0
    assert performance["shape"]["active_params"] < performance["shape"]["params"]
    assert "expert_parallel" in performance["breakdown"]
    assert body["flops"] < 6 * 1.16e9 * 2e10  # the active parameters set the FLOPs

    committed = transition(client, body["id"], "commit")
    assert committed.status_code == 200, committed.get_json()
    assert client.get(f"/v1/budgets/{budget['id']}").get_json()["committed"] == body["cost"]
    response = client.get("/v1/reports/costs?from=2027-01-01T00:00:00Z&to=2027-02-01T00:00:00Z")
    assert response.status_code == 200, response.get_json()
    [total] = response.get_json()["totals"]
    assert (total["plans"], total["cost"]) == (1, body["cost"])


def test_a_plan_of_a_mixture_of_experts_given_by_its_parameters_counts_its_active_ones(client, world):
    body = {
        "organization": "acme",
        "hardware": "lab-gpu",
        "accelerators": 64,
        "params": 47e9,
        "active_params": 13e9,
        "tokens": 1e11,
    }
    created = client.post("/v1/plans", json=body)
    assert created.status_code == 201, created.get_json()
    assert created.get_json()["flops"] == pytest.approx(6 * 13e9 * 1e11)
    assert created.get_json()["inputs"]["active_params"] == 13e9
    result = created.get_json()["result"]
    assert (result["active_params"], result["experts_per_token"]) == (13e9, 8)
    without_params = {k: v for k, v in body.items() if k not in {"params", "tokens"}} | {"flops": 1e21}
    assert pointers(client.post("/v1/plans", json=without_params)) == ["#/params"]

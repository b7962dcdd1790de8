"""POST /v1/allocations, POST /v1/estimates and the scaling-law endpoints, over HTTP."""

from __future__ import annotations

from decimal import Decimal

import pytest

from service.core.laws import PUBLISHED_LAWS
from service.services.catalog import load_builtin_hardware
from tests.problems import assert_problem

CHINCHILLA = PUBLISHED_LAWS["chinchilla-2022"].law


@pytest.fixture
def catalog(session):
    load_builtin_hardware(session)


def allocate(client, **body):
    return client.post("/v1/allocations", json=body)


def pointers(response) -> list[str]:
    return [error["pointer"] for error in assert_problem(response, 422)["errors"]]


def test_6000_pf_days_make_a_65_7b_model_on_1_31t_tokens(client):
    response = allocate(client, pf_days=6000)
    assert response.status_code == 200
    body = response.get_json()
    assert body["method"] == "fixed-ratio"
    assert body["params"] == pytest.approx(65.7e9, rel=1e-3)
    assert body["tokens"] == pytest.approx(1.3145e12, rel=1e-3)
    assert body["tokens_per_param"] == pytest.approx(20)
    assert body["predicted_loss"] is None
    assert body["limits"] == [
        {"kind": "pf_days", "flops": pytest.approx(5.184e23), "binding": True, "unspent": 0.0}
    ]
    assert body["hyperparameters"]["batch_tokens"] > 0
    assert body["engine_version"]


def test_a_law_by_slug_gives_the_compute_optimal_model_with_its_loss_and_the_law_used(client):
    body = allocate(client, flops=5.76e23, law="chinchilla-2022").get_json()
    assert body["method"] == "compute-optimal"
    assert body["params"] == pytest.approx(4.036e10, rel=1e-3)
    assert body["predicted_loss"] == pytest.approx(CHINCHILLA.frontier_loss(5.76e23), rel=1e-12)
    assert body["law"]["slug"] == "chinchilla-2022"
    assert body["law"]["alpha"] == 0.33917084


def test_an_inline_law_is_used_as_given(client):
    law = {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
    body = allocate(client, flops=1e22, law=law).get_json()
    assert body["tokens_per_param"] == pytest.approx(20.4, abs=0.05)
    assert body["law"]["slug"] is None


def test_on_catalog_hardware_a_deadline_binds_and_the_estimate_has_time_cost_and_memory(client, catalog):
    response = allocate(
        client,
        flops=1e25,
        days=30,
        hardware="h100-sxm",
        accelerators=2048,
        law="epoch-2024",
        zero_stage=3,
        mfu=0.4,
    )
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert [limit["kind"] for limit in body["limits"] if limit["binding"]] == ["days"]
    estimate = body["estimate"]
    assert estimate["days"] == pytest.approx(30, rel=1e-9)
    assert estimate["currency"] == "USD"
    assert estimate["price_per_hour"] == "6.88"
    hours = Decimal(repr(estimate["accelerator_hours"]))
    assert Decimal(estimate["cost"]) == (hours * Decimal("6.88")).quantize(Decimal("0.01"))
    assert estimate["memory"]["fits"] is True
    [binding] = [w for w in body["warnings"] if w["code"] == "binding_limit"]
    # The run fills the days it was sized for; the compute limit it did not reach is left unspent.
    assert [limit["unspent"] for limit in body["limits"]] == [pytest.approx(0.79, abs=0.01), 0.0]
    assert "leaves 0.00% of it unspent" in binding["message"]


def test_a_money_budget_on_catalog_hardware(client, catalog):
    body = allocate(
        client, cost="250000.00", currency="USD", hardware="a100-80gb", accelerators=64, mfu=0.4
    ).get_json()
    assert body["estimate"]["cost"] == "250000.00"
    assert body["estimate"]["accelerator_hours"] == pytest.approx(250000 / 2.79, rel=1e-9)


def test_data_constrained_allocation_reports_epochs(client):
    body = allocate(client, flops=6 * 8.67e9 * 178e9, unique_tokens=25e9).get_json()
    assert body["method"] == "data-constrained"
    assert body["law"]["slug"] == "muennighoff-2023-c4"
    assert body["epochs"] == pytest.approx(body["tokens"] / 25e9)
    assert "repeated_data" in [w["code"] for w in body["warnings"]]


def test_inference_aware_allocation_reports_the_saving(client):
    body = allocate(
        client, target_loss=1.9582533604758408, inference_tokens=1e13, law="sardana-2024"
    ).get_json()
    assert body["method"] == "inference-aware"
    assert body["params"] == pytest.approx(13.6e9, rel=5e-3)
    assert body["inference"]["fraction_saved"] == pytest.approx(0.28, abs=5e-3)
    assert body["inference"]["compute_optimal"]["params"] == pytest.approx(30e9, rel=1e-6)


# Sardana et al. 2024, Figure 1: a 13B Chinchilla-optimal model with 2T inference tokens is matched by a 7B
# model on more data for 17% fewer lifetime FLOPs. This budget is that 7B model's training compute.
SARDANA = PUBLISHED_LAWS["sardana-2024"].law
FIGURE_1_BUDGET = 5.2174e22


def test_a_training_budget_with_inference_tokens_buys_the_model_cheapest_over_its_lifetime(client):
    response = allocate(client, flops=FIGURE_1_BUDGET, inference_tokens=2e12, law="sardana-2024")

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["method"] == "inference-aware"
    assert body["flops"] == FIGURE_1_BUDGET
    assert body["params"] == pytest.approx(7e9, rel=0.01)
    inference = body["inference"]
    assert (inference["minimised"], inference["constraint"]) == ("lifetime_flops", "budget")
    assert inference["inference_flops"] == pytest.approx(2 * body["params"] * 2e12, rel=1e-12)
    assert inference["compute_optimal"]["params"] == pytest.approx(13e9, rel=1e-3)  # the same loss
    assert inference["fraction_saved"] == pytest.approx(0.17, abs=5e-3)
    at_budget = inference["compute_optimal_at_budget"]
    assert at_budget["params"] == pytest.approx(SARDANA.optimal_params(FIGURE_1_BUDGET), rel=1e-12)
    assert at_budget["predicted_loss"] < body["predicted_loss"]
    assert inference["serving"] is None  # nothing to serve on


def test_inference_is_served_and_priced_on_the_training_hardware_by_default(client, catalog):
    body = allocate(
        client,
        cost="100000.00",
        currency="USD",
        hardware="h100-sxm",
        accelerators=64,
        inference_tokens=1e12,
        mfu=0.4,
    ).get_json()

    serving = body["inference"]["serving"]
    assert serving["hardware"]["slug"] == "h100-sxm"
    assert (serving["batch"], serving["bytes_per_param"], serving["bound"]) == (1, 2, "memory_bandwidth")
    assert serving["tokens_per_second"] == pytest.approx(3.35e12 / (2 * body["params"]), rel=1e-12)
    assert serving["accelerator_hours"] == pytest.approx(
        1e12 / serving["tokens_per_second"] / 3600, rel=1e-12
    )
    hours = Decimal(repr(serving["accelerator_hours"]))
    assert (serving["price_per_hour"], serving["currency"]) == ("6.88", "USD")
    assert Decimal(serving["cost"]) == (hours * Decimal("6.88")).quantize(Decimal("0.01"))
    assert body["estimate"]["cost"] == "100000.00"  # training's, never added to serving's


def test_inference_hardware_of_its_own_serves_a_target_loss_model_in_batches(client, catalog):
    body = allocate(
        client, target_loss=2.2, inference_tokens=1e12, inference_hardware="tpu-v5e", inference_batch=32
    ).get_json()

    serving = body["inference"]["serving"]
    assert body["inference"]["constraint"] == "target_loss"
    assert body["inference"]["compute_optimal_at_budget"] is None
    assert (serving["hardware"]["slug"], serving["batch"], serving["price_per_hour"]) == (
        "tpu-v5e",
        32,
        "1.20",
    )
    assert serving["tokens_per_second"] == pytest.approx(32 * 0.819e12 / (2 * body["params"]), rel=1e-12)


def test_an_estimate_on_inline_hardware(client):
    hardware = {
        "name": "mine",
        "peak_flops": {"bf16": 312e12},
        "memory_bytes": 40e9,
        "price_per_hour": "2.00",
        "currency": "USD",
    }
    response = client.post(
        "/v1/estimates",
        json={"params": 6.7e9, "tokens": 1e12, "hardware": hardware, "accelerators": 440, "mfu": 0.4},
    )
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["flops"] == pytest.approx(6 * 6.7e9 * 1e12)
    assert body["seconds"] == pytest.approx(6 * 6.7e9 * 1e12 / (440 * 312e12 * 0.4))
    assert body["cost"] == str((Decimal(repr(body["accelerator_hours"])) * 2).quantize(Decimal("0.01")))
    assert body["memory"]["zero_stage"] == 0
    assert body["hardware"]["slug"] is None


INLINE_CLUSTER = {
    "accelerators_per_node": 4,
    "scale_up_bandwidth_bytes_per_second": 200e9,
    "scale_out_bandwidth_bytes_per_second": 12.5e9,
    "failures_per_accelerator_hour": 3e-5,
}


def test_inline_hardware_takes_the_cluster_figures_and_under_a_given_mfu_they_change_no_result(client):
    hardware = {"name": "mine", "peak_flops": {"bf16": 312e12}, "memory_bytes": 40e9}
    request = {"params": 6.7e9, "tokens": 1e12, "accelerators": 440, "mfu": 0.4}

    plain = client.post("/v1/estimates", json={**request, "hardware": hardware})
    installed = client.post("/v1/estimates", json={**request, "hardware": {**hardware, **INLINE_CLUSTER}})

    assert installed.status_code == 200, installed.get_json()
    assert installed.get_json() == plain.get_json()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("accelerators_per_node", 0),
        ("accelerators_per_node", 2.5),
        ("scale_up_bandwidth_bytes_per_second", -1),
        ("scale_out_bandwidth_bytes_per_second", 0),
        ("failures_per_accelerator_hour", 1),
        ("failures_per_accelerator_hour", None),
    ],
)
def test_an_invalid_inline_cluster_figure_is_a_422_problem_naming_it(client, field, value):
    hardware = {"name": "mine", "peak_flops": {"bf16": 312e12}, "memory_bytes": 40e9, field: value}

    response = client.post(
        "/v1/estimates", json={"params": 6.7e9, "tokens": 1e12, "hardware": hardware, "accelerators": 8}
    )

    assert pointers(response) == [f"#/hardware/{field}"]


def test_an_estimate_with_a_shape_counts_attention_and_activations(client, catalog):
    # Trained with dropout, as Korthikanti et al.'s Table 2 counts: 34·s·b·h a layer, the masks included.
    shape = {
        "layers": 32,
        "d_model": 4096,
        "heads": 32,
        "sequence_length": 4096,
        "micro_batch": 1,
        "dropout": True,
    }
    body = client.post(
        "/v1/estimates",
        json={
            "params": 7e9,
            "tokens": 1e12,
            "hardware": "h100-sxm",
            "accelerators": 64,
            "shape": shape,
            "recomputation": "selective",
            "zero_stage": 1,
            "mfu": 0.4,  # the memory of the plans before the cluster model, which the layout's replaces
        },
    ).get_json()
    assert body["flops"] == pytest.approx(1e12 * (6 * 7e9 + 6 * 32 * 4096 * 4096))
    assert body["memory"]["activations_bytes"] == pytest.approx(32 * 4096 * 4096 * 34)


LLAMA_65B = {"layers": 80, "d_model": 8192, "heads": 64, "sequence_length": 2048, "micro_batch": 1}


# Without dropout (LLaMA's), s·b·h·(8 + 24/8) a layer with tensor parallelism alone and 32/8 with sequence
# parallelism: 2048 · 8192 · 11 · 80 = 14.76e9 and 2048 · 8192 · 4 · 80 = 5.37e9.
@pytest.mark.parametrize(("options", "gigabytes"), [({"sequence_parallel": False}, 14.76), ({}, 5.37)])
def test_an_estimate_says_whether_sequence_parallelism_split_the_activations(
    client, catalog, options, gigabytes
):
    body = client.post(
        "/v1/estimates",
        json={
            "params": 65.2e9,
            "tokens": 1.4e12,
            "hardware": "h100-sxm",
            "accelerators": 2048,
            "shape": LLAMA_65B,
            "recomputation": "selective",
            "tensor_parallel": 8,
            "zero_stage": 1,
            "mfu": 0.4,
            **options,
        },
    ).get_json()

    assert body["memory"]["activations_bytes"] / 1e9 == pytest.approx(gigabytes, abs=0.005)
    assert body["memory"]["sequence_parallel"] is options.get("sequence_parallel", True)


def test_hyperparameter_hints_say_which_compute_they_were_taken_at(client, catalog):
    plain = allocate(client, flops=5.76e23).get_json()["hyperparameters"]
    cluster = {"hardware": "h100-sxm", "accelerators": 2048, "shape": LLAMA_65B}
    shaped = allocate(client, flops=5.76e23, **cluster).get_json()

    assert (plain["flops"], plain["flops_definition"]) == (5.76e23, "6ND")
    M = 72 * 80 * 8192**2 + 12 * 80 * 8192 * 2048  # DeepSeek's non-embedding FLOPs per token
    assert shaped["hyperparameters"]["flops"] == pytest.approx(M * shaped["tokens"], rel=1e-12)
    assert shaped["hyperparameters"]["flops_definition"] == "MD"


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({}, "#"),
        ({"flops": -1}, "#/flops"),
        ({"flops": 0}, "#/flops"),
        ({"flops": 1e36}, "#/flops"),
        ({"flops": "lots"}, "#/flops"),
        ({"flops": 1e22, "pf_days": 10}, "#/pf_days"),
        ({"flops": 1e22, "target_loss": 2}, "#/flops"),
        ({"flops": 1e22, "law": "chinchilla-2099"}, "#/law"),
        ({"flops": 1e22, "law": "Not A Slug"}, "#/law"),
        ({"flops": 1e22, "law": {"E": 1, "A": 1, "B": 1, "alpha": 0}}, "#/law/alpha"),
        ({"flops": 1e22, "law": {"E": 1, "A": 1, "B": 1, "alpha": 0.3}}, "#/law/beta"),
        ({"flops": 1e22, "law": "epoch-2024", "tokens_per_param": 20}, "#/tokens_per_param"),
        ({"target_loss": 1.69, "law": "chinchilla-2022"}, "#/target_loss"),
        ({"flops": 1e22, "inference_hardware": "h100-sxm"}, "#/inference_tokens"),
        ({"flops": 1e22, "inference_batch": 8}, "#/inference_tokens"),
        ({"flops": 1e22, "inference_tokens": 1e12, "inference_batch": 0}, "#/inference_batch"),
        (
            {"flops": 1e22, "inference_tokens": 1e12, "inference_hardware": "no-such-gpu"},
            "#/inference_hardware",
        ),
        (
            {
                "flops": 1e22,
                "inference_tokens": 1e12,
                "inference_hardware": {"peak_flops": {"bf16": 1e15}, "memory_bytes": 1e9},
            },
            "#/inference_hardware/memory_bandwidth_bytes_per_second",
        ),
        ({"flops": 1e22, "inference_tokens": 1e12, "unique_tokens": 1e9}, "#/unique_tokens"),
        ({"flops": 1e22, "inference_tokens": 1e12, "tokens_per_param": 20}, "#/tokens_per_param"),
        ({"flops": 1e6, "inference_tokens": 1e6}, "#/flops"),
        ({"days": 30}, "#/hardware"),
        (
            {"cost": "1000.00", "currency": "USD", "hardware": "h100-sxm", "accelerators": 8, "mfu": 1.5},
            "#/mfu",
        ),
        ({"cost": 1000, "currency": "USD", "hardware": "h100-sxm", "accelerators": 8}, "#/cost"),
        ({"cost": "1000.00", "hardware": "h100-sxm", "accelerators": 8}, "#/currency"),
        ({"cost": "1000.00", "currency": "usd", "hardware": "h100-sxm", "accelerators": 8}, "#/currency"),
        ({"cost": "1000.00", "currency": "ZZZ", "hardware": "h100-sxm", "accelerators": 8}, "#/currency"),
        ({"cost": "1000.00", "currency": "EUR", "hardware": "h100-sxm", "accelerators": 8}, "#/currency"),
        ({"cost": "10.5.0", "currency": "USD", "hardware": "h100-sxm", "accelerators": 8}, "#/cost"),
        ({"flops": 1e22, "hardware": "no-such-gpu", "accelerators": 8}, "#/hardware"),
        ({"flops": 1e22, "hardware": "v100-sxm2-32gb", "accelerators": 8}, "#/precision"),
        ({"flops": 1e22, "hardware": "h100-sxm", "accelerators": 8, "precision": "fp64"}, "#/precision"),
        ({"flops": 1e22, "hardware": "h100-sxm", "accelerators": 0}, "#/accelerators"),
        (
            {"flops": 1e22, "hardware": "h100-sxm", "accelerators": 8, "tensor_parallel": 3},
            "#/tensor_parallel",
        ),
        (
            {"flops": 1e22, "hardware": "h100-sxm", "accelerators": 8, "sequence_parallel": "yes"},
            "#/sequence_parallel",
        ),
        (
            {"flops": 1e22, "hardware": "h100-sxm", "accelerators": 8, "sequence_parallel": 1},
            "#/sequence_parallel",
        ),
        ({"flops": 1e22, "sequence_parallel": False}, "#/hardware"),
        (
            {
                "flops": 1e22,
                "hardware": {"peak_flops": {"bf17": 1e15}, "memory_bytes": 1e9},
                "accelerators": 1,
            },
            "#/hardware/peak_flops/bf17",
        ),
        ({"flops": 1e22, "accelerators": 8}, "#/hardware"),
        ({"cost": "100.00", "currency": "USD", "hardware": "tpu-v4", "accelerators": 8}, "#/hardware"),
        ({"flops": 1e22, "unique_tokens": 0}, "#/unique_tokens"),
        ({"flops": 1e22, "unique_tokens": 5e-324}, "#/unique_tokens"),
        ({"flops": 1e35, "unique_tokens": 1, "law": "chinchilla-2022"}, "#/flops"),
        (
            {
                "flops": 1e22,
                "shape": {"layers": 2, "d_model": 10, "heads": 3, "sequence_length": 8},
                "hardware": "h100-sxm",
                "accelerators": 8,
            },
            "#/shape/heads",
        ),
    ],
)
def test_bad_allocation_requests_are_422_problems_pointing_at_the_field(client, catalog, body, pointer):
    assert pointer in pointers(allocate(client, **body))


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_json_numbers_are_refused(client, literal):
    response = client.post("/v1/allocations", data=f'{{"flops": {literal}}}', content_type="application/json")
    assert pointers(response) == ["#/flops"]


@pytest.mark.parametrize("dropout", [0, 1, "true", None])
def test_a_shapes_dropout_is_a_json_boolean_as_described(client, dropout):
    shape = {"d_model": 4096, "heads": 32, "layers": 32, "sequence_length": 4096, "dropout": dropout}
    body = {"params": 7e9, "tokens": 1e12, "hardware": "h100-sxm", "shape": shape}
    assert pointers(client.post("/v1/estimates", json=body)) == ["#/shape/dropout"]


def test_an_estimate_needs_tokens_hardware_and_then_params_or_a_shape(client):
    found = pointers(client.post("/v1/estimates", json={}))
    assert set(found) >= {"#/tokens", "#/hardware"}
    # Once the fields themselves are valid: params, or a shape to take them from.
    body = {"tokens": 1e12, "hardware": {"peak_flops": {"bf16": 1e15}, "memory_bytes": 80e9}}
    assert pointers(client.post("/v1/estimates", json=body)) == ["#/params"]


def test_the_published_laws_are_listed_with_their_sources_and_ranges(client):
    body = client.get("/v1/scaling-laws").get_json()
    assert [law["slug"] for law in body["items"]] == [
        "chinchilla-2022",
        "chinchilla-2022-rounded",
        "epoch-2024",
        "muennighoff-2023-c4",
        "sardana-2024",
        "krajewski-2024-g1",
        "krajewski-2024-g8",
        "krajewski-2024-g16",
    ]
    assert body["next_cursor"] is None
    dense = [law for law in body["items"] if law["moe"] is None]
    assert all("70B on 1.4T" in law["note"] for law in dense)  # each compared with Chinchilla
    epoch = client.get("/v1/scaling-laws/epoch-2024").get_json()
    assert epoch["fitted_range"]["max_params"] == 1.62e10
    assert "arXiv:2404.10102" in epoch["source"]


def test_each_listed_law_says_whether_it_counts_embeddings_and_which_mixture_of_experts_it_assumes(client):
    items = {law["slug"]: law for law in client.get("/v1/scaling-laws").get_json()["items"]}

    assert {slug: law["counts_embeddings"] for slug, law in items.items()} == {
        slug: not slug.startswith("krajewski") for slug in items
    }
    assert all(items[slug]["moe"] is None for slug in items if not slug.startswith("krajewski"))
    assert client.get("/v1/scaling-laws/krajewski-2024-g8").get_json()["moe"] == {
        "expansion_rate": 64,
        "granularity": 8,
        "experts": 512,
        "experts_per_token": 8,
        "total_to_active_params": 43.0,
    }
    g8 = items["krajewski-2024-g8"]
    assert (g8["E"], g8["B"], g8["alpha"], g8["beta"]) == (0.47, 30.8, 0.115, 0.147)
    assert g8["fitted_range"]["max_params"] == 3.7e9
    assert "arXiv:2402.07871" in g8["source"]


def test_an_unknown_law_is_404(client):
    assert_problem(client.get("/v1/scaling-laws/nope"), 404)
    assert_problem(client.get("/v1/scaling-laws/nope/isoflop?flops=1e21"), 404)


def test_the_isoflop_curve_is_centred_on_the_optimum(client):
    body = client.get("/v1/scaling-laws/chinchilla-2022/isoflop?flops=1e21&points=11").get_json()
    losses = [point["predicted_loss"] for point in body["points"]]
    assert len(losses) == 11
    assert min(losses) == body["optimal"]["predicted_loss"] == losses[5]


def test_the_frontier_spans_the_budgets_asked_for(client):
    body = client.get(
        "/v1/scaling-laws/epoch-2024/frontier?min_flops=1e18&max_flops=1e24&points=7"
    ).get_json()
    assert [point["flops"] for point in body["points"]] == pytest.approx([10.0**e for e in range(18, 25)])
    assert_problem(client.get("/v1/scaling-laws/epoch-2024/frontier?min_flops=1e24&max_flops=1e18"), 422)


def test_a_curve_that_leaves_the_sizes_the_engine_answers_for_is_a_422_problem(client):
    body = assert_problem(client.get("/v1/scaling-laws/chinchilla-2022/isoflop?flops=8.5e33&points=272"), 422)
    assert [error["parameter"] for error in body["errors"]] == ["flops"]


def test_an_estimate_with_a_law_predicts_the_loss_of_any_model(client, catalog):
    body = client.post(
        "/v1/estimates",
        json={
            "params": 70e9,
            "tokens": 1.4e12,
            "hardware": "a100-80gb",
            "accelerators": 1024,
            "law": "chinchilla-2022",
            "zero_stage": 3,
        },
    ).get_json()
    assert body["predicted_loss"] == pytest.approx(CHINCHILLA.loss(70e9, 1.4e12), rel=1e-12)
    assert "extrapolation" in [w["code"] for w in body["warnings"]]  # 70B is beyond the 16B fitted on

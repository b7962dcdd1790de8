"""/v1/plans over HTTP: stored and reproducible plans, their lifecycle through the budget ledger, retries
with an Idempotency-Key, history, comparison, revision, and who may do what."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from urllib.parse import urlencode

import pytest
from sqlalchemy import event, func, select, update

from service.core import accuracy
from service.core.laws import PUBLISHED_LAWS
from service.data.models import Budget, IdempotencyRecord, LedgerEntry, Plan
from service.services.catalog import load_builtin_hardware
from service.services.idempotency import fingerprint
from service.services.plans import evaluate, reevaluate
from tests.builders import gpu_body
from tests.conftest import bearer
from tests.problems import assert_problem

OMIT = object()
START = "2027-01-04T00:00:00Z"
INLINE_LAW = {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
INLINE_HARDWARE = {
    "name": "rented",
    "peak_flops": {"bf16": 1e15},
    "memory_bytes": 80e9,
    "price_per_hour": "1.25",
    "currency": "USD",
}
UNPRICED_HARDWARE = {k: v for k, v in INLINE_HARDWARE.items() if k not in {"price_per_hour", "currency"}}


def add_gpu(client, slug: str, price: str = "2.50", currency: str = "USD") -> dict:
    response = client.post("/v1/hardware", json=gpu_body(slug, price, currency))
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def change_price(client, slug: str, price: str) -> None:
    """A new price in USD for a custom profile, in force from now."""
    etag = client.get(f"/v1/hardware/{slug}").headers["ETag"]
    changed = client.patch(
        f"/v1/hardware/{slug}",
        json={"price_per_hour": price, "currency": "USD", "price_as_of": "2026-12"},
        headers={"If-Match": etag},
    )
    assert changed.status_code == 200, changed.get_json()


@pytest.fixture
def world(client):
    """Organisations acme and globex and a custom profile, lab-gpu: 1e15 bf16 FLOP/s at 2.50 USD an hour."""
    for slug in ("acme", "globex"):
        assert client.post("/v1/organizations", json={"slug": slug, "name": slug.title()}).status_code == 201
    add_gpu(client, "lab-gpu")


@pytest.fixture
def catalog(session):
    load_builtin_hardware(session)


def plan_body(**overrides) -> dict:
    """A model already chosen: 6·1e9·6e10 = 3.6e20 FLOPs at half of 10 x 1e15 FLOP/s take 72 000 s, that is
    200 accelerator-hours, 500.00 USD on lab-gpu. The cost scales with `tokens`."""
    body = {
        "organization": "acme",
        "params": 1e9,
        "tokens": 6e10,
        "hardware": "lab-gpu",
        "accelerators": 10,
        "mfu": 0.5,
        "start_at": START,
        **overrides,
    }
    return {name: value for name, value in body.items() if value is not OMIT}


def allocation_body(**overrides) -> dict:
    """A plan that allocates a budget rather than naming its model."""
    return plan_body(params=OMIT, tokens=OMIT, **overrides)


def post_plan(client, body: dict, key: str | None = None, **headers):
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return client.post("/v1/plans", json=body, headers=headers)


def create_plan(client, key: str | None = None, **overrides) -> dict:
    response = post_plan(client, plan_body(**overrides), key)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def transition(client, plan_id: str, action: str, key: str | None = None, **headers):
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return client.post(f"/v1/plans/{plan_id}/{action}", headers=headers)


def revise(client, plan_id: str, changes: dict, key: str | None = None, **headers):
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return client.post(f"/v1/plans/{plan_id}/revise", json=changes, headers=headers)


def make_budget(client, **overrides) -> dict:
    body = {
        "organization": "acme",
        "name": "Q1 pretraining",
        "amount": "1000.00",
        "currency": "USD",
        "period_start": "2027-01-01T00:00:00Z",
        "period_end": "2027-04-01T00:00:00Z",
        **overrides,
    }
    response = client.post("/v1/budgets", json=body)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def idempotency(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def key_id(key: str) -> str:
    return key.split("_")[1]


def admin_key_id(client) -> str:
    return key_id(client.environ_base["HTTP_AUTHORIZATION"].removeprefix("Bearer "))


def stored_plan(session, plan_id: str) -> Plan:
    """The plan as the database now holds it."""
    session.expire_all()
    return session.get(Plan, uuid.UUID(plan_id))


def stored_budget(session, budget_id: str) -> Budget:
    session.expire_all()
    return session.get(Budget, uuid.UUID(budget_id))


def ledger(session, budget_id: str | None = None) -> list[LedgerEntry]:
    session.expire_all()
    stmt = select(LedgerEntry).order_by(LedgerEntry.created_at)
    if budget_id is not None:
        stmt = stmt.where(LedgerEntry.budget_id == uuid.UUID(budget_id))
    return list(session.scalars(stmt))


def count(session, model) -> int:
    session.expire_all()
    return session.scalar(select(func.count()).select_from(model))


def pointers(response) -> list[str]:
    return [error["pointer"] for error in assert_problem(response, 422)["errors"]]


def listed(client, query: str = "", key: str | None = None) -> list[str]:
    headers = {} if key is None else bearer(key)
    response = client.get(f"/v1/plans?limit=100&{query}", headers=headers)
    assert response.status_code == 200, response.get_json()
    return [item["id"] for item in response.get_json()["items"]]


# --- Creating -----------------------------------------------------------------------------------------------


def test_a_plan_for_a_chosen_model_is_stored_as_a_draft_with_its_exact_cost(client, session, world):
    response = post_plan(client, plan_body(name="1B on 60B", labels={"team": "alpha"}))

    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert response.headers["Location"] == f"/v1/plans/{body['id']}"
    assert response.headers["ETag"] == '"1"'
    assert (body["organization"], body["status"], body["method"], body["hardware"]) == (
        "acme",
        "draft",
        "fixed",
        "lab-gpu",
    )
    assert (body["name"], body["labels"], body["budget_id"], body["parent_id"]) == (
        "1B on 60B",
        {"team": "alpha"},
        None,
        None,
    )
    assert (body["params"], body["tokens"], body["flops"]) == (1e9, 6e10, 3.6e20)
    assert (body["accelerators"], body["accelerator_hours"], body["cost"], body["currency"]) == (
        10,
        200.0,
        "500.00",
        "USD",
    )
    assert body["days"] == pytest.approx(20 / 24, rel=1e-12)
    assert (body["start_at"], body["end_at"]) == ("2027-01-04T00:00:00+00:00", "2027-01-04T20:00:00+00:00")
    assert body["created_by"] == admin_key_id(client)
    assert body["inputs"] == {
        "params": 1e9,
        "tokens": 6e10,
        "hardware": "lab-gpu",
        "accelerators": 10,
        "mfu": 0.5,
    }

    row = stored_plan(session, body["id"])
    assert (row.status, row.cost, row.currency, row.flops, row.accelerator_hours) == (
        "draft",
        Decimal("500.00"),
        "USD",
        3.6e20,
        200.0,
    )
    assert (row.inputs, row.snapshot, row.result) == (body["inputs"], body["snapshot"], body["result"])


def test_the_snapshot_holds_the_hardware_figures_the_price_in_force_and_the_engine_version(client, world):
    body = create_plan(client)
    profile = client.get("/v1/hardware/lab-gpu").get_json()

    snapshot = body["snapshot"]
    hardware = snapshot["hardware"]
    assert (hardware["slug"], hardware["name"], hardware["currency"]) == ("lab-gpu", "Lab Gpu", "USD")
    assert hardware["peak_flops"] == {"bf16": 1e15}
    assert hardware["memory_bytes"] == 80e9
    assert hardware["price_per_hour"] == profile["price_per_hour"] == "2.50"
    assert hardware["price_effective_at"] == profile["price_effective_at"]
    assert snapshot["law"] is None
    assert snapshot["engine_version"] == body["result"]["engine_version"]
    assert snapshot["engine_version"]


CLUSTER_FIGURES = (
    "accelerators_per_node",
    "scale_up_bandwidth_bytes_per_second",
    "scale_out_bandwidth_bytes_per_second",
    "failures_per_accelerator_hour",
)


def test_the_snapshot_holds_how_the_hardware_is_installed_and_reevaluation_reproduces(
    client, session, world, catalog
):
    body = create_plan(client, hardware="h100-sxm")

    hardware = body["snapshot"]["hardware"]
    assert [hardware[name] for name in CLUSTER_FIGURES] == [8, 450e9, 50e9, 1.97e-5]
    assert reevaluate(stored_plan(session, body["id"])) == body["result"]
    # A plan stored before the snapshot held these figures reads as hardware that does not give them.
    older = {**body["snapshot"], "hardware": {k: v for k, v in hardware.items() if k not in CLUSTER_FIGURES}}
    assert evaluate(body["inputs"], older) == body["result"]


def test_the_snapshot_of_hardware_without_cluster_figures_holds_nulls(client, world):
    hardware = create_plan(client)["snapshot"]["hardware"]

    assert [hardware[name] for name in CLUSTER_FIGURES] == [None] * 4


def test_inline_hardware_keeps_its_cluster_figures_in_the_plans_inputs(client, session, world):
    inline = {
        "name": "ours",
        "peak_flops": {"bf16": 1e15},
        "memory_bytes": 80e9,
        "price_per_hour": "2.50",
        "currency": "USD",
        "accelerators_per_node": 16,
        "scale_up_bandwidth_bytes_per_second": 900e9,
    }

    body = create_plan(client, hardware=inline)

    assert body["inputs"]["hardware"] == inline
    snapshot = body["snapshot"]["hardware"]
    assert [snapshot[name] for name in CLUSTER_FIGURES] == [16, 900e9, None, None]
    assert reevaluate(stored_plan(session, body["id"])) == body["result"]


def test_the_snapshot_holds_the_coefficients_of_the_law_used(client, world):
    body = create_plan(client, params=OMIT, tokens=OMIT, flops=1e21, law="chinchilla-2022")

    law = PUBLISHED_LAWS["chinchilla-2022"].law
    stored = body["snapshot"]["law"]
    assert stored["slug"] == "chinchilla-2022"
    assert (stored["E"], stored["A"], stored["B"], stored["alpha"], stored["beta"]) == (
        law.E,
        law.A,
        law.B,
        law.alpha,
        law.beta,
    )
    assert body["method"] == "compute-optimal"
    assert body["predicted_loss"] == pytest.approx(law.frontier_loss(1e21), rel=1e-12)


@pytest.mark.parametrize(
    ("budget", "method"),
    [
        ({"flops": 3.6e20}, "fixed-ratio"),
        ({"pf_days": 3.6e20 / 8.64e19}, "fixed-ratio"),
        ({"cost": "500.00", "currency": "USD"}, "fixed-ratio"),
        ({"flops": 1e21, "law": "epoch-2024"}, "compute-optimal"),
        ({"target_loss": 2.5, "law": "chinchilla-2022"}, "compute-optimal"),
    ],
)
def test_a_plan_allocates_a_budget_and_its_top_level_figures_are_the_results(client, world, budget, method):
    body = create_plan(client, params=OMIT, tokens=OMIT, **budget)

    result = body["result"]
    estimate = result["estimate"]
    assert body["method"] == result["method"] == method
    assert (body["params"], body["tokens"], body["flops"], body["predicted_loss"]) == (
        result["params"],
        result["tokens"],
        result["flops"],
        result["predicted_loss"],
    )
    assert (
        body["accelerators"],
        body["days"],
        body["accelerator_hours"],
        body["cost"],
        body["currency"],
    ) == (
        estimate["accelerators"],
        estimate["days"],
        estimate["accelerator_hours"],
        estimate["cost"],
        estimate["currency"],
    )
    assert body["inputs"] == {
        "hardware": "lab-gpu",
        "accelerators": 10,
        "mfu": 0.5,
        **budget,
    }
    end = datetime.fromisoformat(body["end_at"]) - datetime.fromisoformat(body["start_at"])
    assert end.total_seconds() == pytest.approx(estimate["seconds"], abs=1e-3)


def test_a_money_budget_of_500_buys_200_hours_at_2_50(client, world):
    body = create_plan(client, params=OMIT, tokens=OMIT, cost="500.00", currency="USD")
    assert (body["cost"], body["accelerator_hours"]) == ("500.00", pytest.approx(200, rel=1e-12))
    assert body["flops"] == pytest.approx(3.6e20, rel=1e-12)


def test_a_run_that_would_end_after_the_year_9998_is_a_422(client, session, world):
    assert pointers(post_plan(client, plan_body(start_at="9999-12-31T23:00:00Z"))) == ["#/start_at"]
    long_run = post_plan(client, plan_body(params=1e12, tokens=1e14, accelerators=1, start_at=OMIT))
    assert pointers(long_run) == ["#/accelerators"]
    assert count(session, Plan) == 0


def test_a_plan_starts_now_unless_told_otherwise(client, world):
    before = datetime.now().astimezone()
    body = create_plan(client, start_at=OMIT)
    start = datetime.fromisoformat(body["start_at"])
    assert before - timedelta(seconds=1) <= start <= datetime.now().astimezone() + timedelta(seconds=1)
    assert datetime.fromisoformat(body["end_at"]) - start == timedelta(hours=20)


def test_remaining_makes_the_budgets_remaining_amount_the_money_budget(client, session, world):
    budget = make_budget(client, amount="1250.00")
    first = create_plan(client, budget_id=budget["id"])
    assert transition(client, first["id"], "commit").status_code == 200

    body = create_plan(client, params=OMIT, tokens=OMIT, budget="remaining", budget_id=budget["id"])

    assert body["budget_id"] == budget["id"]
    assert (body["inputs"]["cost"], body["inputs"]["currency"]) == ("750.00", "USD")
    assert "budget" not in body["inputs"]
    assert body["cost"] == "750.00"
    assert body["accelerator_hours"] == pytest.approx(300, rel=1e-12)
    assert reevaluate(stored_plan(session, body["id"])) == body["result"]


def test_remaining_keeps_the_run_within_the_budgets_period_so_it_can_be_committed(client, world):
    # 10 000.00 on lab-gpu at 2.50 an hour buys 4 000 hours: 400 hours (16.7 days) on 10 accelerators,
    # but the budget's period ends two days after the plan's start.
    budget = make_budget(client, amount="10000.00", period_end="2027-01-06T00:00:00Z")

    body = create_plan(client, params=OMIT, tokens=OMIT, budget="remaining", budget_id=budget["id"])

    assert body["end_at"] <= "2027-01-06T00:00:00+00:00"
    assert [limit["kind"] for limit in body["result"]["limits"] if limit["binding"]] == ["days"]
    assert transition(client, body["id"], "commit").status_code == 200


def test_remaining_of_a_budget_whose_period_ends_before_the_start_is_a_conflict(client, world):
    budget = make_budget(client, period_end="2027-01-03T00:00:00Z")  # the plan starts on 2027-01-04

    response = post_plan(client, allocation_body(budget="remaining", budget_id=budget["id"]))

    problem = assert_problem(response, 409)
    assert (problem["field"], problem["limit"]) == ("start_at", "period")


def test_remaining_of_a_budget_in_another_currency_than_the_price_is_a_422_at_the_budget(
    client, session, world
):
    budget = make_budget(client, currency="EUR")
    response = post_plan(client, allocation_body(budget="remaining", budget_id=budget["id"]))
    assert pointers(response) == ["#/budget_id"]
    assert count(session, Plan) == 0


def test_remaining_of_a_budget_with_nothing_left_is_a_conflict(client, session, world):
    budget = make_budget(client, amount="500.00")
    assert transition(client, create_plan(client, budget_id=budget["id"])["id"], "commit").status_code == 200

    response = post_plan(client, allocation_body(budget="remaining", budget_id=budget["id"]))

    assert assert_problem(response, 409)["limit"] == "amount"
    assert count(session, Plan) == 1


@pytest.mark.parametrize(
    ("overrides", "pointer"),
    [
        ({"hardware": "euro-gpu"}, "#/budget_id"),
        ({"price_per_hour": "3.00", "currency": "EUR"}, "#/budget_id"),
        ({"hardware": UNPRICED_HARDWARE}, "#/hardware"),
        ({"hardware": {**INLINE_HARDWARE, "currency": "GBP"}}, "#/budget_id"),
    ],
)
def test_a_plan_charged_to_a_budget_needs_a_price_in_the_budgets_currency(
    client, session, world, overrides, pointer
):
    add_gpu(client, "euro-gpu", price="2.00", currency="EUR")
    budget = make_budget(client)

    response = post_plan(client, plan_body(budget_id=budget["id"], **overrides))

    assert pointer in pointers(response)
    assert count(session, Plan) == 0


@pytest.mark.parametrize(
    ("overrides", "pointer"),
    [
        ({"organization": OMIT}, "#/organization"),
        ({"organization": "nobody"}, "#/organization"),
        ({"hardware": OMIT}, "#/hardware"),
        ({"hardware": "no-such-gpu"}, "#/hardware"),
        ({"accelerators": OMIT}, "#/accelerators"),
        ({"tokens": OMIT}, "#/tokens"),
        ({"params": OMIT}, "#/params"),
        ({"flops": 1e21}, "#/flops"),
        ({"budget_id": "not-a-uuid"}, "#/budget_id"),
        ({"budget_id": str(uuid.uuid4())}, "#/budget_id"),
        ({"budget": "remaining"}, "#/budget_id"),
        ({"budget": "all"}, "#/budget"),
        ({"budget": "remaining", "budget_id": str(uuid.uuid4())}, "#/budget"),
        ({"labels": {"Bad Key": "x"}}, "#/labels/Bad Key/key"),
        ({"name": ""}, "#/name"),
        ({"start_at": "2027-01-04"}, "#/start_at"),
        ({"colour": "blue"}, "#/colour"),
    ],
)
def test_bad_plans_are_422_problems_pointing_at_the_field(client, session, world, overrides, pointer):
    assert pointer in pointers(post_plan(client, plan_body(**overrides)))
    assert count(session, Plan) == 0


def test_an_unknown_plan_is_404(client, world):
    assert_problem(client.get(f"/v1/plans/{uuid.uuid4()}"), 404)
    assert_problem(client.get("/v1/plans/not-a-uuid"), 404)
    for action in ("commit", "cancel"):
        assert_problem(transition(client, str(uuid.uuid4()), action), 404)
    assert_problem(revise(client, str(uuid.uuid4()), {"accelerators": 20}), 404)


def test_a_plan_is_read_back_as_created_with_its_etag(client, world):
    created = create_plan(client)
    response = client.get(f"/v1/plans/{created['id']}")
    assert response.status_code == 200
    assert response.get_json() == created
    assert response.headers["ETag"] == '"1"'
    assert client.get(f"/v1/plans/{created['id']}", headers={"If-None-Match": '"1"'}).status_code == 304


# --- Reproducibility ----------------------------------------------------------------------------------------


REPRODUCED = {
    "fixed-ratio": {"flops": 3.6e20},
    "fixed-ratio-pf-days": {"pf_days": 1234.5, "tokens_per_param": 30},
    "compute-optimal-by-slug": {"flops": 1e22, "law": "chinchilla-2022"},
    "compute-optimal-inline-law": {"flops": 1e22, "law": INLINE_LAW},
    "target-loss": {"target_loss": 2.3, "law": "epoch-2024"},
    "data-constrained": {"flops": 6 * 8.67e9 * 178e9, "unique_tokens": 25e9},
    "inference-aware": {"target_loss": 1.9582533604758408, "inference_tokens": 1e13, "law": "sardana-2024"},
    "inference-aware-budget": {"flops": 1e21, "inference_tokens": 1e12, "law": "sardana-2024"},
    "inference-served-on-a-profile": {
        "flops": 1e21,
        "inference_tokens": 1e12,
        "inference_hardware": "lab-gpu",
        "inference_batch": 16,
    },
    "inference-served-inline": {
        "target_loss": 2.3,
        "inference_tokens": 1e12,
        "inference_hardware": {
            **INLINE_HARDWARE,
            "memory_bandwidth_bytes_per_second": 1e12,
            "currency": "EUR",
        },
    },
    "money": {"cost": "12345.67", "currency": "USD"},
    "price-override": {"accelerator_hours": 777.7, "price_per_hour": "3.33", "currency": "USD"},
    "deadline": {"days": 3.5, "law": "epoch-2024", "precision": "bf16", "zero_stage": 3},
    "fixed": {"params": 6.7e9, "tokens": 1.3e11, "law": "epoch-2024"},
    "inline-hardware": {"params": 6.7e9, "tokens": 1e12, "hardware": INLINE_HARDWARE, "accelerators": 440},
    "shape": {
        "params": 7e9,
        "tokens": 1e12,
        "accelerators": 64,
        "shape": {"layers": 32, "d_model": 4096, "heads": 32, "sequence_length": 4096, "micro_batch": 2},
        "recomputation": "selective",
        "zero_stage": 1,
        "tensor_parallel": 2,
    },
    "moe-law": {"flops": 1e21, "law": "krajewski-2024-g8"},
    "moe-shape-on-the-cluster-model": {
        "params": 1.16e9,
        "tokens": 2e10,
        "accelerators": 16,
        "mfu": OMIT,
        "shape": {
            "layers": 8,
            "d_model": 1024,
            "heads": 8,
            "sequence_length": 2048,
            "vocabulary": 32_000,
            "experts": 32,
            "experts_per_token": 4,
            "shared_experts": 1,
            "expert_ffn": 512,
            "kv_lora_rank": 256,
        },
    },
    "shape-without-sequence-parallelism": {
        "params": 7e9,
        "tokens": 1e12,
        "accelerators": 64,
        "shape": {"layers": 32, "d_model": 4096, "heads": 32, "sequence_length": 4096, "micro_batch": 2},
        "recomputation": "selective",
        "tensor_parallel": 8,
        "sequence_parallel": False,
    },
}


@pytest.mark.parametrize("request_", REPRODUCED.values(), ids=REPRODUCED.keys())
def test_reevaluating_a_stored_plan_gives_exactly_its_result(client, session, world, request_):
    body = create_plan(client, **{"params": OMIT, "tokens": OMIT, "mfu": 0.37, **request_})

    row = stored_plan(session, body["id"])
    assert row.result == body["result"]
    assert reevaluate(row) == row.result
    assert evaluate(body["inputs"], body["snapshot"]) == body["result"]


def test_a_price_change_leaves_stored_plans_and_their_reevaluation_unchanged(client, session, world):
    before = create_plan(client)
    change_price(client, "lab-gpu", "3.75")

    assert client.get(f"/v1/plans/{before['id']}").get_json() == before
    row = stored_plan(session, before["id"])
    assert reevaluate(row) == row.result == before["result"]
    assert row.result["estimate"]["cost"] == "500.00"
    after = create_plan(client)
    assert (after["cost"], after["snapshot"]["hardware"]["price_per_hour"]) == ("750.00", "3.75")
    assert (
        after["snapshot"]["hardware"]["price_effective_at"]
        > before["snapshot"]["hardware"]["price_effective_at"]
    )


def test_a_price_change_of_the_serving_hardware_leaves_stored_plans_and_their_reevaluation_unchanged(
    client, session, world
):
    add_gpu(client, "serving-gpu", price="1.00")
    inference = {"inference_tokens": 1e12, "inference_hardware": "serving-gpu"}
    before = create_plan(client, params=OMIT, tokens=OMIT, flops=1e21, **inference)
    change_price(client, "serving-gpu", "2.00")

    row = stored_plan(session, before["id"])
    assert reevaluate(row) == row.result == before["result"]
    assert before["snapshot"]["inference_hardware"]["price_per_hour"] == "1.00"
    after = create_plan(client, params=OMIT, tokens=OMIT, flops=1e21, **inference)
    served_before, served_after = (
        before["result"]["inference"]["serving"],
        after["result"]["inference"]["serving"],
    )
    assert Decimal(served_after["cost"]) == pytest.approx(
        2 * Decimal(served_before["cost"]), abs=Decimal("0.01")
    )
    assert after["snapshot"]["inference_hardware"]["price_per_hour"] == "2.00"


def test_reevaluation_takes_the_law_from_the_snapshot(client, session, world):
    body = create_plan(client, params=OMIT, tokens=OMIT, flops=1e22, law=INLINE_LAW)
    snapshot = {**body["snapshot"], "law": {**body["snapshot"]["law"], "E": 1.0}}
    row = stored_plan(session, body["id"])

    assert reevaluate(row) == body["result"]
    assert evaluate(body["inputs"], snapshot)["predicted_loss"] != body["result"]["predicted_loss"]


# --- Lifecycle ----------------------------------------------------------------------------------------------


def test_committing_reserves_the_cost_and_writes_a_ledger_row(client, session, world):
    budget = make_budget(client, max_flops=1e21, max_accelerator_hours=1000)
    plan = create_plan(client, budget_id=budget["id"])

    response = transition(client, plan["id"], "commit", **{"X-Request-ID": "commit-1"})

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert (body["status"], response.headers["ETag"]) == ("committed", '"2"')
    assert body["committed_at"] is not None
    assert body["cancelled_at"] is None
    assert {k: v for k, v in body.items() if k not in {"status", "committed_at"}} == {
        k: v for k, v in plan.items() if k not in {"status", "committed_at"}
    }
    read = client.get(f"/v1/budgets/{budget['id']}")
    assert (read.get_json()["committed"], read.get_json()["remaining"]) == ("500.00", "500.00")
    assert read.headers["ETag"] == '"2"'
    row = stored_budget(session, budget["id"])
    assert (row.committed, row.committed_flops, row.committed_accelerator_hours) == (
        Decimal("500.00"),
        3.6e20,
        200.0,
    )
    [entry] = ledger(session, budget["id"])
    assert (entry.entry, entry.amount, entry.currency, entry.flops, entry.accelerator_hours) == (
        "commit",
        Decimal("500.00"),
        "USD",
        3.6e20,
        200.0,
    )
    assert (str(entry.plan_id), entry.actor, entry.request_id) == (
        plan["id"],
        admin_key_id(client),
        "commit-1",
    )
    assert stored_plan(session, plan["id"]).status == "committed"


def test_the_ledger_endpoint_lists_commits_and_releases_newest_first(client, world):
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])
    transition(client, plan["id"], "commit")
    transition(client, plan["id"], "cancel")

    response = client.get(f"/v1/budgets/{budget['id']}/ledger")

    assert response.status_code == 200
    items = response.get_json()["items"]
    assert [(i["entry"], i["amount"], i["plan_id"]) for i in items] == [
        ("release", "-500.00", plan["id"]),
        ("commit", "500.00", plan["id"]),
    ]
    assert [i["flops"] for i in items] == [-3.6e20, 3.6e20]
    assert_problem(client.get(f"/v1/budgets/{uuid.uuid4()}/ledger"), 404)


def test_cancelling_a_committed_plan_releases_it_and_the_ledger_balances(client, session, world):
    budget = make_budget(client)
    kept = create_plan(client, budget_id=budget["id"], tokens=3e10)
    dropped = create_plan(client, budget_id=budget["id"])
    for plan in (kept, dropped):
        assert transition(client, plan["id"], "commit").status_code == 200
    assert client.get(f"/v1/budgets/{budget['id']}").get_json()["committed"] == "750.00"

    response = transition(client, dropped["id"], "cancel", **{"X-Request-ID": "cancel-1"})

    assert response.status_code == 200, response.get_json()
    assert response.get_json()["status"] == "cancelled"
    assert response.get_json()["cancelled_at"] is not None
    assert response.headers["ETag"] == '"3"'
    read = client.get(f"/v1/budgets/{budget['id']}").get_json()
    assert (read["committed"], read["remaining"]) == ("250.00", "750.00")
    entries = ledger(session, budget["id"])
    assert [(e.entry, e.amount) for e in entries] == [
        ("commit", Decimal("250.00")),
        ("commit", Decimal("500.00")),
        ("release", Decimal("-500.00")),
    ]
    assert (str(entries[-1].plan_id), entries[-1].request_id) == (dropped["id"], "cancel-1")
    row = stored_budget(session, budget["id"])
    assert sum(e.amount for e in entries) == row.committed
    assert sum(e.flops for e in entries) == row.committed_flops == 1.8e20
    assert sum(e.accelerator_hours for e in entries) == row.committed_accelerator_hours == 100.0


def test_when_every_plan_is_released_the_committed_flops_and_hours_are_exactly_zero(client, world):
    budget = make_budget(client, amount="100000.00")
    plans = [create_plan(client, budget_id=budget["id"], tokens=tokens) for tokens in (2e10, 4.0001e10, 6e10)]
    for plan in plans:
        assert transition(client, plan["id"], "commit").status_code == 200
    for plan in plans:
        assert transition(client, plan["id"], "cancel").status_code == 200
    read = client.get(f"/v1/budgets/{budget['id']}").get_json()
    assert (read["committed"], read["committed_flops"], read["committed_accelerator_hours"]) == ("0.00", 0, 0)


def test_a_cap_admits_plans_whose_hours_add_up_to_it_but_for_float_rounding(client, world):
    first = create_plan(client, tokens=5.9e10)
    hours = first["accelerator_hours"]
    count, total = 0, 0.0
    while total <= count * hours:  # the first count at which adding up overshoots count x hours
        count, total = count + 1, total + hours
    assert count < 50
    budget = make_budget(client, amount="100000.00", max_accelerator_hours=count * hours)
    plans = [create_plan(client, budget_id=budget["id"], tokens=5.9e10) for _ in range(count)]
    for plan in plans:
        assert transition(client, plan["id"], "commit").status_code == 200
    one_more = create_plan(client, budget_id=budget["id"], tokens=5.9e10)
    refused = transition(client, one_more["id"], "commit")
    assert assert_problem(refused, 409)["limit"] == "max_accelerator_hours"


def test_remaining_is_taken_down_to_the_cent_so_the_plan_fits_its_budget(client, world):
    budget = make_budget(client, amount="1000.005")
    plan = post_plan(client, allocation_body(budget_id=budget["id"], budget="remaining"))
    assert plan.status_code == 201, plan.get_json()
    assert plan.get_json()["cost"] == "1000.00"
    assert transition(client, plan.get_json()["id"], "commit").status_code == 200


def test_cancelling_a_draft_writes_no_ledger_row(client, session, world):
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])

    response = transition(client, plan["id"], "cancel")

    assert response.status_code == 200
    assert response.get_json()["status"] == "cancelled"
    assert ledger(session) == []
    assert client.get(f"/v1/budgets/{budget['id']}").headers["ETag"] == '"1"'
    assert stored_budget(session, budget["id"]).committed == 0


@pytest.mark.parametrize(
    ("steps", "refused", "status"),
    [
        (["commit"], "commit", "committed"),
        (["cancel"], "cancel", "cancelled"),
        (["commit", "cancel"], "cancel", "cancelled"),
        (["cancel"], "commit", "cancelled"),
        (["commit", "cancel"], "commit", "cancelled"),
    ],
)
def test_a_transition_from_the_wrong_status_is_a_conflict(client, session, world, steps, refused, status):
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])
    for step in steps:
        assert transition(client, plan["id"], step).status_code == 200
    entries = len(ledger(session))

    assert_problem(transition(client, plan["id"], refused), 409)

    assert stored_plan(session, plan["id"]).status == status
    assert len(ledger(session)) == entries


def test_a_plan_without_a_budget_cannot_be_committed(client, session, world):
    plan = create_plan(client)
    assert assert_problem(transition(client, plan["id"], "commit"), 409)["limit"] == "budget"
    assert stored_plan(session, plan["id"]).status == "draft"


def test_a_plan_without_a_budget_can_be_cancelled(client, world):
    response = transition(client, create_plan(client)["id"], "cancel")
    assert (response.status_code, response.get_json()["status"]) == (200, "cancelled")


@pytest.mark.parametrize(
    ("budget", "plan", "limit"),
    [
        ({"amount": "499.99"}, {}, "amount"),
        ({"max_flops": 3.5e20}, {}, "max_flops"),
        ({"max_accelerator_hours": 199.5}, {}, "max_accelerator_hours"),
        ({"allowed_hardware": ["other-gpu"]}, {}, "hardware"),
        ({"allowed_hardware": ["lab-gpu"]}, {"hardware": INLINE_HARDWARE}, "hardware"),
        ({}, {"start_at": "2026-12-31T23:00:00Z"}, "period"),
        ({}, {"start_at": "2027-03-31T05:00:00Z"}, "period"),
    ],
)
def test_a_commit_that_breaks_a_limit_is_refused_and_changes_nothing(
    client, session, world, budget, plan, limit
):
    add_gpu(client, "other-gpu")
    created = make_budget(client, **budget)
    draft = create_plan(client, budget_id=created["id"], **plan)

    body = assert_problem(transition(client, draft["id"], "commit"), 409)

    assert body["limit"] == limit
    read = client.get(f"/v1/plans/{draft['id']}")
    assert (read.get_json()["status"], read.headers["ETag"]) == ("draft", '"1"')
    assert read.get_json()["committed_at"] is None
    assert ledger(session) == []
    after = client.get(f"/v1/budgets/{created['id']}")
    assert after.get_json() == created
    assert after.headers["ETag"] == '"1"'
    row = stored_budget(session, created["id"])
    assert (row.committed, row.committed_flops, row.committed_accelerator_hours) == (0, 0, 0)


def test_a_commit_after_the_budgets_currency_changed_is_refused(client, session, world):
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])
    etag = client.get(f"/v1/budgets/{budget['id']}").headers["ETag"]
    assert (
        client.patch(
            f"/v1/budgets/{budget['id']}", json={"currency": "EUR"}, headers={"If-Match": etag}
        ).status_code
        == 200
    )

    assert assert_problem(transition(client, plan["id"], "commit"), 409)["limit"] == "currency"
    assert (stored_plan(session, plan["id"]).status, ledger(session)) == ("draft", [])


def test_a_commit_that_spends_exactly_the_rest_is_admitted(client, world):
    budget = make_budget(client, amount="500.00", max_flops=3.6e20, max_accelerator_hours=200)
    plan = create_plan(client, budget_id=budget["id"], start_at="2027-03-31T04:00:00Z")
    assert transition(client, plan["id"], "commit").status_code == 200
    assert client.get(f"/v1/budgets/{budget['id']}").get_json()["remaining"] == "0.00"


def test_the_amount_refusal_says_what_was_asked_and_what_remains(client, world):
    budget = make_budget(client, amount="700.00")
    first = create_plan(client, budget_id=budget["id"])
    second = create_plan(client, budget_id=budget["id"])
    assert transition(client, first["id"], "commit").status_code == 200

    body = assert_problem(transition(client, second["id"], "commit"), 409)

    assert (body["limit"], Decimal(body["requested"]), Decimal(body["remaining"])) == (
        "amount",
        Decimal("500.00"),
        Decimal("200.00"),
    )


def test_a_hardware_restriction_admits_the_hardware_it_names(client, world):
    budget = make_budget(client, allowed_hardware=["lab-gpu"])
    plan = create_plan(client, budget_id=budget["id"])
    assert transition(client, plan["id"], "commit").status_code == 200


# --- Idempotency-Key ----------------------------------------------------------------------------------------


def test_a_retried_create_replays_the_first_response_and_creates_nothing(client, session, world):
    first = post_plan(client, plan_body(), **idempotency("create-1"))
    retry = post_plan(client, plan_body(), **idempotency("create-1"))

    assert first.status_code == retry.status_code == 201
    assert "Idempotent-Replayed" not in first.headers
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.get_data() == first.get_data()
    assert (retry.headers["Location"], retry.headers["ETag"]) == (first.headers["Location"], '"1"')
    assert retry.headers["Content-Type"] == "application/json"
    assert count(session, Plan) == 1
    assert count(session, IdempotencyRecord) == 1


def test_a_retry_is_recognised_whatever_the_order_and_spacing_of_its_members(client, session, world):
    body = plan_body()
    first = post_plan(client, body, **idempotency("create-1"))
    reordered = dict(reversed(body.items()))
    retry = client.post(
        "/v1/plans",
        data=json.dumps(reordered, indent=4),
        content_type="application/json",
        headers=idempotency("create-1"),
    )
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.get_data() == first.get_data()
    assert count(session, Plan) == 1


def test_a_quoted_key_is_the_same_key(client, session, world):
    first = post_plan(client, plan_body(), **idempotency("abc-1"))
    retry = post_plan(client, plan_body(), **idempotency('"abc-1"'))
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.get_data() == first.get_data()


def test_the_same_key_with_another_body_or_path_is_a_422(client, session, world):
    created = post_plan(client, plan_body(), **idempotency("create-1"))
    assert created.status_code == 201

    assert_problem(post_plan(client, plan_body(accelerators=20), **idempotency("create-1")), 422)
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])
    assert_problem(transition(client, plan["id"], "cancel", **idempotency("create-1")), 422)

    assert count(session, Plan) == 2
    assert stored_plan(session, plan["id"]).status == "draft"
    assert count(session, IdempotencyRecord) == 1


def test_keys_belong_to_the_caller(client, session, world, issue_key):
    alice, bob, carol = (issue_key("planner", "acme") for _ in range(3))

    first = post_plan(client, plan_body(), alice, **idempotency("shared"))
    same_body = post_plan(client, plan_body(), bob, **idempotency("shared"))
    other_body = post_plan(client, plan_body(accelerators=20), carol, **idempotency("shared"))

    assert (first.status_code, same_body.status_code, other_body.status_code) == (201, 201, 201)
    assert "Idempotent-Replayed" not in same_body.headers
    assert len({first.get_json()["id"], same_body.get_json()["id"], other_body.get_json()["id"]}) == 3
    assert {r.principal for r in session.scalars(select(IdempotencyRecord))} == {
        key_id(alice),
        key_id(bob),
        key_id(carol),
    }


@pytest.mark.parametrize(
    "key",
    ["", "a b", "x" * 256, '"' + "x" * 256 + '"', "cl\u00e9", "tab\there", "\u00a0nbsp"],
    ids=["empty", "space", "256-chars", "256-quoted", "non-ascii", "tab", "nbsp"],
)
def test_a_malformed_key_is_a_400_naming_the_header(client, session, world, key):
    response = post_plan(client, plan_body(), **idempotency(key))

    body = assert_problem(response, 400)
    assert body["errors"][0]["header"] == "Idempotency-Key"
    assert count(session, Plan) == 0
    assert count(session, IdempotencyRecord) == 0


@pytest.mark.parametrize("action", ["commit", "cancel"])
def test_a_malformed_key_on_a_transition_is_a_400_and_moves_nothing(client, session, world, action):
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])
    body = assert_problem(transition(client, plan["id"], action, **idempotency("")), 400)
    assert body["errors"][0]["header"] == "Idempotency-Key"
    assert stored_plan(session, plan["id"]).status == "draft"


def test_the_longest_key_is_accepted(client, session, world):
    response = post_plan(client, plan_body(), **idempotency("k" * 255))
    assert response.status_code == 201
    assert session.scalars(select(IdempotencyRecord.key)).one() == "k" * 255


def test_a_create_refused_as_invalid_leaves_nothing_and_its_retry_is_evaluated_afresh(client, session, world):
    body = plan_body(hardware="later-gpu")
    refused = post_plan(client, body, **idempotency("create-1"))
    assert pointers(refused) == ["#/hardware"]
    assert (count(session, Plan), count(session, IdempotencyRecord)) == (0, 0)

    again = post_plan(client, body, **idempotency("create-1"))
    assert pointers(again) == ["#/hardware"]
    assert "Idempotent-Replayed" not in again.headers

    add_gpu(client, "later-gpu")
    accepted = post_plan(client, body, **idempotency("create-1"))
    assert accepted.status_code == 201, accepted.get_json()
    assert "Idempotent-Replayed" not in accepted.headers
    assert (count(session, Plan), count(session, IdempotencyRecord)) == (1, 1)


def test_a_create_that_conflicts_leaves_nothing_behind(client, session, world):
    budget = make_budget(client, amount="500.00")
    transition(client, create_plan(client, budget_id=budget["id"])["id"], "commit")
    response = post_plan(
        client, allocation_body(budget="remaining", budget_id=budget["id"]), **idempotency("create-1")
    )
    assert_problem(response, 409)
    assert (count(session, Plan), count(session, IdempotencyRecord)) == (1, 0)


def test_a_refused_commit_leaves_nothing_and_its_retry_passes_once_the_budget_allows(client, session, world):
    budget = make_budget(client, amount="400.00")
    plan = create_plan(client, budget_id=budget["id"])

    refused = transition(client, plan["id"], "commit", **idempotency("commit-1"))
    assert assert_problem(refused, 409)["limit"] == "amount"
    assert (stored_plan(session, plan["id"]).status, ledger(session), count(session, IdempotencyRecord)) == (
        "draft",
        [],
        0,
    )
    etag = client.get(f"/v1/budgets/{budget['id']}").headers["ETag"]
    assert (
        client.patch(
            f"/v1/budgets/{budget['id']}", json={"amount": "500.00"}, headers={"If-Match": etag}
        ).status_code
        == 200
    )

    accepted = transition(client, plan["id"], "commit", **idempotency("commit-1"))
    assert accepted.status_code == 200, accepted.get_json()
    assert "Idempotent-Replayed" not in accepted.headers
    assert len(ledger(session)) == 1


def test_a_retry_while_the_first_request_is_unfinished_is_a_409_with_retry_after(client, session, world):
    body = plan_body()
    now = datetime.now().astimezone()
    session.add(
        IdempotencyRecord(
            principal=admin_key_id(client),
            key="busy",
            fingerprint=fingerprint("POST", "/v1/plans", json.dumps(body).encode()),
            headers={},
            created_at=now,
            expires_at=now + timedelta(hours=24),
        )
    )
    session.commit()

    response = post_plan(client, body, **idempotency("busy"))

    assert_problem(response, 409)
    assert response.headers["Retry-After"]
    assert count(session, Plan) == 0


@pytest.mark.parametrize("action", ["commit", "cancel"])
def test_a_retried_transition_replays_its_first_response_and_moves_the_budget_once(
    client, session, world, action
):
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])
    if action == "cancel":
        transition(client, plan["id"], "commit")

    first = transition(client, plan["id"], action, **idempotency(f"{action}-1"))
    retry = transition(client, plan["id"], action, **idempotency(f"{action}-1"))

    assert first.status_code == retry.status_code == 200
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.get_data() == first.get_data()
    assert retry.headers["ETag"] == first.headers["ETag"]
    assert len(ledger(session)) == (1 if action == "commit" else 2)
    assert stored_budget(session, budget["id"]).committed == (Decimal(500) if action == "commit" else 0)
    assert_problem(transition(client, plan["id"], action, **idempotency(f"{action}-2")), 409)


def test_a_retried_revision_replays_and_creates_one_child(client, session, world):
    parent = create_plan(client)

    first = revise(client, parent["id"], {"accelerators": 20}, **idempotency("revise-1"))
    retry = revise(client, parent["id"], {"accelerators": 20}, **idempotency("revise-1"))

    assert first.status_code == retry.status_code == 201
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.get_data() == first.get_data()
    assert retry.headers["Location"] == first.headers["Location"]
    assert count(session, Plan) == 2
    assert_problem(revise(client, parent["id"], {"accelerators": 40}, **idempotency("revise-1")), 422)


def test_an_invalid_revision_with_a_key_leaves_nothing(client, session, world):
    parent = create_plan(client)
    response = revise(client, parent["id"], {"accelerators": 0}, **idempotency("revise-1"))
    assert pointers(response) == ["#/accelerators"]
    response = revise(client, parent["id"], {"params": None}, **idempotency("revise-2"))
    assert pointers(response) == ["#/params"]
    assert (count(session, Plan), count(session, IdempotencyRecord)) == (1, 0)


def test_an_expired_key_is_not_replayed(client, session, world):
    first = post_plan(client, plan_body(), **idempotency("create-1"))
    session.execute(
        update(IdempotencyRecord).values(expires_at=datetime.now().astimezone() - timedelta(seconds=1))
    )
    session.commit()

    retry = post_plan(client, plan_body(), **idempotency("create-1"))

    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry.headers
    assert retry.get_json()["id"] != first.get_json()["id"]
    assert count(session, Plan) == 2
    assert count(session, IdempotencyRecord) == 1


def test_an_expired_key_is_not_replayed_however_many_other_keys_expired_before_it(client, session, world):
    long_ago = datetime.now().astimezone() - timedelta(days=2)
    session.add_all(
        IdempotencyRecord(
            principal="someone-else",
            key=f"old-{n}",
            fingerprint="0" * 64,
            status_code=201,
            body="{}",
            headers={},
            created_at=long_ago,
            expires_at=long_ago + timedelta(hours=24),
        )
        for n in range(250)
    )
    session.commit()
    first = post_plan(client, plan_body(), **idempotency("create-1"))
    session.execute(
        update(IdempotencyRecord)
        .where(IdempotencyRecord.key == "create-1")
        .values(expires_at=datetime.now().astimezone() - timedelta(seconds=1))
    )
    session.commit()

    retry = post_plan(client, plan_body(), **idempotency("create-1"))

    assert retry.status_code == 201, retry.get_json()
    assert retry.get_json()["id"] != first.get_json()["id"]
    assert count(session, Plan) == 2


def test_a_key_expires_a_day_after_its_first_use(client, session, world):
    before = datetime.now().astimezone()
    post_plan(client, plan_body(), **idempotency("create-1"))
    record = session.scalars(select(IdempotencyRecord)).one()
    assert record.expires_at - record.created_at == timedelta(hours=24)
    assert before - timedelta(seconds=1) <= record.created_at <= datetime.now().astimezone()


def statements_of(connection, request: Callable[[], object]) -> list[str]:
    """The statements `request` sends to the database (the tests' SAVEPOINTs included)."""
    sent: list[str] = []

    def note(_connection, _cursor, statement, *_args) -> None:
        sent.append(statement)

    event.listen(connection, "before_cursor_execute", note)
    try:
        request()
    finally:
        event.remove(connection, "before_cursor_execute", note)
    return sent


def test_a_fresh_key_costs_two_statements_one_that_claims_it_and_one_that_stores_the_response(
    client, session, connection, world
):
    create_plan(client)  # warm: what a first request of the process reads once
    without_key = statements_of(connection, lambda: create_plan(client))
    with_key = statements_of(connection, lambda: post_plan(client, plan_body(), **idempotency("fresh")))

    keyed = [statement for statement in with_key if "idempotency_keys" in statement]
    assert len(with_key) - len(without_key) == 2
    assert [statement.split()[0] for statement in keyed] == ["SELECT", "INSERT"]
    record = session.scalars(select(IdempotencyRecord)).one()
    assert (record.key, record.status_code) == ("fresh", 201)
    assert count(session, Plan) == 3


def test_a_new_plan_is_written_with_its_audit_entry(client, connection, world):
    sent = statements_of(connection, lambda: post_plan(client, plan_body(), **{"X-Request-ID": "one-plan"}))
    writes = [statement.split()[2] for statement in sent if statement.split()[0] == "INSERT"]
    assert sorted(writes) == ["audit_log", "plans"]
    entries = client.get("/v1/audit?limit=100").get_json()["items"]
    assert [e["action"] for e in entries if e["request_id"] == "one-plan"] == ["plan.create"]


def test_an_expired_key_is_replaced_by_its_new_response_with_the_same_statements(
    client, session, connection, world
):
    post_plan(client, plan_body(), **idempotency("create-1"))
    session.execute(
        update(IdempotencyRecord).values(expires_at=datetime.now().astimezone() - timedelta(seconds=1))
    )
    session.commit()

    sent = statements_of(connection, lambda: post_plan(client, plan_body(), **idempotency("create-1")))

    keyed = [statement.split()[0] for statement in sent if "idempotency_keys" in statement]
    assert keyed == ["SELECT", "INSERT"]
    session.expire_all()
    record = session.scalars(select(IdempotencyRecord)).one()
    assert record.expires_at > datetime.now().astimezone() + timedelta(hours=23)
    assert count(session, Plan) == 2


# --- History ------------------------------------------------------------------------------------------------


def test_plans_are_listed_newest_first(client, world):
    ids = [create_plan(client, name=f"plan {n}")["id"] for n in range(3)]
    response = client.get("/v1/plans")
    assert response.status_code == 200
    assert [item["id"] for item in response.get_json()["items"]] == ids[::-1]
    assert response.get_json()["next_cursor"] is None
    assert "Link" not in response.headers


def test_lists_show_summaries_and_a_plan_read_alone_has_its_documents(client, world):
    created = create_plan(client, hardware=INLINE_HARDWARE)
    (item,) = client.get("/v1/plans").get_json()["items"]
    # The calibration and the quantile charged are the snapshot's.
    documents = {"inputs", "snapshot", "result", "calibration", "cost_quantile"}
    assert item == {name: value for name, value in created.items() if name not in documents}
    assert item["hardware"] is None
    assert documents <= set(client.get(f"/v1/plans/{created['id']}").get_json())


def test_plans_are_filtered_by_organization_budget_hardware_status_and_label(client, world):
    add_gpu(client, "other-gpu")
    budget = make_budget(client)
    theirs = make_budget(client, organization="globex")
    on_budget = create_plan(client, budget_id=budget["id"], labels={"team": "alpha", "run.kind": "base"})
    other_gpu = create_plan(client, hardware="other-gpu", labels={"team": "beta"})
    inline = create_plan(client, hardware=INLINE_HARDWARE, labels={"team": "alpha"})
    globex = create_plan(client, organization="globex", budget_id=theirs["id"], labels={"team": "alpha"})
    transition(client, on_budget["id"], "commit")
    transition(client, inline["id"], "cancel")
    assert inline["hardware"] is None

    assert listed(client, "organization=acme") == [inline["id"], other_gpu["id"], on_budget["id"]]
    assert listed(client, "organization=globex") == [globex["id"]]
    assert listed(client, "organization=nobody") == []
    assert listed(client, f"budget_id={budget['id']}") == [on_budget["id"]]
    assert listed(client, "hardware=other-gpu") == [other_gpu["id"]]
    assert listed(client, "hardware=lab-gpu") == [globex["id"], on_budget["id"]]
    assert listed(client, "hardware=no-such-gpu") == []  # not the plans on inline hardware (no id either)
    assert listed(client, "status=committed") == [on_budget["id"]]
    assert listed(client, "status=cancelled") == [inline["id"]]
    assert listed(client, "status=draft") == [globex["id"], other_gpu["id"]]
    assert listed(client, "label=team:alpha") == [globex["id"], inline["id"], on_budget["id"]]
    assert listed(client, "label=run.kind:base") == [on_budget["id"]]
    assert listed(client, "label=team:gamma") == []
    assert listed(client, "label=team:alpha&organization=acme&status=draft") == []


def test_the_creation_window_includes_its_start_and_excludes_its_end(client, world):
    plans = [create_plan(client) for _ in range(3)]
    times = [plan["created_at"] for plan in plans]

    def window(**bounds) -> list[str]:
        return listed(client, urlencode(bounds))

    assert window(created_from=times[1]) == [plans[2]["id"], plans[1]["id"]]
    assert window(created_to=times[1]) == [plans[0]["id"]]
    assert window(created_from=times[1], created_to=times[2]) == [plans[1]["id"]]
    assert window(created_from=times[0], created_to=times[2]) == [plans[1]["id"], plans[0]["id"]]
    later = (datetime.fromisoformat(times[2]) + timedelta(seconds=1)).isoformat()
    assert window(created_from=later) == []


def test_pages_of_plans_cover_every_plan_once_linked_by_a_cursor(client, world):
    ids = [create_plan(client, labels={"batch": "one"})["id"] for _ in range(7)]
    create_plan(client, labels={"batch": "two"})
    seen: list[str] = []
    url = "/v1/plans?label=batch:one&limit=3"
    pages = 0
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.get_json()
        page = response.get_json()
        seen += [item["id"] for item in page["items"]]
        pages += 1
        if page["next_cursor"]:
            assert len(page["items"]) == 3
            link = response.headers["Link"]
            assert link.endswith('>; rel="next"')
            assert f"cursor={page['next_cursor']}" in link
            assert "label=batch" in link
            url = link[1 : link.index(">")]
        else:
            assert "Link" not in response.headers
            url = None
    assert seen == ids[::-1]
    assert pages == 3


@pytest.mark.parametrize(
    "query",
    [
        "status=open",
        "label=team",
        "label=Bad Key:x",
        "budget_id=nope",
        "hardware=Not A Slug",
        "organization=Not A Slug",
        "created_from=yesterday",
        "created_from=2027-01-01",
        "limit=0",
        "limit=101",
        "cursor=zz",
        "colour=blue",
    ],
)
def test_bad_list_parameters_are_422_problems_naming_the_parameter(client, world, query):
    body = assert_problem(client.get(f"/v1/plans?{query}"), 422)
    assert [error["parameter"] for error in body["errors"]] == [query.split("=")[0]]


def test_an_empty_or_backwards_creation_window_is_a_422_naming_created_to(client, world):
    query = urlencode({"created_from": "2027-01-02T00:00:00Z", "created_to": "2027-01-01T00:00:00Z"})
    body = assert_problem(client.get(f"/v1/plans?{query}"), 422)
    assert [error["parameter"] for error in body["errors"]] == ["created_to"]


# --- Comparing ----------------------------------------------------------------------------------------------


def test_compare_lays_plans_side_by_side_with_only_what_differs(client, world):
    plans = [create_plan(client, accelerators=n, name=f"{n} GPUs") for n in (10, 20, 40)]

    response = client.get(f"/v1/plans/compare?ids={','.join(p['id'] for p in plans)}")

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert [p["id"] for p in body["plans"]] == [p["id"] for p in plans]
    assert [p["accelerators"] for p in body["plans"]] == [10, 20, 40]
    assert [p["cost"] for p in body["plans"]] == ["500.00"] * 3
    assert [p["params"] for p in body["plans"]] == [1e9] * 3
    differences = {d["field"]: d for d in body["differences"]}
    assert set(differences) == {"inputs.accelerators", "days"}
    assert differences["inputs.accelerators"]["values"] == [10, 20, 40]
    assert differences["inputs.accelerators"]["relative"] == [1.0, 2.0, 4.0]
    assert differences["days"]["relative"] == pytest.approx([1.0, 0.5, 0.25], rel=1e-12)


def test_compare_gives_relative_money_and_none_for_what_is_not_a_number(client, world):
    add_gpu(client, "other-gpu", price="5.00")
    cheap = create_plan(client)
    dear = create_plan(client, hardware="other-gpu", tokens=1.2e11, params=2e9)

    body = client.get(f"/v1/plans/compare?ids={cheap['id']},{dear['id']}").get_json()

    differences = {d["field"]: d for d in body["differences"]}
    assert differences["cost"]["values"] == ["500.00", "4000.00"]
    assert differences["cost"]["relative"] == [1.0, 8.0]
    assert differences["hardware"] == {
        "field": "hardware",
        "values": ["lab-gpu", "other-gpu"],
        "relative": None,
    }
    assert differences["inputs.hardware"]["relative"] is None
    assert differences["flops"]["relative"] == [1.0, 4.0]
    assert "currency" not in differences
    assert "inputs.mfu" not in differences


def test_compare_keeps_the_order_asked(client, world):
    a, b = create_plan(client)["id"], create_plan(client, accelerators=20)["id"]
    body = client.get(f"/v1/plans/compare?ids={b},{a}").get_json()
    assert [p["id"] for p in body["plans"]] == [b, a]
    assert {d["field"]: d["values"] for d in body["differences"]}["inputs.accelerators"] == [20, 10]


@pytest.mark.parametrize("count_", [1, 11])
def test_compare_needs_2_to_10_plans(client, world, count_):
    ids = ",".join(str(uuid.uuid4()) for _ in range(count_))
    body = assert_problem(client.get(f"/v1/plans/compare?ids={ids}"), 422)
    assert [error["parameter"] for error in body["errors"]] == ["ids"]


def test_compare_of_ten_plans_is_allowed(client, world):
    ids = [create_plan(client, accelerators=n)["id"] for n in range(1, 11)]
    response = client.get(f"/v1/plans/compare?ids={','.join(ids)}")
    assert response.status_code == 200
    assert len(response.get_json()["plans"]) == 10


@pytest.mark.parametrize("ids", ["nope,also-nope", "{a},{a}", "{a},", ""])
def test_compare_with_bad_ids_is_a_422(client, world, ids):
    plan = create_plan(client)["id"]
    body = assert_problem(client.get(f"/v1/plans/compare?ids={ids.format(a=plan)}"), 422)
    assert [error["parameter"] for error in body["errors"]] == ["ids"]


def test_compare_without_ids_is_a_422(client, world):
    assert [e["parameter"] for e in assert_problem(client.get("/v1/plans/compare"), 422)["errors"]] == ["ids"]


def test_compare_with_an_unknown_plan_is_404(client, world):
    plan = create_plan(client)["id"]
    assert_problem(client.get(f"/v1/plans/compare?ids={plan},{uuid.uuid4()}"), 404)


# --- Revising -----------------------------------------------------------------------------------------------


def test_a_revision_is_a_new_draft_linked_to_its_parent_with_the_changes_merged(client, session, world):
    budget = make_budget(client)
    parent = create_plan(client, budget_id=budget["id"], name="base", labels={"team": "alpha"})
    transition(client, parent["id"], "commit")

    response = revise(client, parent["id"], {"accelerators": 20})

    assert response.status_code == 201, response.get_json()
    child = response.get_json()
    assert response.headers["Location"] == f"/v1/plans/{child['id']}"
    assert response.headers["ETag"] == '"1"'
    assert (child["parent_id"], child["status"], child["budget_id"]) == (parent["id"], "draft", budget["id"])
    assert (child["name"], child["labels"], child["organization"]) == ("base", {"team": "alpha"}, "acme")
    assert child["inputs"] == {**parent["inputs"], "accelerators": 20}
    assert child["start_at"] == parent["start_at"]
    assert child["days"] == pytest.approx(parent["days"] / 2, rel=1e-12)
    assert (child["accelerator_hours"], child["cost"]) == (200.0, "500.00")
    assert stored_plan(session, parent["id"]).status == "committed"
    assert reevaluate(stored_plan(session, child["id"])) == child["result"]


def test_a_revision_resolves_the_price_afresh_and_may_override_it(client, world):
    parent = create_plan(client)
    change_price(client, "lab-gpu", "3.00")

    assert revise(client, parent["id"], {}).get_json()["cost"] == "600.00"
    overridden = revise(client, parent["id"], {"price_per_hour": "1.00", "currency": "USD"}).get_json()
    assert (overridden["cost"], overridden["inputs"]["price_per_hour"]) == ("200.00", "1.00")


def test_null_removes_the_law_of_the_parent(client, world):
    parent = create_plan(client, params=OMIT, tokens=OMIT, flops=1e21, law="chinchilla-2022")

    child = revise(client, parent["id"], {"law": None}).get_json()

    assert (child["method"], child["predicted_loss"], child["snapshot"]["law"]) == ("fixed-ratio", None, None)
    assert "law" not in child["inputs"]
    assert child["tokens"] == pytest.approx(20 * child["params"], rel=1e-12)


def test_a_revision_switches_to_another_law(client, world):
    parent = create_plan(client, params=OMIT, tokens=OMIT, flops=1e21, law="chinchilla-2022")
    child = revise(client, parent["id"], {"law": "epoch-2024"}).get_json()
    assert (child["inputs"]["law"], child["snapshot"]["law"]["slug"]) == ("epoch-2024", "epoch-2024")
    assert child["params"] != parent["params"]


def test_a_revision_serves_the_inference_on_other_hardware_in_batches(client, world):
    add_gpu(client, "serving-gpu", price="1.00")
    parent = create_plan(client, params=OMIT, tokens=OMIT, flops=1e21, inference_tokens=1e12)

    child = revise(client, parent["id"], {"inference_hardware": "serving-gpu", "inference_batch": 4})

    assert child.status_code == 201, child.get_json()
    served, before = (
        child.get_json()["result"]["inference"]["serving"],
        parent["result"]["inference"]["serving"],
    )
    assert (before["hardware"]["slug"], served["hardware"]["slug"]) == ("lab-gpu", "serving-gpu")
    assert served["accelerator_hours"] == pytest.approx(before["accelerator_hours"] / 4, rel=1e-12)
    assert child.get_json()["snapshot"]["inference_hardware"]["slug"] == "serving-gpu"


def test_a_revision_switches_from_a_budget_to_a_chosen_model(client, world):
    parent = create_plan(client, params=OMIT, tokens=OMIT, flops=1e21)

    child = revise(client, parent["id"], {"flops": None, "params": 1e9, "tokens": 6e10}).get_json()

    assert (child["method"], child["params"], child["tokens"], child["cost"]) == (
        "fixed",
        1e9,
        6e10,
        "500.00",
    )
    assert "flops" not in child["inputs"]


def test_a_revision_cannot_move_to_another_organization(client, session, world):
    parent = create_plan(client)
    for organization in ("globex", None):
        assert pointers(revise(client, parent["id"], {"organization": organization})) == ["#/organization"]
    assert count(session, Plan) == 1


def test_a_revision_naming_its_own_organization_is_allowed(client, world):
    parent = create_plan(client)
    assert revise(client, parent["id"], {"organization": "acme", "accelerators": 5}).status_code == 201


@pytest.mark.parametrize(
    ("changes", "pointer"),
    [
        ({"params": None}, "#/params"),
        ({"flops": 1e21}, "#/flops"),
        ({"hardware": None}, "#/hardware"),
        ({"hardware": "no-such-gpu"}, "#/hardware"),
        ({"accelerators": 0}, "#/accelerators"),
        ({"mfu": 1.5}, "#/mfu"),
        ({"colour": "blue"}, "#/colour"),
        ({"budget_id": str(uuid.uuid4())}, "#/budget_id"),
    ],
)
def test_a_revision_that_makes_an_invalid_request_is_a_422_pointing_at_the_field(
    client, session, world, changes, pointer
):
    parent = create_plan(client)
    assert pointer in pointers(revise(client, parent["id"], changes))
    assert count(session, Plan) == 1


def test_a_revision_merges_labels_as_a_json_merge_patch(client, world):
    parent = create_plan(client, labels={"team": "alpha", "stage": "base"})

    added = revise(client, parent["id"], {"labels": {"extra": "x"}})
    removed = revise(client, parent["id"], {"labels": {"stage": None}})

    assert added.status_code == 201, added.get_json()
    assert added.get_json()["labels"] == {"team": "alpha", "stage": "base", "extra": "x"}
    assert removed.status_code == 201, removed.get_json()
    assert removed.get_json()["labels"] == {"team": "alpha"}


def test_a_revision_may_take_the_budgets_remaining_amount_instead_of_the_parents_cost(client, world):
    budget = make_budget(client, amount="1500.00")
    committed = create_plan(client, budget_id=budget["id"])
    transition(client, committed["id"], "commit")
    parent = create_plan(client, params=OMIT, tokens=OMIT, budget="remaining", budget_id=budget["id"])
    assert parent["cost"] == "1000.00"
    transition(client, committed["id"], "cancel")

    kept = revise(client, parent["id"], {"accelerators": 20}).get_json()
    refreshed = revise(client, parent["id"], {"budget": "remaining"}).get_json()

    assert (kept["cost"], kept["inputs"]["cost"]) == ("1000.00", "1000.00")
    assert (refreshed["cost"], refreshed["inputs"]["cost"]) == ("1500.00", "1500.00")
    assert refreshed["budget_id"] == budget["id"]


def test_a_revision_may_charge_the_plan_to_a_budget(client, world):
    budget = make_budget(client)
    parent = create_plan(client)
    child = revise(client, parent["id"], {"budget_id": budget["id"]}).get_json()
    assert child["budget_id"] == budget["id"]
    assert transition(client, child["id"], "commit").status_code == 200


# --- Organisations and roles --------------------------------------------------------------------------------


@pytest.fixture
def globex_plan(client, world):
    return create_plan(client, organization="globex")


def test_another_organisations_plan_is_404_to_a_planner(client, session, issue_key, globex_plan):
    planner = issue_key("planner", "acme")
    mine = create_plan(client, planner)
    plan_id = globex_plan["id"]

    assert_problem(client.get(f"/v1/plans/{plan_id}", headers=bearer(planner)), 404)
    for action in ("commit", "cancel"):
        assert_problem(transition(client, plan_id, action, planner), 404)
    assert_problem(revise(client, plan_id, {"accelerators": 20}, planner), 404)
    compared = client.get(f"/v1/plans/compare?ids={mine['id']},{plan_id}", headers=bearer(planner))
    assert_problem(compared, 404)
    theirs = make_budget(client, organization="globex")
    assert_problem(client.get(f"/v1/budgets/{theirs['id']}/ledger", headers=bearer(planner)), 404)
    assert stored_plan(session, plan_id).status == "draft"
    assert count(session, Plan) == 2


def test_a_planner_cannot_create_in_or_charge_another_organisation(client, session, issue_key, world):
    planner = issue_key("planner", "acme")
    theirs = make_budget(client, organization="globex")

    assert pointers(post_plan(client, plan_body(organization="globex"), planner)) == ["#/organization"]
    assert pointers(post_plan(client, plan_body(budget_id=theirs["id"]), planner)) == ["#/budget_id"]
    assert count(session, Plan) == 0


def test_an_admin_cannot_charge_a_plan_to_another_organisations_budget(client, world):
    theirs = make_budget(client, organization="globex")
    assert pointers(post_plan(client, plan_body(budget_id=theirs["id"]))) == ["#/budget_id"]


def test_a_planner_creates_commits_and_cancels_in_its_organisation(client, session, issue_key, world):
    planner = issue_key("planner", "acme")
    budget = make_budget(client)
    plan = create_plan(client, planner, budget_id=budget["id"])
    assert plan["created_by"] == key_id(planner)
    committed = transition(client, plan["id"], "commit", planner)
    assert committed.status_code == 200
    assert (ledger(session)[0].actor, ledger(session)[0].request_id) == (
        key_id(planner),
        committed.headers["X-Request-ID"],
    )
    assert transition(client, plan["id"], "cancel", planner).status_code == 200
    assert revise(client, plan["id"], {"accelerators": 20}, planner).status_code == 201


def test_a_viewer_reads_but_cannot_create_or_revise(client, session, issue_key, world):
    viewer = issue_key("viewer", "acme")
    plan = create_plan(client)

    assert_problem(post_plan(client, plan_body(), viewer), 403)
    assert_problem(revise(client, plan["id"], {"accelerators": 20}, viewer), 403)
    for action in ("commit", "cancel"):
        assert_problem(transition(client, plan["id"], action, viewer), 403)
    assert listed(client, key=viewer) == [plan["id"]]
    assert client.get(f"/v1/plans/{plan['id']}", headers=bearer(viewer)).status_code == 200
    assert count(session, Plan) == 1


def test_finance_commits_and_cancels_but_cannot_create_or_revise(client, session, issue_key, world):
    finance = issue_key("finance", "acme")
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])

    assert_problem(post_plan(client, plan_body(), finance), 403)
    assert_problem(revise(client, plan["id"], {"accelerators": 20}, finance), 403)
    committed = transition(client, plan["id"], "commit", finance, **{"X-Request-ID": "fin-1"})
    assert committed.status_code == 200, committed.get_json()
    assert transition(client, plan["id"], "cancel", finance).status_code == 200
    commit, release = ledger(session)
    assert (commit.entry, commit.actor, commit.request_id) == ("commit", key_id(finance), "fin-1")
    assert (release.entry, release.actor) == ("release", key_id(finance))
    assert count(session, Plan) == 1


def test_an_organisation_key_lists_only_its_organisations_plans(client, issue_key, globex_plan):
    viewer = issue_key("viewer", "acme")
    mine = create_plan(client)

    assert listed(client, key=viewer) == [mine["id"]]
    assert listed(client, "organization=globex", key=viewer) == []
    assert listed(client, "hardware=lab-gpu&status=draft", key=viewer) == [mine["id"]]
    assert listed(client) == [mine["id"], globex_plan["id"]]


def test_the_audit_log_records_create_commit_and_cancel(client, world):
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])
    transition(client, plan["id"], "commit", **{"X-Request-ID": "audit-commit"})
    transition(client, plan["id"], "cancel", **{"X-Request-ID": "audit-cancel"})

    entries = client.get("/v1/audit?limit=100").get_json()["items"]

    about = [(e["action"], e["request_id"]) for e in entries if e["object_id"] == plan["id"]]
    assert about[:2] == [("plan.cancel", "audit-cancel"), ("plan.commit", "audit-commit")]
    assert [action for action, _ in about] == ["plan.cancel", "plan.commit", "plan.create"]
    assert {e["actor"] for e in entries if e["object_id"] == plan["id"]} == {admin_key_id(client)}


def test_a_budget_committing_at_p80_charges_its_plans_that_quantile_of_their_cost(client, world):
    budget = make_budget(client, amount="100000.00", commit_quantile=0.8)
    assert budget["commit_quantile"] == 0.8
    plan = create_plan(client, budget_id=budget["id"])
    estimate = plan["result"]["estimate"]
    point, (low, high) = (
        Decimal(estimate["cost"]),
        (Decimal(value) for value in estimate["intervals"]["cost"]),
    )
    expected = accuracy.at_quantile(float(point), (float(low), float(high)), 0.8)
    assert Decimal(plan["cost"]) == Decimal(repr(expected)).quantize(Decimal("0.01"), ROUND_HALF_UP)
    assert plan["cost_quantile"] == 0.8
    # At the point value without a quantile.
    plain = create_plan(client, budget_id=make_budget(client, amount="100000.00")["id"])
    assert Decimal(plain["cost"]) == Decimal(plain["result"]["estimate"]["cost"])
    assert plain["cost_quantile"] is None


@pytest.mark.parametrize("quantile", [0.3, 1.0, "0.8"])
def test_a_commit_quantile_outside_half_to_0_99_is_a_422_naming_it(client, world, quantile):
    response = client.post(
        "/v1/budgets",
        json={
            "organization": "acme",
            "name": "q",
            "amount": "1.00",
            "currency": "USD",
            "period_start": "2027-01-01T00:00:00Z",
            "period_end": "2027-04-01T00:00:00Z",
            "commit_quantile": quantile,
        },
    )
    assert pointers(response) == ["#/commit_quantile"]

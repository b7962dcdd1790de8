"""`flask plans verify`: every stored plan re-evaluated from its inputs and snapshot."""

from __future__ import annotations

import uuid

from sqlalchemy import update

from service import cli
from service.data.models import Plan
from service.infra.db import get_db
from tests.conftest import build_app

INLINE_PLAN = {
    "organization": "acme",
    "pf_days": 100,
    "law": "chinchilla-2022",
    "hardware": {
        "peak_flops": {"bf16": 1e15},
        "memory_bytes": 8e10,
        "price_per_hour": "2.00",
        "currency": "USD",
    },
    "accelerators": 64,
}


def test_verify_passes_for_stored_plans_and_names_one_whose_result_was_altered(app, client, session):
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    ids = [client.post("/v1/plans", json=INLINE_PLAN).get_json()["id"] for _ in range(2)]
    runner = app.test_cli_runner()

    verified = runner.invoke(args=["plans", "verify"])
    assert verified.exit_code == 0, verified.output
    assert "2 plans re-evaluated, 0 differ" in verified.output

    altered = client.get(f"/v1/plans/{ids[0]}").get_json()["result"]
    altered["params"] *= 1.01
    session.execute(update(Plan).where(Plan.id == uuid.UUID(ids[0])).values(result=altered))
    session.commit()
    refused = runner.invoke(args=["plans", "verify"])
    assert refused.exit_code == 1
    assert "2 plans re-evaluated, 1 differ" in refused.output
    assert ids[0] in refused.output
    assert ids[1] not in refused.output


def test_a_plan_stored_without_sequence_parallel_verifies_as_sequence_parallel(app, client, session):
    # Plans made before the field existed have no `sequence_parallel` in their inputs; their activations were
    # counted with sequence parallelism, which is the default.
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    shape = {"layers": 80, "d_model": 8192, "heads": 64, "sequence_length": 2048}
    body = client.post(
        "/v1/plans",
        json={**INLINE_PLAN, "shape": shape, "tensor_parallel": 8, "recomputation": "selective", "mfu": 0.4},
    ).get_json()
    assert "sequence_parallel" not in body["inputs"]
    # s·b·h·32/t a layer: Table 2's 34 less the two dropout masks, which a shape without dropout keeps not.
    assert body["result"]["estimate"]["memory"]["activations_bytes"] == 80 * 2048 * 8192 * 32 / 8

    verified = app.test_cli_runner().invoke(args=["plans", "verify"])
    assert verified.exit_code == 0, verified.output
    assert "1 plans re-evaluated, 0 differ" in verified.output


def test_plans_of_an_older_engine_are_counted_apart_and_do_not_fail_verify(app, client, session):
    # After an upgrade that changed the science, an older engine's plans would come out differently today:
    # expected, and they keep the result they were made with. Only this engine's plans must reproduce.
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    old, current = (client.post("/v1/plans", json=INLINE_PLAN).get_json() for _ in range(2))
    snapshot = {**old["snapshot"], "engine_version": "0.9.0"}
    result = {**old["result"], "params": old["result"]["params"] * 1.01}
    session.execute(
        update(Plan).where(Plan.id == uuid.UUID(old["id"])).values(snapshot=snapshot, result=result)
    )
    session.commit()

    verified = app.test_cli_runner().invoke(args=["plans", "verify"])

    assert verified.exit_code == 0, verified.output
    assert "1 plans re-evaluated, 0 differ" in verified.output
    assert "1 plans of older engines (0.9.0: 1, 1 of them would now differ)" in verified.output
    assert current["id"] not in verified.output


def test_an_inference_aware_plan_of_engine_1_2_0_served_nothing_and_verifies_apart(app, client, session):
    # Engine 1.2.0 snapshots held no memory bandwidth and no inference hardware: re-evaluated today such a
    # plan serves nothing (as it did) and gains the fields 1.3.0 added, so it is counted apart, not an error.
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    bandwidth = {"memory_bandwidth_bytes_per_second": 2e12}
    body = {**INLINE_PLAN, "hardware": {**INLINE_PLAN["hardware"], **bandwidth}, "inference_tokens": 1e12}
    body.pop("pf_days")
    plan = client.post("/v1/plans", json={**body, "target_loss": 2.3}).get_json()
    assert plan["result"]["inference"]["serving"]["cost"] is not None
    hardware = {
        k: v for k, v in plan["snapshot"]["hardware"].items() if k != "memory_bandwidth_bytes_per_second"
    }
    old = {"engine_version": "1.2.0", "hardware": hardware, "law": plan["snapshot"]["law"]}
    result = {**plan["result"], "engine_version": "1.2.0"}
    result["inference"] = {
        k: v for k, v in result["inference"].items() if k in {"inference_tokens", "lifetime_flops"}
    }
    session.execute(update(Plan).where(Plan.id == uuid.UUID(plan["id"])).values(snapshot=old, result=result))
    session.commit()

    verified = app.test_cli_runner().invoke(args=["plans", "verify"])

    assert verified.exit_code == 0, verified.output
    assert "1 plans of older engines (1.2.0: 1, 1 of them would now differ)" in verified.output


def test_verify_goes_through_every_plan_a_batch_at_a_time(app, client, session):
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    ids = {client.post("/v1/plans", json=INLINE_PLAN).get_json()["id"] for _ in range(3)}
    seen = [str(plan.id) for plan in cli._every_plan(session, batch=2)]
    assert set(seen) == ids
    assert seen == sorted(seen, key=uuid.UUID)  # id order: each batch starts after the last one's end


def test_verify_reads_as_the_service_reads(database_url):
    # The other tests run it on the test's transaction. Through the app's own reading sessions, PostgreSQL's
    # without a transaction (db.reading), a streamed query's server-side cursor could not be declared.
    app = build_app(database_url)
    try:
        verified = app.test_cli_runner().invoke(args=["plans", "verify"])
    finally:
        get_db(app).engine.dispose()
    assert verified.exit_code == 0, verified.output
    assert "plans re-evaluated, 0 differ" in verified.output

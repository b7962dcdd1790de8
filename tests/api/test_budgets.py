"""Budgets over HTTP: what finance sets, what plans may spend, and safe concurrent edits."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from sqlalchemy import select, update

from service.data.models import Budget
from service.services.catalog import load_builtin_hardware
from tests.problems import assert_problem


@pytest.fixture
def organization(client):
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    return "acme"


def budget_body(**overrides) -> dict:
    return {
        "organization": "acme",
        "name": "Q1 pretraining",
        "amount": "2500000.00",
        "currency": "USD",
        "period_start": "2026-01-01T00:00:00Z",
        "period_end": "2026-04-01T00:00:00Z",
        **overrides,
    }


def create(client, **overrides):
    response = client.post("/v1/budgets", json=budget_body(**overrides))
    assert response.status_code == 201, response.get_json()
    return response


def test_a_new_budget_has_nothing_committed_and_everything_remaining(client, session, organization):
    response = create(client, labels={"cost_center": "ml-42"}, max_flops=1e24, max_accelerator_hours=500000)

    body = response.get_json()
    assert response.headers["Location"] == f"/v1/budgets/{body['id']}"
    assert response.headers["ETag"] == '"1"'
    assert body["organization"] == "acme"
    assert (body["amount"], body["committed"], body["remaining"], body["utilization"]) == (
        "2500000.00",
        "0.00",
        "2500000.00",
        0.0,
    )
    assert body["labels"] == {"cost_center": "ml-42"}
    assert (body["max_flops"], body["max_accelerator_hours"]) == (1e24, 500000)
    assert body["period_start"] == "2026-01-01T00:00:00+00:00"
    stored = session.scalars(select(Budget)).one()
    assert (stored.amount, stored.currency, stored.committed) == (Decimal("2500000.00"), "USD", Decimal(0))


def test_allowed_hardware_is_kept_by_slug(client, session, organization):
    load_builtin_hardware(session)
    body = create(client, allowed_hardware=["h100-sxm", "a100-80gb", "h100-sxm"]).get_json()
    assert body["allowed_hardware"] == ["a100-80gb", "h100-sxm"]


def test_a_budget_is_read_back_with_its_etag_and_304_when_unchanged(client, organization):
    created = create(client).get_json()
    response = client.get(f"/v1/budgets/{created['id']}")
    assert response.get_json() == created
    assert client.get(f"/v1/budgets/{created['id']}", headers={"If-None-Match": '"1"'}).status_code == 304


def test_budgets_are_listed_newest_first_and_filtered_by_organization(client, organization):
    client.post("/v1/organizations", json={"slug": "other", "name": "Other"})
    first = create(client, name="first").get_json()
    second = create(client, name="second").get_json()
    create(client, organization="other", name="theirs")

    page = client.get("/v1/budgets?organization=acme&limit=1").get_json()
    assert [b["id"] for b in page["items"]] == [second["id"]]
    rest = client.get(f"/v1/budgets?organization=acme&limit=1&cursor={page['next_cursor']}").get_json()
    assert [b["id"] for b in rest["items"]] == [first["id"]]
    assert rest["next_cursor"] is None
    assert len(client.get("/v1/budgets").get_json()["items"]) == 3


def test_an_unknown_budget_is_404(client):
    assert_problem(client.get(f"/v1/budgets/{uuid.uuid4()}"), 404)
    assert_problem(client.get("/v1/budgets/not-a-uuid"), 404)


@pytest.mark.parametrize(
    ("overrides", "pointer"),
    [
        ({"amount": "-5.00"}, "#/amount"),
        ({"amount": 1000}, "#/amount"),
        ({"amount": "1e5"}, "#/amount"),
        ({"amount": "1.0000001"}, "#/amount"),
        ({"currency": "usd"}, "#/currency"),
        ({"currency": "XXX"}, "#/currency"),
        ({"period_end": "2025-12-31T00:00:00Z"}, "#/period_end"),
        ({"period_end": "2026-01-01T00:00:00Z"}, "#/period_end"),
        ({"period_start": "2026-01-01"}, "#/period_start"),
        ({"period_start": "2026-01-01T00:00:00"}, "#/period_start"),
        ({"max_flops": -1}, "#/max_flops"),
        ({"max_accelerator_hours": 0}, "#/max_accelerator_hours"),
        ({"organization": "nobody"}, "#/organization"),
        ({"organization": "Not A Slug"}, "#/organization"),
        ({"allowed_hardware": ["h100-sxm", "nope"]}, "#/allowed_hardware/1"),
        ({"labels": {"Bad Key": "x"}}, "#/labels/Bad Key/key"),
        ({"labels": {"team": 5}}, "#/labels/team/value"),
        ({"name": ""}, "#/name"),
        ({"colour": "blue"}, "#/colour"),
    ],
)
def test_bad_budgets_are_422_problems_pointing_at_the_field(
    client, session, organization, overrides, pointer
):
    load_builtin_hardware(session)
    response = client.post("/v1/budgets", json=budget_body(**overrides))
    body = assert_problem(response, 422)
    assert pointer in [error["pointer"] for error in body["errors"]], body["errors"]
    assert session.scalars(select(Budget)).all() == []


def test_read_only_fields_are_named_as_such_not_as_unknown(client, organization):
    body = assert_problem(client.post("/v1/budgets", json=budget_body(committed="5.00")), 422)
    assert body["errors"] == [
        {"pointer": "#/committed", "detail": "Read-only: set by the service, not by requests."}
    ]


def test_a_missing_required_field_is_named(client, organization):
    body = budget_body()
    del body["currency"]
    errors = assert_problem(client.post("/v1/budgets", json=body), 422)["errors"]
    assert errors == [{"pointer": "#/currency", "detail": "Missing data for required field."}]


def edit(client, method, budget_id, body=None, etag=None):
    headers = {} if etag is None else {"If-Match": etag}
    return client.open(f"/v1/budgets/{budget_id}", method=method, json=body, headers=headers)


def test_an_update_needs_the_etag_of_the_version_it_changes(client, organization):
    created = create(client)
    budget_id = created.get_json()["id"]

    assert_problem(edit(client, "PATCH", budget_id, {"name": "renamed"}), 428)
    assert_problem(edit(client, "PATCH", budget_id, {"name": "renamed"}, etag='"7"'), 412)
    changed = edit(client, "PATCH", budget_id, {"name": "renamed"}, etag=created.headers["ETag"])
    assert changed.status_code == 200
    assert changed.get_json()["name"] == "renamed"
    assert changed.headers["ETag"] == '"2"'
    # The first ETag is now stale.
    assert_problem(edit(client, "PATCH", budget_id, {"name": "again"}, etag=created.headers["ETag"]), 412)


def test_put_replaces_the_budget_and_clears_what_it_omits(client, organization):
    created = create(client, labels={"team": "x"}, max_flops=1e24)
    budget_id = created.get_json()["id"]
    replaced = edit(
        client, "PUT", budget_id, budget_body(name="new", amount="10.00"), etag=created.headers["ETag"]
    )
    assert replaced.status_code == 200, replaced.get_json()
    body = replaced.get_json()
    assert (body["name"], body["amount"], body["labels"], body["max_flops"]) == ("new", "10.00", {}, None)
    assert_problem(edit(client, "PUT", budget_id, {"name": "partial"}, etag=replaced.headers["ETag"]), 422)


def test_a_budget_cannot_move_to_another_organization(client, organization):
    client.post("/v1/organizations", json={"slug": "other", "name": "Other"})
    created = create(client)
    response = edit(
        client, "PATCH", created.get_json()["id"], {"organization": "other"}, etag=created.headers["ETag"]
    )
    assert assert_problem(response, 422)["errors"][0]["pointer"] == "#/organization"


def commit(session, budget_id, amount: str) -> None:
    """Stand-in for the plan ledger (issue 6): commit money against the budget, as the ledger must, in
    one conditional UPDATE that also moves the version (so stale ETags stop matching)."""
    session.execute(
        update(Budget)
        .where(Budget.id == uuid.UUID(budget_id))
        .values(committed=Decimal(amount), version=Budget.version + 1)
    )
    session.commit()


def test_the_amount_cannot_drop_below_what_is_committed(client, session, organization):
    created = create(client, amount="1000.00")
    budget_id = created.get_json()["id"]
    commit(session, budget_id, "400.00")
    etag = client.get(f"/v1/budgets/{budget_id}").headers["ETag"]

    refused = edit(client, "PATCH", budget_id, {"amount": "399.99"}, etag=etag)
    assert "400" in assert_problem(refused, 409)["detail"]
    allowed = edit(client, "PATCH", budget_id, {"amount": "400.00"}, etag=etag)
    assert allowed.status_code == 200
    assert (allowed.get_json()["remaining"], allowed.get_json()["utilization"]) == ("0.00", 1.0)


def test_the_currency_is_fixed_once_anything_is_committed(client, session, organization):
    budget_id = create(client).get_json()["id"]
    commit(session, budget_id, "1.00")
    etag = client.get(f"/v1/budgets/{budget_id}").headers["ETag"]
    assert_problem(edit(client, "PATCH", budget_id, {"currency": "EUR"}, etag=etag), 409)


def test_a_budget_with_commitments_cannot_be_deleted_and_an_empty_one_can(client, session, organization):
    budget_id = create(client).get_json()["id"]
    commit(session, budget_id, "1.00")
    etag = client.get(f"/v1/budgets/{budget_id}").headers["ETag"]
    assert_problem(edit(client, "DELETE", budget_id, etag=etag), 409)

    commit(session, budget_id, "0")
    etag = client.get(f"/v1/budgets/{budget_id}").headers["ETag"]
    assert_problem(edit(client, "DELETE", budget_id), 428)
    assert edit(client, "DELETE", budget_id, etag=etag).status_code == 204
    assert session.scalars(select(Budget)).all() == []
    assert_problem(client.get(f"/v1/budgets/{budget_id}"), 404)


def test_an_update_that_changes_nothing_keeps_the_etag(client, organization):
    created = create(client)
    budget_id = created.get_json()["id"]
    unchanged = edit(client, "PATCH", budget_id, {"name": "Q1 pretraining"}, etag=created.headers["ETag"])
    assert unchanged.status_code == 200
    assert unchanged.headers["ETag"] == created.headers["ETag"]
    assert unchanged.get_json()["updated_at"] == created.get_json()["updated_at"]


@pytest.mark.parametrize(
    "overrides",
    [{"period_end": "9999-12-31T23:00:00-05:00"}, {"period_start": "0001-01-01T00:00:00+05:00"}],
)
def test_times_that_overflow_in_utc_are_422_problems(client, organization, overrides):
    response = client.post("/v1/budgets", json=budget_body(**overrides))
    assert [e["pointer"] for e in assert_problem(response, 422)["errors"]] == [f"#/{next(iter(overrides))}"]


def test_moving_one_end_of_the_period_past_the_other_is_a_422_even_with_other_changes(
    client, session, organization
):
    load_builtin_hardware(session)
    created = create(client)
    response = edit(
        client,
        "PATCH",
        created.get_json()["id"],
        {"period_start": "2028-01-01T00:00:00Z", "allowed_hardware": ["h100-sxm"]},
        etag=created.headers["ETag"],
    )
    assert assert_problem(response, 422)["errors"][0]["pointer"] == "#/period_end"

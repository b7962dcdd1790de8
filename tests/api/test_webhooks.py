"""Webhooks over HTTP: registered by planners, finance and admins, their secret shown once, changed and
deleted with If-Match, their deliveries listed and retried."""

from __future__ import annotations

import base64
import uuid

import pytest
from sqlalchemy import select, update

from service.data.models import Organization, Webhook, WebhookDelivery
from service.services import events
from tests.conftest import bearer
from tests.problems import assert_problem


@pytest.fixture
def organizations(client):
    for slug in ("acme", "globex"):
        assert client.post("/v1/organizations", json={"slug": slug, "name": slug}).status_code == 201


def webhook_body(**overrides) -> dict:
    return {"organization": "acme", "url": "https://hooks.acme.internal/planner", **overrides}


def create(client, **overrides):
    response = client.post("/v1/webhooks", json=webhook_body(**overrides))
    assert response.status_code == 201, response.get_json()
    return response


def test_a_new_webhook_shows_its_secret_once(client, session, organizations):
    response = create(client, event_types=["plan.failed", "budget.threshold_crossed"], description="ops")

    body = response.get_json()
    assert response.headers["Location"] == f"/v1/webhooks/{body['id']}"
    assert (response.headers["ETag"], response.headers["Cache-Control"]) == ('"1"', "no-store")
    assert body["secret"].startswith("whsec_")
    assert len(base64.b64decode(body["secret"].removeprefix("whsec_"))) == 32
    assert body["event_types"] == ["plan.failed", "budget.threshold_crossed"]  # in the list's order
    assert (body["active"], body["description"], body["organization"]) == (True, "ops", "acme")
    read = client.get(f"/v1/webhooks/{body['id']}").get_json()
    assert "secret" not in read
    assert read == {key: value for key, value in body.items() if key != "secret"}
    assert "secret" not in client.get("/v1/webhooks").get_json()["items"][0]
    assert session.scalars(select(Webhook.secret)).one() == body["secret"]


def test_rotating_the_secret_shows_the_new_one_once(client, organizations):
    created = create(client).get_json()
    rotated = client.post(f"/v1/webhooks/{created['id']}/rotate-secret")
    assert rotated.status_code == 200
    assert rotated.get_json()["secret"] not in (None, created["secret"])
    assert rotated.headers["ETag"] == '"2"'
    stale = client.post(f"/v1/webhooks/{created['id']}/rotate-secret", headers={"If-Match": '"1"'})
    assert_problem(stale, 412)


def test_a_webhook_is_changed_and_deleted_with_if_match(client, session, organizations):
    created = create(client).get_json()
    path = f"/v1/webhooks/{created['id']}"

    assert_problem(client.patch(path, json={"active": False}), 428)
    assert_problem(client.patch(path, json={"active": False}, headers={"If-Match": '"7"'}), 412)
    changed = client.patch(
        path,
        json={
            "active": False,
            "event_types": ["plan.started"],
            "url": "http://hooks.acme.internal:8080/h",
            "description": None,
        },
        headers={"If-Match": '"1"'},
    )
    assert changed.status_code == 200, changed.get_json()
    assert changed.headers["ETag"] == '"2"'
    body = changed.get_json()
    assert (body["active"], body["event_types"], body["url"], body["description"]) == (
        False,
        ["plan.started"],
        "http://hooks.acme.internal:8080/h",
        None,
    )
    moved = client.patch(path, json={"organization": "globex"}, headers={"If-Match": '"2"'})
    assert assert_problem(moved, 422)["errors"][0]["pointer"] == "#/organization"

    assert_problem(client.delete(path), 428)
    assert client.delete(path, headers={"If-Match": '"2"'}).status_code == 204
    assert_problem(client.get(path), 404)
    assert session.scalars(select(Webhook)).all() == []


@pytest.mark.parametrize(
    ("body", "pointer", "detail"),
    [
        (webhook_body(url="ftp://files.acme/x"), "#/url", "Must be an http or https URL"),
        (webhook_body(url="hooks.acme/x"), "#/url", "Must be an http or https URL"),
        (webhook_body(url="https://bot:hunter2@hooks.acme/x"), "#/url", "Must not contain credentials"),
        # Between brackets, an IPv6 address only (RFC 3986), as the pattern in the description states.
        (webhook_body(url="https://[03a5]:62400"), "#/url", "Must be an http or https URL"),
        (webhook_body(url="https://[1:2:3:4:5:6:7]/x"), "#/url", "Must be an http or https URL"),
        (webhook_body(event_types=["plan.exploded"]), "#/event_types/0", "Must be one of"),
        (webhook_body(organization="nobody"), "#/organization", "No organization 'nobody'."),
        (webhook_body(secret="whsec_mine"), "#/secret", "Unknown field."),
        (webhook_body(active="yes"), "#/active", "Not a valid boolean."),
        ({"organization": "acme"}, "#/url", "Missing data for required field."),
    ],
)
def test_a_bad_webhook_is_a_422_naming_the_field(client, organizations, body, pointer, detail):
    response = assert_problem(client.post("/v1/webhooks", json=body), 422)
    assert [error["pointer"] for error in response["errors"]] == [pointer]
    assert response["errors"][0]["detail"].startswith(detail)


def test_viewers_and_other_organisations_do_not_see_webhooks(client, issue_key, organizations):
    ours = create(client).get_json()
    theirs = create(client, organization="globex").get_json()
    planner = bearer(issue_key("planner", "acme"))
    finance = bearer(issue_key("finance", "acme"))
    viewer = bearer(issue_key("viewer", "acme"))

    assert [w["id"] for w in client.get("/v1/webhooks", headers=planner).get_json()["items"]] == [ours["id"]]
    assert_problem(client.get(f"/v1/webhooks/{theirs['id']}", headers=finance), 404)
    refused = client.post("/v1/webhooks", json=webhook_body(organization="globex"), headers=finance)
    assert assert_problem(refused, 422)["errors"][0]["pointer"] == "#/organization"
    assert client.post("/v1/webhooks", json=webhook_body(), headers=finance).status_code == 201
    assert_problem(client.get("/v1/webhooks", headers=viewer), 403)


def test_deliveries_are_listed_and_a_failed_one_is_queued_again(client, session, organizations):
    created = create(client).get_json()
    acme = session.scalars(select(Organization).where(Organization.slug == "acme")).one()
    event = events.publish(
        session,
        organization_id=acme.id,
        type="plan.failed",
        subject_type="plan",
        subject_id=uuid.uuid4(),
        data={},
    )
    session.commit()
    delivery = session.scalars(select(WebhookDelivery)).one()
    path = f"/v1/webhooks/{created['id']}/deliveries"

    listed = client.get(path).get_json()["items"]
    assert [(d["id"], d["event_id"], d["status"], d["attempts"]) for d in listed] == [
        (str(delivery.id), event.id, "pending", 0)
    ]
    assert listed[0]["next_attempt_at"] is not None
    assert_problem(client.post(f"{path}/{delivery.id}/retry"), 409)  # still pending
    assert_problem(client.post(f"{path}/{uuid.uuid4()}/retry"), 404)

    session.execute(
        update(WebhookDelivery).values(
            status="failed", attempts=8, last_status_code=500, last_error="HTTP 500"
        )
    )
    session.commit()
    failed = client.get(f"{path}?status=failed").get_json()["items"][0]
    assert (failed["status"], failed["next_attempt_at"], failed["last_status_code"]) == ("failed", None, 500)
    assert client.get(f"{path}?status=pending").get_json()["items"] == []
    retried = client.post(f"{path}/{delivery.id}/retry")
    assert retried.status_code == 200
    assert (retried.get_json()["status"], retried.get_json()["attempts"]) == ("pending", 0)

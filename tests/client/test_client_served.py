"""PlannerClient's methods against the service itself, in process (the test's transaction), as
test_command_line_served.py drives `planner`: what each method sends is what the API takes, and what it
returns is what the API answered. tests/e2e/test_client.py does the same against a real server."""

from __future__ import annotations

import uuid

import pytest
import requests
from sqlalchemy import select, update

from planner_client import PlannerClient, ProblemError
from service.data.models import Organization, WebhookDelivery
from service.services import events
from service.services.catalog import load_builtin_hardware
from tests.builders import year_budget_body
from tests.client.test_command_line_served import FlaskAdapter


@pytest.fixture
def planner(app, issue_key) -> PlannerClient:
    """An admin's client, its requests answered by the app, with the organisation acme."""
    transport = requests.Session()
    transport.mount("http://", FlaskAdapter(app.test_client()))
    client = PlannerClient("http://planner.test", issue_key("admin"), session=transport, retries=0)
    client.create_organization("acme", "Acme")
    return client


def refused(status: int, call, *args, **kwargs) -> ProblemError:
    with pytest.raises(ProblemError) as raised:
        call(*args, **kwargs)
    assert raised.value.status == status, raised.value.problem
    return raised.value


# --- Webhooks ----------------------------------------------------------------------------------------------


def test_a_webhook_is_read_changed_given_a_new_secret_and_deleted(planner):
    created = planner.create_webhook(organization="acme", url="https://hooks.acme.internal/planner")
    webhook_id = created["id"]

    shown = planner.get_webhook(webhook_id)
    assert shown == {name: value for name, value in created.items() if name != "secret"}
    assert [webhook["id"] for webhook in planner.webhooks(organization="acme")] == [webhook_id]

    changed = planner.update_webhook(webhook_id, {"active": False, "description": "paused"})
    assert (changed["active"], changed["description"]) == (False, "paused")
    refused(412, planner.update_webhook, webhook_id, {"active": True}, if_match='"1"')

    rotated = planner.rotate_webhook_secret(webhook_id)
    assert rotated["secret"].startswith("whsec_")
    assert rotated["secret"] != created["secret"]
    assert rotated["previous_secret_until"] is not None
    refused(412, planner.rotate_webhook_secret, webhook_id, if_match='"1"')
    assert "secret" not in planner.get_webhook(webhook_id)

    planner.delete_webhook(webhook_id)
    refused(404, planner.get_webhook, webhook_id)
    assert list(planner.webhooks()) == []


def test_a_webhooks_deliveries_are_listed_page_by_page_and_a_failed_one_is_retried(planner, session):
    webhook_id = planner.create_webhook(organization="acme", url="https://hooks.acme.internal/planner")["id"]
    acme = session.scalars(select(Organization).where(Organization.slug == "acme")).one()
    for _ in range(3):
        events.publish(
            session,
            organization_id=acme.id,
            type="plan.failed",
            subject_type="plan",
            subject_id=uuid.uuid4(),
            data={},
        )
    session.commit()

    listed = list(planner.webhook_deliveries(webhook_id, limit=2))  # two pages
    assert len(listed) == 3
    assert {delivery["status"] for delivery in listed} == {"pending"}
    assert list(planner.webhook_deliveries(webhook_id, status="failed")) == []
    refused(409, planner.retry_webhook_delivery, webhook_id, listed[0]["id"])  # still pending

    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == uuid.UUID(listed[0]["id"]))
        .values(status="failed", attempts=8, last_status_code=500, last_error="HTTP 500")
    )
    session.commit()
    [failed] = planner.webhook_deliveries(webhook_id, status="failed")
    assert failed["id"] == listed[0]["id"]
    retried = planner.retry_webhook_delivery(webhook_id, failed["id"])
    assert (retried["id"], retried["status"], retried["attempts"]) == (failed["id"], "pending", 0)
    refused(404, planner.retry_webhook_delivery, webhook_id, str(uuid.uuid4()))


# --- What the client lacked besides webhooks ----------------------------------------------------------------


@pytest.fixture
def running_plan(planner, session) -> dict:
    """A plan of acme's on a budget, committed and started (with the built-in hardware)."""
    load_builtin_hardware(session)
    budget = planner.create_budget(**year_budget_body())
    plan = planner.create_plan(
        organization="acme",
        params=1e9,
        tokens=2e10,
        hardware="h100-sxm",
        accelerators=8,
        budget_id=budget["id"],
        start_at="2026-03-02T00:00:00Z",
    )
    planner.commit_plan(plan["id"])
    return planner.start_plan(plan["id"], started_at="2026-03-02T00:00:00Z")


def test_one_usage_record_of_a_plan_is_read_by_its_id(planner, running_plan):
    plan_id = running_plan["id"]
    reported = planner.report_usage(
        plan_id,
        reporter="slurm",
        period_start="2026-03-02T00:00:00Z",
        period_end="2026-03-02T06:00:00Z",
        accelerator_hours=48,
    )
    assert planner.get_usage_record(plan_id, reported["id"]) == reported
    reversal = planner.reverse_usage(plan_id, reported["id"], note="double-counted")
    assert planner.get_usage_record(plan_id, reversal["id"]) == reversal
    refused(404, planner.get_usage_record, plan_id, str(uuid.uuid4()))


def test_one_event_of_the_feed_is_read_by_its_id(planner, running_plan):
    feed = planner.events(type="plan.started")
    [started] = feed["items"]
    assert started["subject"] == {"type": "plan", "id": running_plan["id"]}
    assert planner.get_event(started["id"]) == started
    refused(404, planner.get_event, started["id"] + 1000)


def test_grid_intensities_are_every_region_the_service_knows(planner):
    regions = list(planner.grid_intensities())
    assert len(regions) > 10
    assert [region["region"] for region in regions] == sorted(region["region"] for region in regions)
    assert all(region["grid_intensity_g_per_kwh"] > 0 for region in regions)


def test_metrics_are_the_prometheus_text_the_scraper_reads(planner):
    planner.create_organization("globex", "Globex")
    exposition = planner.metrics()
    assert "# TYPE planner_plans_created_total counter" in exposition
    assert 'route="/v1/organizations"' in exposition

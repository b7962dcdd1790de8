"""Approval before large commitments: a budget's approval_above makes a commit wait for a finance or admin
key; nothing is reserved until it is approved; every transition is an event (and a webhook delivery); retries
are safe; an approval the budget can no longer hold is refused and leaves the plan pending."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from sqlalchemy import select

from service.data.models import Budget, LedgerEntry, WebhookDelivery
from tests.api.test_plans import create_plan, idempotency, make_budget, transition
from tests.api.test_plans import world as world  # noqa: PLC0414 -- the fixture, re-exported
from tests.conftest import bearer
from tests.problems import assert_problem as problem_of

pytestmark = pytest.mark.usefixtures("world")


def decide(client, plan_id: str, action: str, key: str | None = None, note: str | None = None, **headers):
    if key is not None:
        headers.update(bearer(key))
    body = {} if note is None else {"note": note}
    return client.post(f"/v1/plans/{plan_id}/{action}", json=body, headers=headers)


def assert_problem(response, status: int, **members) -> dict:
    """A problem with this status, with these members (`field`: the pointer of one of its errors)."""
    body = problem_of(response, status)
    for name, value in members.items():
        if name == "field":
            assert f"#/{value}" in [error["pointer"] for error in body["errors"]], body
        else:
            assert body[name] == value, body
    return body


def ledger(session, budget_id: str) -> list[LedgerEntry]:
    session.expire_all()
    return list(session.scalars(select(LedgerEntry).where(LedgerEntry.budget_id == uuid.UUID(budget_id))))


def committed(client, budget_id: str) -> str:
    return client.get(f"/v1/budgets/{budget_id}").get_json()["committed"]


def events_of(client, plan_id: str) -> list[dict]:
    return client.get("/v1/events", query_string={"subject_id": plan_id}).get_json()["items"]


def pending_plan(client, **budget) -> tuple[dict, dict]:
    """A budget asking approval above 400.00 USD, and a 500.00 USD plan its commit made pending."""
    charged = make_budget(client, approval_above="400.00", **budget)
    plan = create_plan(client, budget_id=charged["id"])
    response = transition(client, plan["id"], "commit")
    assert response.status_code == 202, response.get_json()
    return charged, response.get_json()


def test_a_plan_under_the_threshold_commits_at_once(client, session):
    charged = make_budget(client, approval_above="500.00")
    plan = create_plan(client, budget_id=charged["id"])  # 500.00 USD: not above

    response = transition(client, plan["id"], "commit")

    assert response.status_code == 200, response.get_json()
    assert (response.get_json()["status"], response.get_json()["approval"]) == ("committed", None)
    assert committed(client, charged["id"]) == "500.00"


def test_a_plan_above_it_waits_for_approval_and_reserves_nothing(client, session):
    charged = make_budget(client, approval_above="400.00")
    plan = create_plan(client, budget_id=charged["id"])

    response = transition(client, plan["id"], "commit", **{"X-Request-ID": "ask-1"}, **idempotency("ask"))
    retried = transition(client, plan["id"], "commit", **idempotency("ask"))

    assert response.status_code == 202, response.get_json()
    assert (retried.status_code, retried.get_json()) == (202, response.get_json())
    body = response.get_json()
    assert body["status"] == "pending_approval"
    assert body["committed_at"] is None
    assert body["approval"]["decision"] is None
    assert body["approval"]["requested_at"] is not None
    assert response.headers["ETag"] == '"2"'
    assert committed(client, charged["id"]) == "0.00"
    assert ledger(session, charged["id"]) == []
    [event] = events_of(client, plan["id"])
    assert event["type"] == "plan.approval_requested"
    assert event["data"] | {"requested_by": None} == {
        "plan_id": plan["id"],
        "name": None,
        "budget_id": charged["id"],
        "cost": "500.00",
        "currency": "USD",
        "approval_above": "400.00",
        "requested_by": None,
    }
    # Pending plans are money asked for, not committed: reports and utilisation leave them out.
    usage = client.get(f"/v1/budgets/{charged['id']}/utilization").get_json()
    assert usage["committed"] == "0.00"


def test_finance_approves_it_and_the_ledger_reserves_it_then(client, session, issue_key):
    charged, plan = pending_plan(client)
    finance = issue_key("finance", "acme")
    hook = client.post("/v1/webhooks", json={"organization": "acme", "url": "https://hooks.acme.test/in"})
    assert hook.status_code == 201

    response = decide(client, plan["id"], "approve", finance, note="On the roadmap.")

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["status"] == "committed"
    assert body["committed_at"] is not None
    approval = body["approval"]
    assert (approval["decision"], approval["note"]) == ("approved", "On the roadmap.")
    assert approval["decided_by"] == finance.split("_")[1]
    assert committed(client, charged["id"]) == "500.00"
    [entry] = ledger(session, charged["id"])
    assert (entry.entry, entry.amount) == ("commit", Decimal("500.00"))
    types = [event["type"] for event in events_of(client, plan["id"])]
    assert types == ["plan.approval_requested", "plan.approved"]
    delivered = session.scalars(select(WebhookDelivery.event_id)).all()
    assert len(delivered) == 1  # the webhook came after the request: it hears of the approval only
    # The approved plan is an ordinary committed plan: it may be cancelled, which releases it.
    assert transition(client, plan["id"], "cancel").status_code == 200
    assert committed(client, charged["id"]) == "0.00"


def test_a_rejection_says_why_and_reserves_nothing(client, session, issue_key):
    charged, plan = pending_plan(client)
    finance = issue_key("finance", "acme")

    assert_problem(decide(client, plan["id"], "reject", finance), 422, field="note")
    response = decide(client, plan["id"], "reject", finance, note="Over the quarter's plan.")

    assert response.status_code == 200, response.get_json()
    assert response.get_json()["status"] == "rejected"
    assert response.get_json()["approval"]["decision"] == "rejected"
    assert committed(client, charged["id"]) == "0.00"
    assert ledger(session, charged["id"]) == []
    [_, rejected] = events_of(client, plan["id"])
    assert (rejected["type"], rejected["data"]["note"]) == ("plan.rejected", "Over the quarter's plan.")
    late = decide(client, plan["id"], "approve", finance)
    assert_problem(late, 409, plan_status="rejected")
    assert "The plan is rejected; it cannot be approved." in late.get_json()["detail"]


def test_only_finance_or_admin_decides(client, issue_key):
    _, plan = pending_plan(client)
    planner, viewer = issue_key("planner", "acme"), issue_key("viewer", "acme")
    for key in (planner, viewer):
        assert_problem(decide(client, plan["id"], "approve", key), 403)
        assert_problem(decide(client, plan["id"], "reject", key, note="no"), 403)
    outsider = issue_key("finance", "globex")
    assert_problem(decide(client, plan["id"], "approve", outsider), 404)
    assert decide(client, plan["id"], "approve").status_code == 200  # the test client's admin key


def test_an_approval_retried_with_its_key_is_answered_once(client, session):
    charged, plan = pending_plan(client)

    first = decide(client, plan["id"], "approve", **idempotency("approve-1"))
    again = decide(client, plan["id"], "approve", **idempotency("approve-1"))
    unkeyed = decide(client, plan["id"], "approve")

    assert (first.status_code, again.status_code) == (200, 200)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()
    assert_problem(unkeyed, 409, plan_status="committed")
    assert len(ledger(session, charged["id"])) == 1
    assert committed(client, charged["id"]) == "500.00"


def test_an_approval_the_budget_can_no_longer_hold_is_refused_and_the_plan_stays_pending(client, session):
    charged, plan = pending_plan(client)
    # Meanwhile the budget shrank below the plan: the approval is refused cleanly, nothing written.
    etag = client.get(f"/v1/budgets/{charged['id']}").headers["ETag"]
    path = f"/v1/budgets/{charged['id']}"
    shrunk = client.patch(path, json={"amount": "450.00"}, headers={"If-Match": etag})
    assert shrunk.status_code == 200, shrunk.get_json()

    refused = decide(client, plan["id"], "approve")

    assert_problem(refused, 409, limit="amount")
    assert client.get(f"/v1/plans/{plan['id']}").get_json()["status"] == "pending_approval"
    assert ledger(session, charged["id"]) == []
    assert [event["type"] for event in events_of(client, plan["id"])] == ["plan.approval_requested"]
    # Restored, the same approval goes through.
    etag = client.get(f"/v1/budgets/{charged['id']}").headers["ETag"]
    client.patch(f"/v1/budgets/{charged['id']}", json={"amount": "1000.00"}, headers={"If-Match": etag})
    assert decide(client, plan["id"], "approve").status_code == 200


def test_a_commit_the_budget_could_not_hold_is_refused_at_once_not_left_pending(client, session):
    charged = make_budget(client, amount="450.00", approval_above="400.00")
    plan = create_plan(client, budget_id=charged["id"])

    assert_problem(transition(client, plan["id"], "commit"), 409, limit="amount")
    assert client.get(f"/v1/plans/{plan['id']}").get_json()["status"] == "draft"
    assert events_of(client, plan["id"]) == []


def test_a_pending_plan_may_be_cancelled_and_is_no_longer_decided(client, session):
    charged, plan = pending_plan(client)

    cancelled = transition(client, plan["id"], "cancel")

    assert cancelled.status_code == 200, cancelled.get_json()
    assert cancelled.get_json()["status"] == "cancelled"
    assert ledger(session, charged["id"]) == []
    assert_problem(decide(client, plan["id"], "approve"), 409, plan_status="cancelled")


def test_a_budget_that_starts_asking_for_approval_mid_commit_refuses_the_commit(client, session, monkeypatch):
    """The commit read no threshold, and the budget set one before the reservation: the reservation's
    conditional UPDATE refuses it (limit approval), and committing again asks for approval."""
    charged = make_budget(client)
    plan = create_plan(client, budget_id=charged["id"])
    session.execute(
        Budget.__table__.update()
        .where(Budget.id == uuid.UUID(charged["id"]))
        .values(approval_above=Decimal("100.00"))
    )
    session.commit()
    from service.services import plans as service_plans  # noqa: PLC0415 -- the seam patched below

    monkeypatch.setattr(service_plans, "_approval_threshold", lambda session, plan: None)
    refused = transition(client, plan["id"], "commit")
    assert_problem(refused, 409, limit="approval")
    assert ledger(session, charged["id"]) == []
    monkeypatch.undo()
    assert transition(client, plan["id"], "commit").status_code == 202


def test_the_threshold_is_part_of_the_budget(client):
    charged = make_budget(client, approval_above="0")
    assert charged["approval_above"] == "0.00"
    etag = client.get(f"/v1/budgets/{charged['id']}").headers["ETag"]
    cleared = client.patch(
        f"/v1/budgets/{charged['id']}", json={"approval_above": None}, headers={"If-Match": etag}
    )
    assert cleared.get_json()["approval_above"] is None
    assert_problem(make_budget_response(client, approval_above="-1"), 422, field="approval_above")
    assert_problem(make_budget_response(client, approval_above=5), 422, field="approval_above")


def make_budget_response(client, **overrides):
    body = {
        "organization": "acme",
        "name": "Q1",
        "amount": "1000.00",
        "currency": "USD",
        "period_start": "2027-01-01T00:00:00Z",
        "period_end": "2027-04-01T00:00:00Z",
        **overrides,
    }
    return client.post("/v1/budgets", json=body)

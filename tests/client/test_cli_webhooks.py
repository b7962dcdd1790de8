"""`planner webhook`: every webhook operation of the API from the command line, against the service in
process."""

from __future__ import annotations

import json
import uuid

from planner_client import cli
from service.data.models.events import WebhookDelivery
from tests.builders import year_budget_body
from tests.client.test_command_line_served import served as served  # noqa: PLC0414 -- the fixture

URL = "https://hooks.acme.example/planner"


def answer(capsys, *argv: str):
    assert cli.main(["--json", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def created(capsys, *options: str) -> dict:
    return answer(capsys, "webhook", "create", "--organization=acme", f"--url={URL}", *options)


def test_a_webhook_is_made_with_its_secret_shown_once_and_listed_without_it(served, capsys):
    made = created(capsys, "--event-type=plan.failed", "--event-type=plan.completed", "--description=ops")

    assert made["secret"].startswith("whsec_")
    assert (made["url"], made["active"]) == (URL, True)
    assert sorted(made["event_types"]) == ["plan.completed", "plan.failed"]
    assert cli.main(["webhook", "create", "--organization=acme", f"--url={URL}", "--get=secret"]) == 0
    assert capsys.readouterr().out.strip().startswith("whsec_")  # the secret alone, for a script to keep
    listed = answer(capsys, "webhook", "list", "--organization=acme")
    assert made["id"] in [webhook["id"] for webhook in listed]
    assert not any("secret" in webhook for webhook in listed)
    assert "secret" not in answer(capsys, "webhook", "show", made["id"])


def test_a_webhook_made_inactive_waits(served, capsys):
    assert created(capsys, "--inactive")["active"] is False


def test_update_changes_only_what_it_is_given(served, capsys):
    made = created(capsys, "--event-type=plan.failed", "--description=ops")

    moved = answer(
        capsys, "webhook", "update", made["id"], "--url=https://hooks.acme.example/v2", "--inactive"
    )
    every = answer(capsys, "webhook", "update", made["id"], "--every-event-type", "--description=")

    assert (moved["url"], moved["active"], moved["event_types"]) == (
        "https://hooks.acme.example/v2",
        False,
        ["plan.failed"],
    )
    assert (every["event_types"], every["description"], every["active"]) == ([], None, False)


def test_an_update_with_nothing_or_both_kinds_of_event_types_is_a_usage_error(served, capsys):
    made = created(capsys)

    assert cli.main(["webhook", "update", made["id"]]) == 2
    assert "nothing to change" in capsys.readouterr().err
    both = ["webhook", "update", made["id"], "--event-type=plan.failed", "--every-event-type"]
    assert cli.main(both) == 2
    assert "give one" in capsys.readouterr().err


def test_rotating_the_secret_shows_the_new_one_and_until_when_the_old_one_signs_too(served, capsys):
    made = created(capsys)

    rotated = answer(capsys, "webhook", "rotate-secret", made["id"])

    assert rotated["secret"].startswith("whsec_")
    assert rotated["secret"] != made["secret"]
    assert rotated["previous_secret_until"] is not None


def test_deliveries_are_listed_and_only_a_failed_one_is_sent_again(served, capsys, client, session):
    made = created(capsys, "--event-type=plan.started")
    budget = client.post(
        "/v1/budgets", json={**year_budget_body("acme"), "period_end": "2028-01-01T00:00:00Z"}
    )
    plan = ["plan", "create", "--organization=acme", f"--budget-id={budget.get_json()['id']}", "--params=1e9"]
    plan_id = answer(capsys, *plan, "--tokens=2e10", "--hardware=h100-sxm", "--accelerators=8")["id"]
    answer(capsys, "plan", "commit", plan_id)
    answer(capsys, "plan", "start", plan_id)  # the event the webhook receives

    [pending] = answer(capsys, "webhook", "deliveries", made["id"])
    redeliver = ["webhook", "redeliver", made["id"], pending["id"]]
    assert pending["status"] == "pending"
    assert cli.main(redeliver) == cli.EXIT_CONFLICT  # only a failed one
    assert capsys.readouterr().err.startswith("planner: webhook redeliver: ")
    delivery = session.get(WebhookDelivery, uuid.UUID(pending["id"]))
    delivery.status, delivery.attempts, delivery.last_error = (
        "failed",
        8,
        "connection refused",
    )  # as the sender
    session.commit()  # leaves one that never got through

    assert answer(capsys, "webhook", "deliveries", made["id"], "--status=failed") == [
        {
            **pending,
            "status": "failed",
            "attempts": 8,
            "last_error": "connection refused",
            "next_attempt_at": None,
        }
    ]
    assert answer(capsys, *redeliver)["status"] == "pending"


def test_a_deleted_webhook_is_not_found(served, capsys):
    made = created(capsys)

    assert cli.main(["webhook", "delete", made["id"]]) == 0
    assert capsys.readouterr().out == f"deleted {made['id']}\n"

    assert cli.main(["webhook", "show", made["id"]]) == cli.EXIT_NOT_FOUND
    assert capsys.readouterr().err == f"planner: webhook {made['id']}: not found (404)\n"

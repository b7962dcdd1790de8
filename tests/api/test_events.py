"""The events feed: oldest first, resumed from a cursor that every page carries, scoped to the caller's
organisation."""

from __future__ import annotations

import base64
import json
import re
import uuid

import pytest
from sqlalchemy import select

from service.data.models import Organization
from service.services import events
from service.services.feed import FEED_CURSOR_PATTERN, FeedCursor
from tests.conftest import bearer
from tests.problems import assert_problem


@pytest.fixture
def organizations(session) -> dict[str, uuid.UUID]:
    for slug in ("acme", "globex"):
        session.add(Organization(slug=slug, name=slug.title()))
    session.commit()
    return {o.slug: o.id for o in session.scalars(select(Organization))}


@pytest.fixture
def publish(session, organizations):
    """publish("plan.started", organization="acme", subject_id=...) -> the event's id, committed."""

    def make(type_: str = "plan.started", *, organization: str = "acme", subject_id=None, **data) -> int:
        event = events.publish(
            session,
            organization_id=organizations[organization],
            type=type_,
            subject_type="budget" if type_.startswith("budget.") else "plan",
            subject_id=subject_id or uuid.uuid4(),
            data=data,
        )
        session.commit()
        assert event is not None
        return event.id

    return make


def test_an_event_is_shown_with_its_subject_organisation_and_data(client, publish):
    plan_id = uuid.uuid4()
    event_id = publish("plan.completed", subject_id=plan_id, cost="1000.00", currency="USD")

    page = client.get("/v1/events").get_json()

    assert page["items"] == [
        {
            "id": event_id,
            "type": "plan.completed",
            "subject": {"type": "plan", "id": str(plan_id)},
            "organization": "acme",
            "data": {"cost": "1000.00", "currency": "USD"},
            "created_at": page["items"][0]["created_at"],
        }
    ]
    assert page["has_more"] is False
    assert client.get(f"/v1/events/{event_id}").get_json() == page["items"][0]


def test_the_feed_is_oldest_first_and_resumes_after_the_cursor_of_the_last_page(client, publish):
    ids = [publish() for _ in range(5)]

    first = client.get("/v1/events?limit=2")
    assert [e["id"] for e in first.get_json()["items"]] == ids[:2]
    assert first.get_json()["has_more"] is True
    assert first.headers["Link"].startswith("</v1/events?limit=2&cursor=")
    second = client.get("/v1/events", query_string={"limit": 2, "cursor": first.get_json()["next_cursor"]})
    third = client.get("/v1/events", query_string={"limit": 2, "cursor": second.get_json()["next_cursor"]})

    assert [e["id"] for e in second.get_json()["items"]] == ids[2:4]
    assert [e["id"] for e in third.get_json()["items"]] == ids[4:]
    assert third.get_json()["has_more"] is False
    assert "Link" not in third.headers  # nothing more now; the cursor is for later


def test_an_empty_page_still_gives_a_cursor_from_which_later_events_arrive(client, publish):
    empty = client.get("/v1/events").get_json()
    assert (empty["items"], empty["has_more"]) == ([], False)
    assert FeedCursor.decode(empty["next_cursor"]) == FeedCursor(0)

    seen = publish()
    caught_up = client.get("/v1/events", query_string={"cursor": empty["next_cursor"]}).get_json()
    assert [e["id"] for e in caught_up["items"]] == [seen]
    nothing_new = client.get("/v1/events", query_string={"cursor": caught_up["next_cursor"]}).get_json()
    assert (nothing_new["items"], nothing_new["next_cursor"]) == ([], caught_up["next_cursor"])

    later = publish("plan.failed")
    resumed = client.get("/v1/events", query_string={"cursor": nothing_new["next_cursor"]}).get_json()
    assert [e["id"] for e in resumed["items"]] == [later]


def test_a_filtered_poll_moves_its_cursor_past_the_events_it_left_out(client, publish):
    wanted = publish("plan.failed")
    for _ in range(3):
        publish("plan.started")

    page = client.get("/v1/events?type=plan.failed").get_json()

    assert [e["id"] for e in page["items"]] == [wanted]
    # Up to the last event visible, not just the last one shown: the next poll does not scan them again.
    assert FeedCursor.decode(page["next_cursor"]).after_id == wanted + 3


def test_types_and_subject_filter_the_feed(client, publish):
    budget = uuid.uuid4()
    crossed = publish("budget.threshold_crossed", subject_id=budget, threshold=0.8)
    publish("budget.threshold_crossed")
    failed = publish("plan.failed")
    publish("plan.started")

    by_type = client.get("/v1/events?type=budget.threshold_crossed,plan.failed&limit=10").get_json()
    by_subject = client.get(f"/v1/events?subject_id={budget}").get_json()

    assert [e["id"] for e in by_type["items"]] == [crossed, crossed + 1, failed]
    assert [e["id"] for e in by_subject["items"]] == [crossed]


def test_callers_see_their_own_organisations_events_only(client, issue_key, publish):
    ours = publish(organization="acme")
    theirs = publish(organization="globex")
    viewer = bearer(issue_key("viewer", "acme"))

    assert [e["id"] for e in client.get("/v1/events", headers=viewer).get_json()["items"]] == [ours]
    assert client.get("/v1/events?organization=globex", headers=viewer).get_json()["items"] == []
    assert_problem(client.get(f"/v1/events/{theirs}", headers=viewer), 404)
    # Admins see every organisation's, and may pick one.
    assert [e["id"] for e in client.get("/v1/events").get_json()["items"]] == [ours, theirs]
    assert [e["id"] for e in client.get("/v1/events?organization=globex").get_json()["items"]] == [theirs]


@pytest.mark.parametrize(
    ("query", "parameter", "detail"),
    [
        ("type=plan.exploded", "type", "Unknown event type 'plan.exploded'"),
        ("limit=101", "limit", "Must be greater than or equal to 1 and less than or equal to 100."),
        ("cursor=bm90IGpzb24", "cursor", "Not a valid cursor."),
        ("subject_id=", "subject_id", "Length must be between 1 and 100."),
        ("after=3", "after", "Unknown field."),
    ],
)
def test_a_bad_query_is_a_422_naming_the_parameter(client, organizations, query, parameter, detail):
    body = assert_problem(client.get(f"/v1/events?{query}"), 422)
    assert [error["parameter"] for error in body["errors"]] == [parameter]
    assert body["errors"][0]["detail"].startswith(detail)


def test_the_feeds_cursor_is_the_event_id_it_stands_after_and_its_earlier_form_is_still_read(client, publish):
    ids = [publish() for _ in range(3)]
    first = client.get("/v1/events?limit=1").get_json()
    # Pollers that stored a cursor of the earlier form (tagged JSON in base64url) resume from it.
    earlier = base64.urlsafe_b64encode(json.dumps(["events", ids[0]]).encode()).decode().rstrip("=")

    from_zero = client.get("/v1/events", query_string={"cursor": "0"}).get_json()
    resumed = client.get("/v1/events", query_string={"cursor": first["next_cursor"]}).get_json()
    from_earlier = client.get("/v1/events", query_string={"cursor": earlier}).get_json()

    assert first["next_cursor"] == str(ids[0])
    assert re.fullmatch(FEED_CURSOR_PATTERN, first["next_cursor"])
    assert [event["id"] for event in from_zero["items"]] == ids
    assert [event["id"] for event in resumed["items"]] == ids[1:]
    assert from_earlier == resumed


def test_another_lists_cursor_is_not_taken_for_the_feeds(client, organizations):
    other = client.get("/v1/organizations?limit=1").get_json()["next_cursor"]
    assert other is not None
    assert_problem(client.get("/v1/events", query_string={"cursor": other}), 422)


def test_an_event_that_does_not_exist_is_a_404(client, organizations):
    assert_problem(client.get("/v1/events/12345"), 404)
    assert_problem(client.get(f"/v1/events/{2**70}"), 404)

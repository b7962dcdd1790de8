"""Webhook deliveries sent to a real HTTP receiver on this machine: signed as Standard Webhooks says (checked
here by a verifier of the test's own), retried with the same webhook-id until the receiver answers 2xx, given
up after the last attempt, never redirected, and claimed by one sender at a time."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import select

from service import create_app
from service.data.models import Organization, Webhook, WebhookDelivery, utcnow
from service.infra.config import Config
from service.infra.db import get_db
from service.infra.egress import Policy
from service.services import events
from service.services.webhooks import new_secret
from service.workers.webhook_sender import (
    EXTENSION_KEY,
    NO_ANSWER,
    POLL_SECONDS,
    Sender,
    Settings,
    claim_next,
    deliver_due,
)
from tests.conftest import LOOPBACK, migrated

# One delivery at a time, in the test's thread: the test's app works on one database connection.
SETTINGS = Settings(
    timeout_seconds=5, max_attempts=3, egress=Policy.allowing(LOOPBACK.split(",")), concurrency=1
)
LATER = timedelta(days=2)  # beyond any retry delay, jitter included


class Receiver:
    """An HTTP endpoint that answers each POST with the next of `answers` (the last one again once they run
    out) and keeps what it received."""

    def __init__(self) -> None:
        self.answers: list[int] = [204]
        self.received: list[tuple[dict[str, str], str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.answers.pop(0) if len(receiver.answers) > 1 else receiver.answers[0]
                self.send_response(status)
                if status in (301, 302, 307):
                    self.send_header("Location", f"{receiver.url}/elsewhere")
                self.send_header("Content-Length", "4")
                self.end_headers()
                self.wfile.write(b"nope")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


@pytest.fixture
def acme(client, session) -> uuid.UUID:
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    return session.scalars(select(Organization.id).where(Organization.slug == "acme")).one()


@pytest.fixture
def webhook(client, acme, receiver) -> dict:
    response = client.post("/v1/webhooks", json={"organization": "acme", "url": f"{receiver.url}/hooks"})
    assert response.status_code == 201
    return response.get_json()


@pytest.fixture
def publish(session, acme):
    def make(type_: str = "plan.failed") -> int:
        event = events.publish(
            session,
            organization_id=acme,
            type=type_,
            subject_type="plan",
            subject_id=uuid.uuid4(),
            data={"reason": "node failure"},
        )
        session.commit()
        assert event is not None
        return event.id

    return make


def verified(secret: str, headers: dict[str, str], body: str) -> bool:
    """The receiver's check, as the Standard Webhooks specification describes it."""
    key = base64.b64decode(secret.split("_", 1)[1])
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.{body}".encode()
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return any(
        version == "v1" and hmac.compare_digest(signature, expected)
        for version, _, signature in (part.partition(",") for part in headers["webhook-signature"].split())
    )


def delivery(session) -> WebhookDelivery:
    return session.scalars(select(WebhookDelivery).execution_options(populate_existing=True)).one()


def test_an_event_is_posted_signed_with_the_event_as_the_feed_shows_it(
    client, app, session, webhook, receiver, publish
):
    event_id = publish()
    now = utcnow()

    assert deliver_due(get_db(app), now=now, settings=SETTINGS) == 1

    [(headers, body)] = receiver.received
    assert verified(webhook["secret"], headers, body)
    assert not verified("whsec_" + base64.b64encode(b"x" * 32).decode(), headers, body)
    assert json.loads(body) == client.get(f"/v1/events/{event_id}").get_json()
    assert headers["content-type"] == "application/json"
    assert int(headers["webhook-timestamp"]) == int(now.timestamp())
    sent = delivery(session)
    assert headers["webhook-id"] == str(sent.id)
    assert (sent.status, sent.attempts, sent.last_status_code, sent.delivered_at) == (
        "delivered",
        1,
        204,
        now,
    )
    assert deliver_due(get_db(app), now=now + LATER, settings=SETTINGS) == 0  # delivered once


def test_a_failed_attempt_is_retried_later_with_the_same_webhook_id(app, session, webhook, receiver, publish):
    receiver.answers = [500, 200]
    publish()
    now = utcnow()

    assert deliver_due(get_db(app), now=now, settings=SETTINGS) == 1
    waiting = delivery(session)
    assert (waiting.status, waiting.attempts, waiting.last_status_code) == ("pending", 1, 500)
    assert waiting.last_error == "HTTP 500"  # the receiver's answer ("nope") is never kept
    assert timedelta(seconds=24) <= waiting.next_attempt_at - now <= timedelta(seconds=36)  # 30 s, +-20%
    assert deliver_due(get_db(app), now=now + timedelta(seconds=10), settings=SETTINGS) == 0  # not due yet

    assert deliver_due(get_db(app), now=now + LATER, settings=SETTINGS) == 1

    first, second = (headers for headers, _ in receiver.received)
    assert first["webhook-id"] == second["webhook-id"]
    assert all(verified(webhook["secret"], headers, body) for headers, body in receiver.received)
    assert (delivery(session).status, delivery(session).attempts) == ("delivered", 2)


def test_a_delivery_fails_after_its_last_attempt(client, app, session, webhook, receiver, publish):
    receiver.answers = [503]
    publish()
    now = utcnow()

    for round_ in range(SETTINGS.max_attempts + 1):
        deliver_due(get_db(app), now=now + round_ * LATER, settings=SETTINGS)

    assert len(receiver.received) == SETTINGS.max_attempts
    failed = delivery(session)
    assert (failed.status, failed.attempts, failed.last_status_code) == ("failed", 3, 503)
    listed = client.get(f"/v1/webhooks/{webhook['id']}/deliveries").get_json()["items"][0]
    assert (listed["status"], listed["last_error"]) == ("failed", "HTTP 503")

    assert client.post(f"/v1/webhooks/{webhook['id']}/deliveries/{failed.id}/retry").status_code == 200
    receiver.answers = [200]
    assert deliver_due(get_db(app), now=utcnow(), settings=SETTINGS) == 1
    assert delivery(session).status == "delivered"
    assert len({headers["webhook-id"] for headers, _ in receiver.received}) == 1


def test_a_redirect_is_a_failure_and_is_not_followed(app, session, webhook, receiver, publish):
    receiver.answers = [302]
    publish()

    deliver_due(get_db(app), now=utcnow(), settings=SETTINGS)

    assert len(receiver.received) == 1  # /elsewhere was never asked
    redirected = delivery(session)
    assert (redirected.status, redirected.last_status_code) == ("pending", 302)
    assert "redirects are not followed" in redirected.last_error


def test_an_unreachable_receiver_is_recorded_and_retried(client, app, session, acme, publish):
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()  # nothing listens there now
    client.post("/v1/webhooks", json={"organization": "acme", "url": f"http://127.0.0.1:{port}/"})
    publish()

    assert deliver_due(get_db(app), now=utcnow(), settings=SETTINGS) == 1

    unreachable = delivery(session)
    assert (unreachable.status, unreachable.attempts, unreachable.last_status_code) == ("pending", 1, None)
    assert unreachable.last_error == NO_ANSWER  # not "refused": no port scanner


def test_a_webhook_receives_only_the_types_it_asked_for(client, app, session, acme, receiver, publish):
    client.post(
        "/v1/webhooks",
        json={"organization": "acme", "url": receiver.url, "event_types": ["plan.completed"]},
    )
    publish("plan.started")
    completed = publish("plan.completed")

    deliver_due(get_db(app), now=utcnow(), settings=SETTINGS)

    assert [json.loads(body)["id"] for _, body in receiver.received] == [completed]


def test_an_inactive_webhooks_deliveries_wait_until_it_is_active_again(
    client, app, webhook, receiver, publish
):
    publish()
    path = f"/v1/webhooks/{webhook['id']}"
    client.patch(path, json={"active": False}, headers={"If-Match": '"1"'})

    assert deliver_due(get_db(app), now=utcnow(), settings=SETTINGS) == 0
    client.patch(path, json={"active": True}, headers={"If-Match": '"2"'})
    assert deliver_due(get_db(app), now=utcnow(), settings=SETTINGS) == 1
    assert len(receiver.received) == 1


def test_a_claimed_attempt_is_no_other_senders_until_its_lease_runs_out(app, session, webhook, publish):
    publish()
    now = utcnow()

    first = claim_next(get_db(app), now, SETTINGS)
    assert first is not None
    assert claim_next(get_db(app), now, SETTINGS) is None  # another sender, meanwhile
    # The first sender died after its POST, before recording it: once its lease has run out the delivery is
    # sent again, as the same delivery (webhook-id), the attempt counted.
    again = claim_next(get_db(app), now + SETTINGS.lease, SETTINGS)
    assert again is not None
    assert (again.delivery_id, again.number, again.body) == (first.delivery_id, 2, first.body)


def test_the_in_process_sender_posts_an_event_as_soon_as_it_is_committed(empty_database_url, receiver):
    """On a database of its own: the sender's thread and the test commit for real, as processes do."""
    app = create_app(Config(database_url=migrated(empty_database_url), testing=True))
    sender = app.extensions[EXTENSION_KEY] = Sender(get_db(app), SETTINGS)
    try:
        with app.app_context(), get_db(app).sessionmaker() as session:
            acme = Organization(slug="acme", name="Acme")
            session.add(acme)
            session.add(Webhook(organization=acme, url=receiver.url, secret=new_secret(), created_by="test"))
            session.commit()
            events.publish(
                session,
                organization_id=acme.id,
                type="plan.started",
                subject_type="plan",
                subject_id="p",
                data={},
            )
            session.commit()  # wakes the sender: no poll is due for another 5 s

        deadline = time.monotonic() + POLL_SECONDS / 2
        while not receiver.received and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(receiver.received) == 1
    finally:
        sender.stop()
        get_db(app).engine.dispose()

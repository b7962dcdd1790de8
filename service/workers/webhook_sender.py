"""Sending webhook deliveries: at least once, signed as Standard Webhooks says, retried with backoff.

A sender claims a due delivery with a conditional UPDATE that counts the attempt and pushes
`next_attempt_at` a lease ahead, so that no other sender (thread, process or host) takes the same attempt;
it commits the claim, POSTs, then records the outcome only if the delivery still carries its attempt. A
sender that dies between the POST and the record leaves the claim to run out: the delivery is sent again,
with the same `webhook-id`, and receivers drop what they have seen (at least once, never exactly once).

Each app process runs a sender thread, started with the first request it serves (after gunicorn forked it),
which looks for due deliveries every POLL_SECONDS and at once when a transaction that queued one commits;
`flask --app service webhooks work` runs one in the foreground. Tests call `deliver_due`.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import flask
from sqlalchemy import ColumnElement, select, update

from service.data.models import Event, Organization, Webhook, WebhookDelivery, utcnow
from service.infra import background
from service.infra.background import Periodic, started_by_requests, wake_after_response
from service.infra.db import Database, get_db
from service.schemas.events import EventSchema
from service.services import webhooks
from service.services.feed import FeedEvent

log = logging.getLogger(__name__)

# After attempt n fails, attempt n + 1 waits RETRY_DELAYS_SECONDS[n - 1] (the last one again beyond them),
# give or take a fifth so that deliveries failed together do not return together: with the default 8
# attempts the last is about 22 hours after the first, a day's outage of the receiver.
RETRY_DELAYS_SECONDS = (30, 120, 600, 3600, 3 * 3600, 6 * 3600, 12 * 3600)
JITTER = 0.2
POLL_SECONDS = 5.0
PAUSE_AFTER_ERROR_SECONDS = 60.0
CLAIM_BATCH = 10
# What is kept of a receiver's answer or of an error, for GET .../deliveries.
ERROR_CHARACTERS = 300
USER_AGENT = "compute-planner-webhooks/1"
EXTENSION_KEY = background.WEBHOOK_SENDER


@dataclass(frozen=True)
class Settings:
    timeout_seconds: float = 10.0
    max_attempts: int = 8

    @property
    def lease(self) -> timedelta:
        """How long a claim holds: well beyond one POST's timeout (which bounds each wait, not the sum)."""
        return timedelta(seconds=6 * self.timeout_seconds)


@dataclass(frozen=True)
class Attempt:
    """A claimed attempt: what to send where, and which attempt it is."""

    delivery_id: uuid.UUID
    number: int
    url: str
    secret: str
    body: str


def retry_delay(attempt: int, rng: random.Random | None = None) -> timedelta:
    base = RETRY_DELAYS_SECONDS[min(attempt, len(RETRY_DELAYS_SECONDS)) - 1]
    return timedelta(seconds=base * (1 + JITTER * (2 * (rng or random).random() - 1)))


def event_body(event_row: Event, organization_slug: str) -> str:
    """The event as GET /v1/events shows it: the body of every attempt, and what is signed."""
    shown = FeedEvent.of(event_row, organization_slug)
    return json.dumps(EventSchema().dump(shown), separators=(",", ":"))


def _due(now: datetime) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    return (WebhookDelivery.status == "pending", WebhookDelivery.next_attempt_at <= now)


def claim_next(database: Database, now: datetime, settings: Settings) -> Attempt | None:
    """Claim the delivery due longest (of an active webhook), or None when none is due."""
    # A look first, which on SQLite takes no write lock: most polls find nothing.
    with database.read_sessionmaker() as session:
        candidates = session.scalars(
            select(WebhookDelivery.id)
            .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
            .where(*_due(now), Webhook.active.is_(True))
            .order_by(WebhookDelivery.next_attempt_at)
            .limit(CLAIM_BATCH)
        ).all()
    if not candidates:
        return None
    with database.sessionmaker() as session:
        for delivery_id in candidates:
            number = session.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.id == delivery_id, *_due(now))
                .values(attempts=WebhookDelivery.attempts + 1, next_attempt_at=now + settings.lease)
                .returning(WebhookDelivery.attempts)
            ).scalar()
            if number is None:  # another sender was quicker
                continue
            url, secret, event_row, slug = session.execute(
                select(Webhook.url, Webhook.secret, Event, Organization.slug)
                .join(WebhookDelivery, WebhookDelivery.webhook_id == Webhook.id)
                .join(Event, Event.id == WebhookDelivery.event_id)
                .join(Organization, Organization.id == Event.organization_id)
                .where(WebhookDelivery.id == delivery_id)
            ).one()
            attempt = Attempt(delivery_id, number, url, secret, event_body(event_row, slug))
            session.commit()
            return attempt
        session.rollback()
    return None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is the receiver's answer, recorded as a failure: following it would let any URL that
    redirects send the signed event (and the sender) somewhere else."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def post(attempt: Attempt, timestamp: int, timeout_seconds: float) -> tuple[int | None, str | None]:
    """POST the attempt: (the receiver's status or None, an error or None)."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": str(attempt.delivery_id),
        "webhook-timestamp": str(timestamp),
        "webhook-signature": webhooks.sign(attempt.secret, str(attempt.delivery_id), timestamp, attempt.body),
    }
    if not attempt.url.startswith(("http://", "https://")):  # the API refuses others; a net under it
        return None, "Only http and https URLs are called."
    request = urllib.request.Request(attempt.url, attempt.body.encode(), headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout_seconds) as response:
            return response.status, None
    except urllib.error.HTTPError as answer:  # a status other than 2xx, redirects included
        with answer:
            said = answer.read(ERROR_CHARACTERS).decode("utf-8", "replace").strip()
        redirect = " (redirects are not followed)" if 300 <= answer.code < 400 else ""
        return answer.code, f"HTTP {answer.code}{redirect}" + (f": {said}" if said else "")
    except (OSError, http.client.HTTPException, ValueError) as error:  # refused, timed out, not HTTP
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        return None, f"{type(error).__name__}: {reason}"[:ERROR_CHARACTERS]


def record(
    database: Database,
    attempt: Attempt,
    status_code: int | None,
    error: str | None,
    *,
    now: datetime,
    settings: Settings,
) -> None:
    """The attempt's outcome: delivered, due again after a delay, or failed after the last attempt. Ignored
    when another sender has claimed the delivery since (our claim ran out): its outcome is the one kept."""
    values: dict[str, Any] = {"last_status_code": status_code, "last_error": error}
    if status_code is not None and 200 <= status_code < 300:
        values |= {"status": "delivered", "delivered_at": now, "last_error": None}
    elif attempt.number >= settings.max_attempts:
        values |= {"status": "failed"}
    else:
        values |= {"next_attempt_at": now + retry_delay(attempt.number)}
    with database.sessionmaker() as session:
        session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == attempt.delivery_id,
                WebhookDelivery.status == "pending",
                WebhookDelivery.attempts == attempt.number,
            )
            .values(**values)
        )
        session.commit()


def deliver_due(database: Database, now: datetime | None = None, settings: Settings | None = None) -> int:
    """Attempt every delivery due at `now` (default: the time of each claim), once each; how many were
    attempted. A delivery that fails is due again only later, so this ends."""
    settings = settings or Settings()
    count = 0
    while True:
        moment = now or utcnow()
        attempt = claim_next(database, moment, settings)
        if attempt is None:
            return count
        if attempt.number > settings.max_attempts:
            # Its senders died mid-attempt until none were left (a POST that crashes the process, say).
            status_code: int | None = None
            error: str | None = "Attempts exhausted: the sender stopped mid-attempt."
        else:
            status_code, error = post(attempt, int(moment.timestamp()), settings.timeout_seconds)
        record(database, attempt, status_code, error, now=moment, settings=settings)
        count += 1


class Sender(Periodic):
    """A process's sender thread: delivers what is due every POLL_SECONDS, or at once when woken."""

    name = "webhook sender"

    def __init__(self, database: Database, settings: Settings):
        super().__init__(POLL_SECONDS, PAUSE_AFTER_ERROR_SECONDS)
        self.database = database
        self.settings = settings

    def work(self) -> None:
        deliver_due(self.database, settings=self.settings)


def init_app(app: flask.Flask) -> None:
    config = app.extensions["planner.config"]
    settings = Settings(config.webhook_timeout_seconds, config.webhook_max_attempts)
    # Never in tests, which call deliver_due: a thread would poll databases that tests make and drop.
    in_process = config.webhooks_in_process and not config.testing
    started_by_requests(app, EXTENSION_KEY, Sender(get_db(app), settings) if in_process else None)


def wake_sender() -> None:
    """Have this process's sender look for due deliveries once the request's transaction has committed."""
    wake_after_response(EXTENSION_KEY)

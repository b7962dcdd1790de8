"""Sending webhook deliveries: at least once, signed as Standard Webhooks says, retried with backoff.

A sender claims a due delivery with a conditional UPDATE that counts the attempt and pushes
`next_attempt_at` a lease ahead, so that no other sender (thread, process or host) takes the same attempt;
it commits the claim, POSTs, then records the outcome only if the delivery still carries its attempt. A
sender that dies between the POST and the record leaves the claim to run out: the delivery is sent again,
with the same `webhook-id`, and receivers drop what they have seen (at least once, never exactly once).

Each app process runs a sender thread, started when gunicorn's worker boots (gunicorn.conf.py), which looks
for due deliveries every POLL_SECONDS and at once when a transaction that queued one commits; `flask --app
service webhooks work` runs one in the foreground. Tests call `deliver_due`.

Where a delivery may go is the egress policy's (service/infra/egress.py): public addresses only, unless the
operator allows more, checked on the address connected to. Deliveries run side by side (Settings.concurrency)
with at most Settings.per_endpoint at a time to one webhook, each with a timeout, so that a slow or dead
receiver holds up only its own deliveries. Whatever goes wrong with one delivery is that delivery's failure:
recorded, and retried on its schedule. What is recorded is the receiver's status code or a generic reason,
never what the receiver answered: a webhook must not read other services back to the tenant who made it.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import flask
from sqlalchemy import ColumnElement, select, update

from service.data.models import Event, Organization, Webhook, WebhookDelivery, utcnow
from service.infra import background, egress
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
# How many due deliveries a claim looks at to find one whose receiver and organisation have a free slot.
LOOK_AHEAD = 100
# What a delivery records when no HTTP answer came: one reason for every way of not answering, so that
# deliveries cannot tell a refused port from a silent one from one speaking another protocol.
NO_ANSWER = (
    "No HTTP answer: the receiver could not be reached, did not answer in time, or did not speak HTTP."
)
SENDER_FAILED = "The sender failed on this delivery; it is retried on its schedule."
USER_AGENT = "compute-planner-webhooks/1"
EXTENSION_KEY = background.WEBHOOK_SENDER


@dataclass(frozen=True)
class Settings:
    timeout_seconds: float = 10.0  # per connection and per read of one attempt
    max_attempts: int = 8
    egress: egress.Policy = field(default_factory=egress.Policy)
    concurrency: int = 8  # attempts in flight at once, per sender
    per_endpoint: int = 2  # of which to any one receiver (scheme, host and port)

    @property
    def per_organization(self) -> int:
        """Of the attempts in flight, how many may be one organisation's: half (and more than one receiver
        takes), so that no tenant's slow receivers, however many, hold up another's deliveries, and one slow
        receiver not its own organisation's others."""
        return max(self.per_endpoint + 1, self.concurrency // 2)

    @property
    def lease(self) -> timedelta:
        """How long a claim holds: well beyond one POST's timeout (which bounds each wait, not the sum)."""
        return timedelta(seconds=6 * self.timeout_seconds)


def receiver_of(url: str) -> str:
    """Who receives a URL's deliveries: its scheme, host and port (the URL itself if it cannot be parsed)."""
    try:
        target = egress.Target.of(url)
    except egress.Refused:
        return url
    return f"{target.scheme}://{target.host}:{target.port}"


Full = Callable[[uuid.UUID, str], bool]  # whether an organisation's delivery to a URL must wait for a slot


@dataclass(frozen=True)
class Attempt:
    """A claimed attempt: what to send where, and which attempt it is."""

    delivery_id: uuid.UUID
    organization_id: uuid.UUID
    number: int
    url: str
    secrets: list[str]  # those in force: the webhook's, and after a rotation the one before for a while
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


def claim_next(
    database: Database, now: datetime, settings: Settings, full: Full | None = None
) -> Attempt | None:
    """Claim the delivery due longest (of an active webhook, and not `full`), or None when none is due."""
    # A look first, which on SQLite takes no write lock: most polls find nothing.
    with database.read_sessionmaker() as session:
        due = session.execute(
            select(WebhookDelivery.id, Webhook.organization_id, Webhook.url)
            .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
            .where(*_due(now), Webhook.active.is_(True))
            .order_by(WebhookDelivery.next_attempt_at)
            .limit(LOOK_AHEAD if full is not None else CLAIM_BATCH)
        ).all()
    candidates = [delivery for delivery, owner, url in due if full is None or not full(owner, url)]
    candidates = candidates[:CLAIM_BATCH]
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
            owner, url, secret, previous, until, event_row, slug = session.execute(
                select(
                    Webhook.organization_id,
                    Webhook.url,
                    Webhook.secret,
                    Webhook.previous_secret,
                    Webhook.previous_secret_until,
                    Event,
                    Organization.slug,
                )
                .join(WebhookDelivery, WebhookDelivery.webhook_id == Webhook.id)
                .join(Event, Event.id == WebhookDelivery.event_id)
                .join(Organization, Organization.id == Event.organization_id)
                .where(WebhookDelivery.id == delivery_id)
            ).one()
            in_force = [secret] + ([previous] if previous and until is not None and now < until else [])
            attempt = Attempt(delivery_id, owner, number, url, in_force, event_body(event_row, slug))
            session.commit()
            return attempt
        session.rollback()
    return None


def post(attempt: Attempt, timestamp: int, settings: Settings) -> tuple[int | None, str | None]:
    """POST the attempt: (the receiver's status or None, why it failed or None). Redirects are answers,
    recorded as failures: following one would send the signed event (and the sender) elsewhere."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": str(attempt.delivery_id),
        "webhook-timestamp": str(timestamp),
        "webhook-signature": webhooks.signatures(
            attempt.secrets, str(attempt.delivery_id), timestamp, attempt.body
        ),
    }
    body = attempt.body.encode()
    try:
        status = egress.post(settings.egress, attempt.url, body, headers, settings.timeout_seconds)
    except egress.Refused as refusal:
        return None, str(refusal)
    except (OSError, http.client.HTTPException, ValueError):
        return None, NO_ANSWER
    if 200 <= status < 300:
        return status, None
    return status, f"HTTP {status}" + (" (redirects are not followed)" if 300 <= status < 400 else "")


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
    """Attempt every delivery due at `now` (default: the time of each claim), once each, side by side (at
    most settings.concurrency at once, settings.per_endpoint to one receiver, settings.per_organization of
    one organisation's); how many were attempted. A delivery that fails is due again only later, so this
    ends."""
    settings = settings or Settings()
    count = 0
    in_flight: dict[Future[None], tuple[uuid.UUID, str]] = {}

    def full(owner: uuid.UUID, url: str) -> bool:
        receivers = Counter(receiver for _, receiver in in_flight.values())
        owners = Counter(organization for organization, _ in in_flight.values())
        busy = receivers[receiver_of(url)] >= settings.per_endpoint
        return busy or owners[owner] >= settings.per_organization

    with ThreadPoolExecutor(settings.concurrency, thread_name_prefix="webhook") as pool:
        while True:
            attempt = None
            if len(in_flight) < settings.concurrency:
                moment = now or utcnow()
                attempt = claim_next(database, moment, settings, full)
            if attempt is not None:
                count += 1
                # One at a time in this thread (tests, whose app works on one database connection), else in
                # the pool.
                if settings.concurrency == 1:
                    _attempt(database, attempt, moment, settings)
                else:
                    sent = pool.submit(_attempt, database, attempt, moment, settings)
                    in_flight[sent] = (attempt.organization_id, receiver_of(attempt.url))
                continue
            if not in_flight:
                return count
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                del in_flight[future]
                future.result()  # a failure to record (the database) stops this round, as it would a claim


def _attempt(database: Database, attempt: Attempt, moment: datetime, settings: Settings) -> None:
    """Send one claimed attempt and record its outcome; anything that goes wrong sending it is its failure."""
    if attempt.number > settings.max_attempts:
        # Its senders died mid-attempt until none were left (a POST that crashes the process, say).
        status_code: int | None = None
        error: str | None = "Attempts exhausted: the sender stopped mid-attempt."
    else:
        try:
            status_code, error = post(attempt, int(moment.timestamp()), settings)
        except Exception:  # a bug, or an input no check foresaw: this delivery's failure, never the sender's
            log.exception("webhook delivery %s failed in the sender", attempt.delivery_id)
            status_code, error = None, SENDER_FAILED
    record(database, attempt, status_code, error, now=moment, settings=settings)


class Sender(Periodic):
    """A process's sender thread: delivers what is due every POLL_SECONDS, or at once when woken."""

    name = "webhook sender"

    def __init__(self, database: Database, settings: Settings):
        super().__init__(POLL_SECONDS, PAUSE_AFTER_ERROR_SECONDS)
        self.database = database
        self.settings = settings

    def work(self) -> None:
        deliver_due(self.database, settings=self.settings)


def settings_of(config: Any) -> Settings:
    """The sender's settings from the app's Config."""
    return Settings(
        timeout_seconds=config.webhook_timeout_seconds,
        max_attempts=config.webhook_max_attempts,
        egress=egress.Policy.allowing(config.webhook_allowed_networks.split(",")),
        concurrency=config.webhook_concurrency,
        per_endpoint=config.webhook_concurrency_per_endpoint,
    )


POLICY_KEY = "planner.egress_policy"


def policy_of_app() -> egress.Policy:
    """The egress policy of the app handling the request."""
    policy: egress.Policy = flask.current_app.extensions[POLICY_KEY]
    return policy


def init_app(app: flask.Flask) -> None:
    config = app.extensions["planner.config"]
    settings = settings_of(config)
    app.extensions[POLICY_KEY] = settings.egress
    # Never in tests, which call deliver_due: a thread would poll databases that tests make and drop.
    in_process = config.webhooks_in_process and not config.testing
    started_by_requests(app, EXTENSION_KEY, Sender(get_db(app), settings) if in_process else None)


def wake_sender() -> None:
    """Have this process's sender look for due deliveries once the request's transaction has committed."""
    wake_after_response(EXTENSION_KEY)

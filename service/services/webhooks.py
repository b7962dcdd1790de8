"""Webhooks: endpoints an organisation's events are POSTed to, signed as the Standard Webhooks specification
says (https://www.standardwebhooks.com), and their deliveries.

The secret is made here, shown once (in the response that creates or rotates it) and kept as it is, since
signing needs it. A URL is refused at registration when the sender could not send to it, or when its host is
an address the egress policy forbids (service/infra/egress.py; host names are checked at each delivery, on
what they resolve to then).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session, selectinload

from service.data.models import Webhook, WebhookDelivery, utcnow
from service.infra import actors, egress
from service.services import organizations
from service.services.changes import Changes
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from service.services.events import EVENT_TYPES
from service.services.pagination import Cursor, Page, paginate
from service.services.preconditions import require_version

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
DELIVERY_STATUSES = ("pending", "delivered", "failed")


@dataclass(frozen=True, kw_only=True)
class WebhookFields(Changes):
    """A webhook's fields as a request sets them (what WebhookSchema loads)."""

    organization_slug: str | None = None
    url: str | None = None
    event_types: list[str] | None = None  # empty: every type
    active: bool | None = None
    description: str | None = None


def new_secret() -> str:
    """`whsec_` and the base64 of 32 random bytes, as Standard Webhooks' libraries expect a secret."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def sign(secret: str, message_id: str, timestamp: int, body: str) -> str:
    """A signature of the `webhook-signature` header: `v1,` and the base64 of HMAC-SHA256 over
    `id.timestamp.body`, keyed with the secret's decoded bytes."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.{body}".encode()
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def signatures(secrets_in_force: list[str], message_id: str, timestamp: int, body: str) -> str:
    """The `webhook-signature` header: one signature per secret in force, space-separated."""
    return " ".join(sign(secret, message_id, timestamp, body) for secret in secrets_in_force)


def _in_order(event_types: list[str]) -> list[str]:
    """Each type once, in EVENT_TYPES' order: what a webhook stores and shows."""
    return [name for name in EVENT_TYPES if name in event_types]


# `scope` below: the organisation whose webhooks the caller may see, or None for all (admins). Webhooks of
# other organisations behave as if they did not exist.


def list_webhooks(
    session: Session, *, scope: uuid.UUID | None, organization: str | None, limit: int, after: Cursor | None
) -> Page[Webhook]:
    stmt = select(Webhook).options(selectinload(Webhook.organization))
    if scope is not None:
        stmt = stmt.where(Webhook.organization_id == scope)
    if organization is not None:
        stmt = stmt.where(Webhook.organization.has(slug=organization))
    return paginate(session, stmt, Webhook, limit, after)


def get_webhook(session: Session, webhook_id: uuid.UUID, *, scope: uuid.UUID | None) -> Webhook:
    stmt = select(Webhook).where(Webhook.id == webhook_id).options(selectinload(Webhook.organization))
    if scope is not None:
        stmt = stmt.where(Webhook.organization_id == scope)
    webhook = session.scalars(stmt).first()
    if webhook is None:
        raise NotFoundError(f"No webhook {webhook_id}.")
    return webhook


def _allowed(url: str, policy: egress.Policy) -> str:
    """The URL, if the policy allows its host as written (a 422 at url otherwise)."""
    try:
        policy.check_literal(egress.Target.of(url))
    except egress.Refused as refusal:
        raise InvalidFieldError("url", str(refusal)) from None
    return url


def create_webhook(
    session: Session, fields: WebhookFields, *, scope: uuid.UUID | None, policy: egress.Policy
) -> Webhook:
    """A new webhook; its `secret` is in the returned record, for the one response that shows it."""
    assert fields.organization_slug is not None, "a new webhook's organization is required (WebhookSchema)"
    assert fields.url is not None, "a new webhook's url is required (WebhookSchema)"
    organization = organizations.named_in_body(session, fields.organization_slug, scope=scope)
    webhook = Webhook(
        organization=organization,
        url=_allowed(fields.url, policy),
        secret=new_secret(),
        event_types=_in_order(fields.event_types or []),
        active=True if fields.active is None else fields.active,
        description=fields.description,
        created_by=actors.actor(session),
        created_at=utcnow(),
    )
    session.add(webhook)
    session.commit()
    return webhook


def update_webhook(
    session: Session,
    webhook_id: uuid.UUID,
    fields: WebhookFields,
    *,
    scope: uuid.UUID | None,
    if_match: str | None,
    policy: egress.Policy,
) -> Webhook:
    """PATCH: url, event_types, active, description. Queued deliveries go to the URL in force at each
    attempt; an inactive webhook's wait until it is active again."""
    webhook = get_webhook(session, webhook_id, scope=scope)
    require_version(if_match, webhook.version)
    if fields.given_or("organization_slug", webhook.organization_slug) != webhook.organization_slug:
        raise InvalidFieldError("organization", "A webhook cannot move to another organization.")
    if fields.sets("url"):
        webhook.url = _allowed(fields.url or webhook.url, policy)  # the schema refuses null
    if fields.sets("event_types"):
        webhook.event_types = _in_order(fields.event_types or [])
    if fields.sets("active") and fields.active is not None:
        webhook.active = fields.active
    if fields.sets("description"):
        webhook.description = fields.description
    session.commit()  # a PATCH that changes nothing keeps the version (and the ETag)
    return webhook


def rotate_secret(
    session: Session,
    webhook_id: uuid.UUID,
    *,
    scope: uuid.UUID | None,
    if_match: str | None,
    overlap: timedelta,
) -> Webhook:
    """A new secret, in force at once: every attempt from now on, retries included, is signed with it, and
    for `overlap` with the secret it replaces too (a second signature), so that receivers can switch keys
    without refusing a delivery."""
    webhook = get_webhook(session, webhook_id, scope=scope)
    if if_match is not None:  # optional here: rotating twice is as good as once
        require_version(if_match, webhook.version)
    webhook.previous_secret, webhook.previous_secret_until = webhook.secret, utcnow() + overlap
    webhook.secret = new_secret()
    session.commit()
    return webhook


def delete_webhook(
    session: Session, webhook_id: uuid.UUID, *, scope: uuid.UUID | None, if_match: str | None
) -> None:
    """Delete a webhook and its deliveries (the events stay in the feed)."""
    webhook = get_webhook(session, webhook_id, scope=scope)
    require_version(if_match, webhook.version)
    session.delete(webhook)
    session.commit()


def list_deliveries(
    session: Session,
    webhook_id: uuid.UUID,
    *,
    scope: uuid.UUID | None,
    status: str | None,
    limit: int,
    after: Cursor | None,
) -> Page[WebhookDelivery]:
    """A webhook's deliveries, newest first."""
    get_webhook(session, webhook_id, scope=scope)
    stmt = select(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id)
    if status is not None:
        stmt = stmt.where(WebhookDelivery.status == status)
    return paginate(session, stmt, WebhookDelivery, limit, after)


def retry_delivery(
    session: Session,
    webhook_id: uuid.UUID,
    delivery_id: uuid.UUID,
    *,
    scope: uuid.UUID | None,
    now: datetime | None = None,
) -> WebhookDelivery:
    """Queue a failed delivery again, due now, for a fresh round of attempts under the same delivery id
    (a receiver that did get it after all recognises it)."""
    get_webhook(session, webhook_id, scope=scope)
    now = now or utcnow()
    mine = (WebhookDelivery.id == delivery_id, WebhookDelivery.webhook_id == webhook_id)
    # Conditional, so that a delivery a sender is attempting right now is never queued twice.
    queued = session.execute(
        update(WebhookDelivery)
        .where(*mine, WebhookDelivery.status == "failed")
        .values(status="pending", attempts=0, next_attempt_at=now)
        .returning(WebhookDelivery.id)
    ).first()
    if queued is None:
        if not session.scalar(select(exists().where(*mine))):
            raise NotFoundError(f"No delivery {delivery_id} of webhook {webhook_id}.")
        raise ConflictError("Only a failed delivery can be retried; this one is pending or delivered.")
    session.commit()
    delivery = session.get_one(WebhookDelivery, delivery_id, populate_existing=True)
    return delivery

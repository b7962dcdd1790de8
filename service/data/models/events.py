"""Events organisations can follow, their ordering counter, webhooks and each delivery of an event to one."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import (
    Mapped,
    mapped_column,
    relationship,
)

from service.data.models.base import Base, UTCDateTime, utcnow

if TYPE_CHECKING:
    from service.data.models.organizations import Organization


class Event(Base):
    """Something an orchestrator or a finance tool may want to hear of: a plan started, finished, or a
    budget's or plan's spend (or its forecast) crossed a threshold. Polled in order of `id`
    (GET /v1/events), and delivered to webhooks.

    `id` is taken from the `counters` row "events" in the transaction that writes the event, which holds
    that row's lock until it commits: events become visible in the order of their ids, so a poller's cursor
    never skips one committed late. `key` makes an event raised at most once (a threshold crossed twice).
    """

    __tablename__ = "events"
    __table_args__ = (
        UniqueConstraint("key", name="uq_events_key"),
        Index("ix_events_organization_id_id", "organization_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    organization_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="RESTRICT"))
    type: Mapped[str] = mapped_column(String(64))
    subject_type: Mapped[str] = mapped_column(String(32))
    subject_id: Mapped[str] = mapped_column(String(100))
    key: Mapped[str | None] = mapped_column(String(200))
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Counter(Base):
    """A named counter taken by a conditional UPDATE (the events' ids)."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0)


class Webhook(Base):
    """An endpoint an organisation's events are POSTed to, signed with HMAC-SHA256 under its secret.

    The secret is shown once, when the webhook is created; it is kept (not hashed) because signing needs it.
    """

    __tablename__ = "webhooks"
    __table_args__ = (
        Index("ix_webhooks_organization_id_created_at_id", "organization_id", "created_at", "id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    organization_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="RESTRICT"))
    url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(100))
    # After a rotation, the secret before it, still signing beside the new one until `previous_secret_until`
    # (Standard Webhooks allows several signatures), so that receivers can change keys without a gap.
    previous_secret: Mapped[str | None] = mapped_column(String(100))
    previous_secret_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    event_types: Mapped[list[str]] = mapped_column(JSON, default=list)  # empty: every type
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    description: Mapped[str | None] = mapped_column(String(200))
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    version: Mapped[int] = mapped_column(Integer)

    organization: Mapped[Organization] = relationship()

    __mapper_args__ = {"version_id_col": version}

    @property
    def organization_slug(self) -> str:
        return self.organization.slug


class WebhookDelivery(Base):
    """One event for one webhook: attempted until the endpoint answers 2xx or the attempts run out.

    Its id is sent as the delivery id (the `webhook-id` header): a receiver that sees it twice (delivery is
    at least once) ignores the second. A sender claims a due delivery by a conditional UPDATE that pushes
    `next_attempt_at` past its own attempt, so two senders never post the same attempt.
    """

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        CheckConstraint("status IN ('pending', 'delivered', 'failed')", name="status_known"),
        UniqueConstraint("webhook_id", "event_id", name="uq_webhook_deliveries_webhook_id"),
        Index("ix_webhook_deliveries_status_next_attempt_at", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_webhook_id_created_at_id", "webhook_id", "created_at", "id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    webhook_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event_id: Mapped[int] = mapped_column(ForeignKey("events.id", ondelete="RESTRICT"))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

"""Tenants and who acts for them: organisations, API keys, the audit log, and the responses kept for
Idempotency-Keys."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Float,
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


class Organization(Base):
    """A tenant: budgets, plans and keys belong to exactly one organisation."""

    __tablename__ = "organizations"
    __table_args__ = (CheckConstraint("length(slug) BETWEEN 2 AND 63", name="slug_length"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    slug: Mapped[str] = mapped_column(String(63), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    version: Mapped[int] = mapped_column(Integer)

    # The version feeds the ETag; SQLAlchemy bumps it on every UPDATE and refuses a stale one.
    __mapper_args__ = {"version_id_col": version}


class RateLimitBucket(Base):
    """A token bucket of a rate limit shared by every process and host on the database (PostgreSQL):
    `scope` is the limit (key, auth_failures), `key` what it counts (an API key's id, a client address)."""

    __tablename__ = "rate_limit_buckets"

    scope: Mapped[str] = mapped_column(String(16), primary_key=True)
    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    tokens: Mapped[float] = mapped_column(Float)
    counted_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class IdempotencyRecord(Base):
    """The first successful response to a request sent with an Idempotency-Key, replayed to its retries.

    Keys belong to the caller (`principal` is the API key id) and expire; `fingerprint` is a hash of the
    method, path and canonical body, so that a key reused for another request is refused.
    """

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("principal", "key", name="uq_idempotency_keys_principal_key"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    principal: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int | None] = mapped_column(Integer)
    body: Mapped[str | None] = mapped_column(Text)
    headers: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class ApiKey(Base):
    """An API key: its public id, a SHA-256 of its secret (never the secret), its role and organisation."""

    __tablename__ = "api_keys"
    __table_args__ = (
        CheckConstraint("role IN ('admin', 'planner', 'finance', 'viewer')", name="role_known"),
        CheckConstraint(
            "(role = 'admin' AND organization_id IS NULL) "
            "OR (role <> 'admin' AND organization_id IS NOT NULL)",
            name="admins_have_no_organization",
        ),
    )
    # Lets `key` below be a plain attribute: the mapper leaves alone what is not annotated Mapped[].
    __allow_unmapped__ = True

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    key_id: Mapped[str] = mapped_column(String(32), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    organization_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("organizations.id", ondelete="RESTRICT"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    organization: Mapped[Organization | None] = relationship()
    # The full key, on the record that services/keys.create_key returns, for the one response that shows
    # it; never stored (only a hash of its secret is) and None on every record read back.
    key: str | None = None

    @property
    def organization_slug(self) -> str | None:
        return self.organization.slug if self.organization else None


class AuditEntry(Base):
    """One mutation: who (key id, never a secret), in which organisation, what, to which object, when."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_organization_id_created_at", "organization_id", "created_at"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(64))
    organization_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    action: Mapped[str] = mapped_column(String(64))
    object_type: Mapped[str] = mapped_column(String(64))
    object_id: Mapped[str] = mapped_column(String(100))
    request_id: Mapped[str | None] = mapped_column(String(128))
    fields: Mapped[list[str]] = mapped_column(JSON, default=list)

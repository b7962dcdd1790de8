"""Scaling laws fitted from an organisation's runs, and the background jobs that fit them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import (
    Mapped,
    mapped_column,
    relationship,
)

from service.data.models.base import Base, UTCDateTime, utcnow

if TYPE_CHECKING:
    from service.data.models.organizations import Organization


class FittedLaw(Base):
    """A scaling law fitted to an organisation's own training runs (POST /v1/scaling-laws).

    Immutable: plans made with it keep pointing at the coefficients and bootstrap fits they used. Its slug is
    unique within its organisation and names it only there.
    """

    __tablename__ = "fitted_laws"
    __table_args__ = (
        CheckConstraint("length(slug) BETWEEN 2 AND 63", name="slug_length"),
        UniqueConstraint("organization_id", "slug", name="uq_fitted_laws_organization_id_slug"),
        Index("ix_fitted_laws_organization_id_created_at_id", "organization_id", "created_at", "id"),
        Index("ix_fitted_laws_created_at_id", "created_at", "id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    organization_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="RESTRICT"))
    slug: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(200))
    E: Mapped[float] = mapped_column(Float)
    A: Mapped[float] = mapped_column(Float)
    B: Mapped[float] = mapped_column(Float)
    alpha: Mapped[float] = mapped_column(Float)
    beta: Mapped[float] = mapped_column(Float)
    fitted_range: Mapped[dict[str, Any]] = mapped_column(JSON)  # min/max params, tokens and flops of the runs
    fit: Mapped[dict[str, Any]] = mapped_column(JSON)  # how well it fits: objective, residuals, convergence
    bootstrap: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # samples, seed and intervals
    bootstrap_laws: Mapped[list[list[float]]] = mapped_column(JSON, default=list)  # (E, A, B, alpha, beta)
    isoflop: Mapped[dict[str, Any]] = mapped_column(
        JSON
    )  # Chinchilla's Approach 2 on the same runs, or why not
    warnings: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    runs: Mapped[dict[str, Any]] = mapped_column(
        JSON
    )  # the runs as fitted: {"params": [...], "tokens": [...], ...}
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    organization: Mapped[Organization] = relationship()

    @property
    def organization_slug(self) -> str:
        return self.organization.slug


class FitJob(Base):
    """A fit too large to answer at once, done in the background: its request, then its law or its error.

    A runner claims a queued job (or one whose lease ran out: its runner died) by a conditional UPDATE that
    raises `attempt`; only the runner holding the latest attempt may finish it. While a job is queued or
    running it holds its slug, so that no other fit can take it.
    """

    __tablename__ = "fit_jobs"
    __table_args__ = (
        CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed')",
            name="status_known",
        ),
        Index(
            "ix_fit_jobs_organization_id_slug_pending",
            "organization_id",
            "slug",
            unique=True,
            sqlite_where=text("status IN ('queued', 'running')"),
            postgresql_where=text("status IN ('queued', 'running')"),
        ),
        Index("ix_fit_jobs_status_lease_expires_at", "status", "lease_expires_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    organization_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="RESTRICT"))
    slug: Mapped[str] = mapped_column(String(63))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    request: Mapped[dict[str, Any]] = mapped_column(JSON)  # the fit request as validated, runs included
    law_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("fitted_laws.id", ondelete="SET NULL"))
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # problem details of a failed job
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    runner: Mapped[str | None] = mapped_column(String(300))  # host:pid of the process that claimed it last

    organization: Mapped[Organization] = relationship()
    law: Mapped[FittedLaw | None] = relationship()

    @property
    def organization_slug(self) -> str:
        return self.organization.slug

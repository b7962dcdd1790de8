"""Budgets, the hardware they allow, and the ledger of what plans reserve and give back."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Uuid,
)
from sqlalchemy.orm import (
    Mapped,
    mapped_column,
    relationship,
)

from service.data.models.base import Base, Money, UTCDateTime, utcnow

if TYPE_CHECKING:
    from service.data.models.hardware import HardwareProfile
    from service.data.models.organizations import Organization

# A budget's alert thresholds unless it sets its own, and a plan's without a budget: shares of the amount.
DEFAULT_ALERT_THRESHOLDS = (0.8, 1.0)

# FLOP and hour caps are sums of floats: 100 plans of h hours each add up to a hair more than 100·h. A cap
# admits that much rounding (relative), here and in the ledger's conditional UPDATE.
CAP_SLACK = 1.000000001


budget_hardware = Table(
    "budget_hardware",
    Base.metadata,
    Column("budget_id", ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
    Column("hardware_id", ForeignKey("hardware_profiles.id", ondelete="RESTRICT"), primary_key=True),
)


class Budget(Base):
    """Money (and optionally FLOPs or accelerator-hours) an organisation may commit to plans in a period.

    `committed` is maintained by the ledger of committed plans, in the same transaction as each ledger row,
    with a conditional UPDATE (never read-modify-write); remaining = amount - committed.
    """

    __tablename__ = "budgets"
    __table_args__ = (
        CheckConstraint("amount >= 0", name="amount_not_negative"),
        CheckConstraint("committed >= 0 AND committed <= amount", name="committed_within_amount"),
        CheckConstraint("spent >= 0 AND overrun >= 0", name="spent_not_negative"),
        CheckConstraint("period_end > period_start", name="period_ordered"),
        CheckConstraint("max_flops IS NULL OR max_flops > 0", name="max_flops_positive"),
        CheckConstraint("approval_above IS NULL OR approval_above >= 0", name="approval_above_not_negative"),
        CheckConstraint(
            "max_accelerator_hours IS NULL OR max_accelerator_hours > 0",
            name="max_accelerator_hours_positive",
        ),
        # The ledger's conditional UPDATE refuses a commit past a cap; these keep a concurrent edit of the
        # cap from slipping under what is already committed.
        CheckConstraint(
            f"max_flops IS NULL OR committed_flops <= max_flops * {CAP_SLACK}",
            name="committed_flops_within_cap",
        ),
        CheckConstraint(
            "max_accelerator_hours IS NULL "
            f"OR committed_accelerator_hours <= max_accelerator_hours * {CAP_SLACK}",
            name="committed_hours_within_cap",
        ),
        Index("ix_budgets_organization_id_created_at", "organization_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    organization_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(200))
    amount: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    committed: Mapped[Decimal] = mapped_column(Money, default=Decimal(0))
    committed_flops: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    committed_accelerator_hours: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # What runs actually spent (usage records), and the part of it beyond what their plans reserved: kept
    # by the usage records in their own transactions, like `committed` by the ledger.
    spent: Mapped[Decimal] = mapped_column(Money, default=Decimal(0), server_default="0")
    overrun: Mapped[Decimal] = mapped_column(Money, default=Decimal(0), server_default="0")
    # Fractions of the amount whose crossing by the spend (or its forecast) raises an event.
    alert_thresholds: Mapped[list[float]] = mapped_column(
        JSON,
        default=lambda: list(DEFAULT_ALERT_THRESHOLDS),
        server_default=json.dumps(DEFAULT_ALERT_THRESHOLDS),
    )
    period_start: Mapped[datetime] = mapped_column(UTCDateTime)
    period_end: Mapped[datetime] = mapped_column(UTCDateTime)
    max_flops: Mapped[float | None] = mapped_column(Float)
    max_accelerator_hours: Mapped[float | None] = mapped_column(Float)
    # The quantile of a plan's cost its commitment charges (0.8: P80, from the estimate's interval); NULL: the
    # point value.
    commit_quantile: Mapped[float | None] = mapped_column(Float)
    # Plans charged more than this (in its currency) wait for a finance or admin key's approval before the
    # ledger reserves anything; NULL: none do.
    approval_above: Mapped[Decimal | None] = mapped_column(Money)
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    version: Mapped[int] = mapped_column(Integer)

    organization: Mapped[Organization] = relationship()
    allowed_hardware: Mapped[list[HardwareProfile]] = relationship(
        secondary=budget_hardware, order_by="HardwareProfile.slug"
    )

    __mapper_args__ = {"version_id_col": version}

    @property
    def organization_slug(self) -> str:
        return self.organization.slug

    @property
    def allowed_hardware_slugs(self) -> list[str]:
        return [profile.slug for profile in self.allowed_hardware]

    @property
    def remaining(self) -> Decimal:
        """What new plans may still reserve: the amount less the reservations and any spend beyond them."""
        return self.amount - self.committed - self.overrun

    @property
    def utilization(self) -> float:
        """Share of the amount committed (0 for an empty budget)."""
        return float(self.committed / self.amount) if self.amount else 0.0


LEDGER_ENTRIES = ("commit", "release", "settle")


class LedgerEntry(Base):
    """One movement on a budget: a plan's cost reserved (commit), given back when it is cancelled (release,
    negative), or the part of it a finished run did not spend given back (settle, negative).

    The sums of `amount`, `flops` and `accelerator_hours` over a budget's entries equal its committed
    figures: each entry is written in the transaction that moves them.
    """

    __tablename__ = "budget_ledger"
    __table_args__ = (
        CheckConstraint("entry IN ('commit', 'release', 'settle')", name="entry_known"),
        Index("ix_budget_ledger_budget_id_created_at_id", "budget_id", "created_at", "id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    budget_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("budgets.id", ondelete="RESTRICT"))
    plan_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("plans.id", ondelete="RESTRICT"), index=True)
    entry: Mapped[str] = mapped_column(String(16))
    amount: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    flops: Mapped[float] = mapped_column(Float)
    accelerator_hours: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

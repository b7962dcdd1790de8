"""Plans through their lifecycle, and the usage their runs report (per record and per UTC day)."""

from __future__ import annotations

import enum
import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    ColumnElement,
    Date,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    and_,
    exists,
    false,
)
from sqlalchemy.orm import (
    Mapped,
    aliased,
    mapped_column,
    relationship,
)

from service.core.forecast import Progress
from service.data.models.base import Base, Money, UTCDateTime, utcnow

if TYPE_CHECKING:
    from service.data.models.hardware import HardwareProfile
    from service.data.models.laws import FittedLaw
    from service.data.models.organizations import Organization


class PlanStatus(enum.StrEnum):
    """Where a plan is in its life. The one list of statuses.

    A draft may be committed (its cost reserved on its budget) or cancelled. When its budget asks for
    approval above an amount (`Budget.approval_above`) and the plan costs more, committing it makes it
    pending approval instead: a finance or admin key approves it (committed, reserved then) or rejects it
    (rejected, nothing ever reserved). A committed plan may be cancelled (its reservation released) or
    started; it starts by itself with its first usage record. A running plan reports usage and ends completed
    or failed: the part of its reservation it did not spend goes back to its budget.
    """

    DRAFT = "draft"
    PENDING_APPROVAL = "pending_approval"
    REJECTED = "rejected"
    COMMITTED = "committed"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# Plain strings: what goes into the OpenAPI document (whose YAML would tag enum members as Python objects).
PLAN_STATUSES = tuple(status.value for status in PlanStatus)
# Plans whose cost was reserved on their budget and is (or was) spent there.
CHARGED_STATUSES = (PlanStatus.COMMITTED, PlanStatus.RUNNING, PlanStatus.COMPLETED, PlanStatus.FAILED)
# Plans that take usage records.
REPORTING_STATUSES = (PlanStatus.COMMITTED, PlanStatus.RUNNING)


class Plan(Base):
    """A training plan: its inputs, a snapshot of what it used, its outputs. Immutable but for its status.

    `inputs` are the allocation request as validated; `snapshot` the hardware (figures and the price in
    force), the law's coefficients and the engine version; `result` the allocation document. Evaluating the
    inputs against the snapshot gives the result again. The scalar columns repeat figures of the result for
    filters, reports and the budget ledger.
    """

    __tablename__ = "plans"
    __table_args__ = (
        CheckConstraint(f"status IN ({', '.join(repr(str(s)) for s in PlanStatus)})", name="status_known"),
        CheckConstraint("cost IS NULL OR cost >= 0", name="cost_not_negative"),
        # Keyset pagination newest first: (created_at, id) overall, or within an organisation, a budget or
        # a hardware profile.
        Index("ix_plans_created_at_id", "created_at", "id"),
        Index("ix_plans_organization_id_created_at_id", "organization_id", "created_at", "id"),
        Index("ix_plans_budget_id_created_at_id", "budget_id", "created_at", "id"),
        Index("ix_plans_hardware_id_created_at_id", "hardware_id", "created_at", "id"),
        # Cost reports: an organisation's plans of a status in a window of start_at, with every column a
        # report sums or groups by but labels, so that the aggregate reads the index alone.
        Index(
            "ix_plans_costs",
            "organization_id",
            "status",
            "start_at",
            "budget_id",
            "hardware_id",
            "currency",
            "cost",
            "accelerator_hours",
            "flops",
            "energy_kwh",
            "emissions_kg_co2e",
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    organization_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="RESTRICT"))
    budget_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("budgets.id", ondelete="RESTRICT"))
    hardware_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("hardware_profiles.id", ondelete="RESTRICT")
    )
    parent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("plans.id", ondelete="RESTRICT"))
    # The fitted law a plan used (published laws live in code): its bootstrap fits give the plan's intervals.
    law_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("fitted_laws.id", ondelete="RESTRICT"), index=True
    )
    name: Mapped[str | None] = mapped_column(String(200))
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(16), default=PlanStatus.DRAFT)
    start_at: Mapped[datetime] = mapped_column(UTCDateTime)
    end_at: Mapped[datetime] = mapped_column(UTCDateTime)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON)
    snapshot: Mapped[dict[str, Any]] = mapped_column(JSON)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    method: Mapped[str] = mapped_column(String(32))
    params: Mapped[float] = mapped_column(Float)
    tokens: Mapped[float] = mapped_column(Float)
    flops: Mapped[float] = mapped_column(Float)
    predicted_loss: Mapped[float | None] = mapped_column(Float)
    accelerators: Mapped[int] = mapped_column(Integer)
    days: Mapped[float] = mapped_column(Float)
    accelerator_hours: Mapped[float] = mapped_column(Float)
    cost: Mapped[Decimal | None] = mapped_column(Money)
    currency: Mapped[str | None] = mapped_column(String(3))
    # The facility energy of its run and its location-based emissions (its result's estimate's `energy`);
    # NULL where they are not estimated: no TDP for its hardware, or for emissions no grid intensity.
    energy_kwh: Mapped[float | None] = mapped_column(Float)
    emissions_kg_co2e: Mapped[float | None] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    committed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cancelled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # completed or failed
    # Approval, when its budget asked for it: who asked (by committing) and when; who approved or rejected it,
    # when, and why.
    approval_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    approval_requested_by: Mapped[str | None] = mapped_column(String(64))
    approval_decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    approval_decided_by: Mapped[str | None] = mapped_column(String(64))
    approval_note: Mapped[str | None] = mapped_column(String(1000))
    # What its usage records add up to, kept in their transactions: hours and money spent, and the tokens
    # trained by the latest record (each reports the run's tokens so far).
    actual_accelerator_hours: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    actual_cost: Mapped[Decimal] = mapped_column(Money, default=Decimal(0), server_default="0")
    tokens_trained: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # What its run used and spent outside its schedule [start_at, end_at): records that begin before it or
    # end after it (UsageRecord.off_schedule), kept like actual_cost.
    off_schedule_accelerator_hours: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    off_schedule_cost: Mapped[Decimal] = mapped_column(Money, default=Decimal(0), server_default="0")
    version: Mapped[int] = mapped_column(Integer)

    organization: Mapped[Organization] = relationship()
    hardware: Mapped[HardwareProfile | None] = relationship()
    law: Mapped[FittedLaw | None] = relationship()

    __mapper_args__ = {"version_id_col": version}

    @property
    def organization_slug(self) -> str:
        return self.organization.slug

    @property
    def hardware_slug(self) -> str | None:
        return self.hardware.slug if self.hardware else None  # slugs never change

    @property
    def progress(self) -> Progress:
        """How far its run is, and where its cost is heading."""
        return Progress.of(self.status, self.cost, self.actual_cost, self.tokens, self.tokens_trained)

    @property
    def approval(self) -> dict[str, Any] | None:
        """Its approval, if its budget asked for one: who asked and when, and what was decided."""
        if self.approval_requested_at is None:
            return None
        decision = None
        if self.approval_decided_at is not None:
            decision = "rejected" if self.status == PlanStatus.REJECTED else "approved"
        return {
            "requested_at": self.approval_requested_at,
            "requested_by": self.approval_requested_by,
            "decision": decision,
            "decided_at": self.approval_decided_at,
            "decided_by": self.approval_decided_by,
            "note": self.approval_note,
        }

    @property
    def estimate_at_completion(self) -> Decimal | None:
        return None if self.cost is None else self.progress.estimate_at_completion


USAGE_KINDS = ("usage", "reversal")


class UsageRecord(Base):
    """What a run used in a period, as its orchestrator reported it: append-only.

    A wrong record is never edited: a reversal (kind "reversal", `reverses_id` naming it) takes its hours and
    cost back with the opposite sign, and the right record may then be reported for the same period. Costs
    are the reporter's, or the hardware's price in force in the period times the hours (`cost_source`).
    """

    __tablename__ = "plan_usage"
    __table_args__ = (
        CheckConstraint("kind IN ('usage', 'reversal')", name="kind_known"),
        CheckConstraint("cost_source IN ('reported', 'price', 'reversal')", name="cost_source_known"),
        CheckConstraint("period_end > period_start", name="period_ordered"),
        CheckConstraint(
            "(kind = 'usage' AND reverses_id IS NULL AND accelerator_hours >= 0 AND cost >= 0) "
            "OR (kind = 'reversal' AND reverses_id IS NOT NULL AND accelerator_hours <= 0 AND cost <= 0)",
            name="kind_signs",
        ),
        CheckConstraint("tokens IS NULL OR tokens >= 0", name="tokens_not_negative"),
        CheckConstraint("tokens_per_second IS NULL OR tokens_per_second > 0", name="throughput_positive"),
        UniqueConstraint("reverses_id", name="uq_plan_usage_reverses_id"),
        Index("ix_plan_usage_plan_id_reporter_period_start", "plan_id", "reporter", "period_start"),
        Index("ix_plan_usage_plan_id_created_at_id", "plan_id", "created_at", "id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    plan_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("plans.id", ondelete="RESTRICT"))
    organization_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="RESTRICT"))
    kind: Mapped[str] = mapped_column(String(16), default="usage")
    reverses_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("plan_usage.id", ondelete="RESTRICT"))
    reporter: Mapped[str] = mapped_column(String(100))
    period_start: Mapped[datetime] = mapped_column(UTCDateTime)
    period_end: Mapped[datetime] = mapped_column(UTCDateTime)
    accelerator_hours: Mapped[float] = mapped_column(Float)
    tokens: Mapped[float | None] = mapped_column(Float)  # trained by the end of the period, in all
    tokens_per_second: Mapped[float | None] = mapped_column(Float)  # measured over the period
    cost: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    cost_source: Mapped[str] = mapped_column(String(16))
    price_per_hour: Mapped[Decimal | None] = mapped_column(Money)  # the price charged, with cost_source price
    # Its period begins before its plan's start_at or ends after its end_at (a reversal, as its record's).
    off_schedule: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    note: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    organization: Mapped[Organization] = relationship()


def standing_usage() -> ColumnElement[bool]:
    """SQL for the usage records that stand: not reversals, and not reversed by one."""
    reversal = aliased(UsageRecord)
    return and_(UsageRecord.kind == "usage", ~exists().where(reversal.reverses_id == UsageRecord.id))


class UsageDay(Base):
    """A plan's usage in one UTC day: what reports of actual spend sum, instead of every record.

    A record counts in the days its period covers, in proportion to the time in each; kept in the record's
    transaction by an upsert.
    """

    __tablename__ = "usage_days"
    __table_args__ = (Index("ix_usage_days_organization_id_day", "organization_id", "day", "plan_id"),)

    plan_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("plans.id", ondelete="RESTRICT"), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    organization_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="RESTRICT"))
    accelerator_hours: Mapped[float] = mapped_column(Float)
    cost: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    # Of those, what records off the plan's schedule (UsageRecord.off_schedule) used and spent.
    off_schedule_accelerator_hours: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    off_schedule_cost: Mapped[Decimal] = mapped_column(Money, default=Decimal(0), server_default="0")

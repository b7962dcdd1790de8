"""SQLAlchemy 2 typed models. Schema changes go through Alembic (`migrations/`), never `create_all`."""

from __future__ import annotations

import enum
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    BindParameter,
    Boolean,
    CheckConstraint,
    Column,
    ColumnElement,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    Uuid,
    and_,
    exists,
    literal,
    select,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    aliased,
    mapped_column,
    relationship,
)
from sqlalchemy.sql.selectable import ScalarSelect
from sqlalchemy.types import TypeEngine

from service.core.forecast import Progress
from service.data.catalog import PRECISIONS

# Explicit constraint names, so that migrations can drop and alter them on every backend (SQLite's batch
# mode needs names to find them again).
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite stores no offset and returns naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


MONEY_SCALE = 6
_MONEY_QUANTUM = Decimal(1).scaleb(-MONEY_SCALE)


class Money(TypeDecorator[Decimal]):
    """An exact amount of money with 6 decimal places: NUMERIC(18, 6) on PostgreSQL.

    SQLite has no exact decimal type (NUMERIC columns hold doubles), so there the amount is stored as an
    integer count of millionths; SUM() over it stays exact and comes back through this type as a Decimal.
    """

    impl = Numeric(18, MONEY_SCALE)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(18, MONEY_SCALE, asdecimal=True))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Decimal | int | None:
        if value is None:
            return None
        exact = Decimal(value)
        if exact != exact.quantize(_MONEY_QUANTUM):
            raise ValueError(f"{value} has more than {MONEY_SCALE} decimal places")
        return int(exact.scaleb(MONEY_SCALE)) if dialect.name == "sqlite" else exact

    def process_result_value(self, value: Decimal | int | None, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return Decimal(int(value)).scaleb(-MONEY_SCALE)
        return Decimal(value)


def money_literal(amount: Decimal | None) -> BindParameter[Decimal]:
    """An amount as a bound parameter of the Money type, for SQL arithmetic on money columns."""
    return literal(amount, Money())


def utcnow() -> datetime:
    return datetime.now(UTC)


def table_of(model: type[Base]) -> Table:
    """A model's table, for Core statements (SQLAlchemy types `__table__` as any FROM clause)."""
    table = model.__table__
    assert isinstance(table, Table), f"{model.__name__} maps a table"
    return table


def id_by_slug(model: type[Organization | HardwareProfile], slug: str) -> ScalarSelect[uuid.UUID]:
    """The id of `model`'s row with this slug, as a scalar subquery to compare a foreign key with: NULL (so
    matching nothing) for an unknown slug. Both databases evaluate it once and seek an index by its value,
    in the same round trip as the query around it."""
    return select(model.id).where(model.slug == slug).scalar_subquery()


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


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


# What describes a device, besides its slug and its peaks (one column per precision): the built-in catalog
# and custom profiles set these the same way.
HARDWARE_FIGURES = (
    "name",
    "vendor",
    "memory_bytes",
    "memory_bandwidth_bytes_per_second",
    "interconnect_bandwidth_bytes_per_second",
    "interconnect",
    "tdp_watts",
    "accelerators_per_node",
    "scale_up_bandwidth_bytes_per_second",
    "scale_out_bandwidth_bytes_per_second",
    "failures_per_accelerator_hour",
    "source",
    "note",
)


class HardwareProfile(Base):
    """An accelerator: dense peak FLOP/s per precision, memory, bandwidths. Prices live in HardwarePrice."""

    __tablename__ = "hardware_profiles"
    __table_args__ = (
        CheckConstraint("memory_bytes > 0", name="memory_positive"),
        CheckConstraint("memory_bandwidth_bytes_per_second > 0", name="memory_bandwidth_positive"),
        CheckConstraint(
            "interconnect_bandwidth_bytes_per_second IS NULL OR interconnect_bandwidth_bytes_per_second > 0",
            name="interconnect_positive",
        ),
        CheckConstraint("tdp_watts IS NULL OR tdp_watts > 0", name="tdp_positive"),
        CheckConstraint(
            "accelerators_per_node IS NULL OR accelerators_per_node > 0",
            name="accelerators_per_node_positive",
        ),
        CheckConstraint(
            "scale_up_bandwidth_bytes_per_second IS NULL OR scale_up_bandwidth_bytes_per_second > 0",
            name="scale_up_positive",
        ),
        CheckConstraint(
            "scale_out_bandwidth_bytes_per_second IS NULL OR scale_out_bandwidth_bytes_per_second > 0",
            name="scale_out_positive",
        ),
        CheckConstraint(
            "failures_per_accelerator_hour IS NULL "
            "OR (failures_per_accelerator_hour >= 0 AND failures_per_accelerator_hour < 1)",
            name="failure_rate_range",
        ),
        *(
            CheckConstraint(f"peak_flops_{p} IS NULL OR peak_flops_{p} > 0", name=f"peak_flops_{p}_positive")
            for p in PRECISIONS
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    slug: Mapped[str] = mapped_column(String(63), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    vendor: Mapped[str] = mapped_column(String(100), index=True)
    peak_flops_fp32: Mapped[float | None] = mapped_column(Float)
    peak_flops_tf32: Mapped[float | None] = mapped_column(Float)
    peak_flops_bf16: Mapped[float | None] = mapped_column(Float)
    peak_flops_fp16: Mapped[float | None] = mapped_column(Float)
    peak_flops_fp8: Mapped[float | None] = mapped_column(Float)
    peak_flops_int8: Mapped[float | None] = mapped_column(Float)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    memory_bandwidth_bytes_per_second: Mapped[int] = mapped_column(BigInteger)
    interconnect_bandwidth_bytes_per_second: Mapped[int | None] = mapped_column(BigInteger)
    interconnect: Mapped[str | None] = mapped_column(String(100))
    tdp_watts: Mapped[int | None] = mapped_column(Integer)
    # As installed in a cluster: the accelerators sharing the scale-up domain (NVLink/NVSwitch, ICI, Infinity
    # Fabric), that link and the network between nodes per accelerator in one direction, and unexpected
    # interruptions per accelerator-hour. NULL: not given (the planner assumes figures of its own).
    accelerators_per_node: Mapped[int | None] = mapped_column(Integer)
    scale_up_bandwidth_bytes_per_second: Mapped[int | None] = mapped_column(BigInteger)
    scale_out_bandwidth_bytes_per_second: Mapped[int | None] = mapped_column(BigInteger)
    failures_per_accelerator_hour: Mapped[float | None] = mapped_column(Float)
    source: Mapped[str] = mapped_column(Text)
    note: Mapped[str | None] = mapped_column(Text)
    built_in: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    version: Mapped[int] = mapped_column(Integer)

    prices: Mapped[list[HardwarePrice]] = relationship(
        back_populates="hardware", order_by="HardwarePrice.effective_at", cascade="all, delete-orphan"
    )

    __mapper_args__ = {"version_id_col": version}

    def price_at(self, moment: datetime | None = None) -> HardwarePrice | None:
        """The price in force at `moment` (now by default): the latest that took effect by then."""
        moment = moment or utcnow()
        in_force = [price for price in self.prices if price.effective_at <= moment]
        return max(in_force, key=lambda price: (price.effective_at, str(price.id)), default=None)

    @property
    def current_price(self) -> HardwarePrice | None:
        return self.price_at()

    # The current price, flattened for the API representation.
    @property
    def price_per_hour(self) -> Decimal | None:
        return price.price_per_hour if (price := self.current_price) is not None else None

    @property
    def currency(self) -> str | None:
        return price.currency if (price := self.current_price) is not None else None

    @property
    def price_as_of(self) -> str | None:
        return price.as_of if (price := self.current_price) is not None else None

    @property
    def price_source(self) -> str | None:
        return price.source if (price := self.current_price) is not None else None

    @property
    def price_effective_at(self) -> datetime | None:
        return price.effective_at if (price := self.current_price) is not None else None

    @property
    def peak_flops(self) -> dict[str, float]:
        """Dense peak FLOP/s by precision, only the precisions this device has."""
        return {p: value for p in PRECISIONS if (value := getattr(self, f"peak_flops_{p}")) is not None}


class HardwarePrice(Base):
    """A price per accelerator-hour, in force from `effective_at` until the next one: the history is kept."""

    __tablename__ = "hardware_prices"
    __table_args__ = (
        CheckConstraint("price_per_hour >= 0", name="price_not_negative"),
        Index("ix_hardware_prices_hardware_id_effective_at", "hardware_id", "effective_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    hardware_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("hardware_profiles.id", ondelete="CASCADE"))
    price_per_hour: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    as_of: Mapped[str | None] = mapped_column(String(10))
    source: Mapped[str | None] = mapped_column(Text)
    effective_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    hardware: Mapped[HardwareProfile] = relationship(back_populates="prices")


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


class PlanStatus(enum.StrEnum):
    """Where a plan is in its life. The one list of statuses.

    A draft may be committed (its cost reserved on its budget) or cancelled. A committed plan may be cancelled
    (its reservation released) or started; it starts by itself with its first usage record. A running plan
    reports usage and ends completed or failed: the part of its reservation it did not spend goes back to
    its budget.
    """

    DRAFT = "draft"
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
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    committed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cancelled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # completed or failed
    # What its usage records add up to, kept in their transactions: hours and money spent, and the tokens
    # trained by the latest record (each reports the run's tokens so far).
    actual_accelerator_hours: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    actual_cost: Mapped[Decimal] = mapped_column(Money, default=Decimal(0), server_default="0")
    tokens_trained: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
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
    def estimate_at_completion(self) -> Decimal | None:
        return None if self.cost is None else self.progress.estimate_at_completion


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

    organization: Mapped[Organization] = relationship()
    law: Mapped[FittedLaw | None] = relationship()

    @property
    def organization_slug(self) -> str:
        return self.organization.slug


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


class Calibration(Base):
    """An organisation's own constant for the cluster model on one hardware profile, fitted to the measured
    throughput of its runs: its plans on that hardware use the latest one (and their snapshot says so)."""

    __tablename__ = "calibrations"
    __table_args__ = (
        CheckConstraint("matmul_efficiency > 0 AND matmul_efficiency <= 1", name="efficiency_range"),
        Index(
            "ix_calibrations_organization_id_hardware_id_created_at",
            "organization_id",
            "hardware_id",
            "created_at",
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    organization_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="RESTRICT"))
    hardware_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("hardware_profiles.id", ondelete="RESTRICT"))
    matmul_efficiency: Mapped[float] = mapped_column(Float)
    runs: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # the plans fitted, measured and predicted
    fit: Mapped[dict[str, Any]] = mapped_column(JSON)  # the default it replaces, errors before and after
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    organization: Mapped[Organization] = relationship()
    hardware: Mapped[HardwareProfile] = relationship()

    @property
    def organization_slug(self) -> str:
        return self.organization.slug

    @property
    def hardware_slug(self) -> str:
        return self.hardware.slug


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

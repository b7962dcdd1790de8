"""Accelerators: hardware profiles with their price history, and organisations' calibrations of the
cluster model on them."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    Uuid,
)
from sqlalchemy.orm import (
    Mapped,
    mapped_column,
    relationship,
)

from service.data.catalog import PRECISIONS
from service.data.models.base import Base, Money, UTCDateTime, utcnow

if TYPE_CHECKING:
    from service.data.models.organizations import Organization

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
    "run_overhead",
    "efficiency",
    "source",
    "note",
)


# core.goodput.MAX_RUN_OVERHEAD, as the database checks it.
RUN_OVERHEAD_RANGE = "run_overhead IS NULL OR (run_overhead >= 0 AND run_overhead <= 0.9)"


class PriceRow:
    """A row of a price history: a price per accelerator-hour, in force from `effective_at` until the next
    (the columns every price table has; a declarative mixin)."""

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    price_per_hour: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    as_of: Mapped[str | None] = mapped_column(String(10))
    source: Mapped[str | None] = mapped_column(Text)
    effective_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


PriceT = TypeVar("PriceT", bound=PriceRow)


class PriceHistory(Generic[PriceT]):
    """What keeps its prices as a history (`prices`, each in force from its `effective_at` until the next):
    the price in force, and its parts flattened for the API representation."""

    prices: Any  # Mapped[list[PriceT]] in each model

    def price_at(self, moment: datetime | None = None) -> PriceT | None:
        """The price in force at `moment` (now by default): the latest that took effect by then."""
        moment = moment or utcnow()
        in_force = [price for price in self.prices if price.effective_at <= moment]
        return max(in_force, key=lambda price: (price.effective_at, str(price.id)), default=None)

    @property
    def current_price(self) -> PriceT | None:
        return self.price_at()

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


class HardwareProfile(PriceHistory["HardwarePrice"], Base):
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
        CheckConstraint(RUN_OVERHEAD_RANGE, name="run_overhead_range"),
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
    # What whole runs on this installation lose beyond failures and checkpoints (core/goodput.py); NULL: the
    # default.
    run_overhead: Mapped[float | None] = mapped_column(Float)
    # What it achieves of its peaks and how that is known (core.performance.Efficiency as a mapping); NULL:
    # stated nowhere, run at the fractions of uncalibrated hardware.
    efficiency: Mapped[dict[str, Any] | None] = mapped_column(JSON)
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

    @property
    def peak_flops(self) -> dict[str, float]:
        """Dense peak FLOP/s by precision, only the precisions this device has."""
        return {p: value for p in PRECISIONS if (value := getattr(self, f"peak_flops_{p}")) is not None}


class HardwarePrice(PriceRow, Base):
    """A price per accelerator-hour, in force from `effective_at` until the next one: the history is kept."""

    __tablename__ = "hardware_prices"
    __table_args__ = (
        CheckConstraint("price_per_hour >= 0", name="price_not_negative"),
        Index("ix_hardware_prices_hardware_id_effective_at", "hardware_id", "effective_at"),
    )

    hardware_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("hardware_profiles.id", ondelete="CASCADE"))

    hardware: Mapped[HardwareProfile] = relationship(back_populates="prices")


class Calibration(Base):
    """An organisation's own constant for the cluster model on one hardware profile, fitted to the measured
    throughput of its runs: its plans on that hardware use the latest one (and their snapshot says so)."""

    __tablename__ = "calibrations"
    __table_args__ = (
        CheckConstraint("matmul_efficiency > 0 AND matmul_efficiency <= 1", name="efficiency_range"),
        CheckConstraint(RUN_OVERHEAD_RANGE, name="run_overhead_range"),
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
    # What the organisation's runs lost beyond failures and checkpoints, from their actual accelerator-hours
    # against their measured pace; NULL when none reported the tokens it trained.
    run_overhead: Mapped[float | None] = mapped_column(Float)
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

"""Offers: a hardware profile on a provider, in a region, under a pricing model, with its price history."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal

from sqlalchemy import CheckConstraint, Float, ForeignKey, Index, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.data.models.base import Base, Money, UTCDateTime, utcnow
from service.data.models.hardware import HardwareProfile, PriceHistory, PriceRow

# How an offer is paid for: by the hour with no commitment; for a term paid whether used or not; by the hour
# on capacity the provider can take back; or owned, its capital amortised per accelerator-hour plus the
# energy it draws.
PRICINGS = ("on_demand", "reserved", "spot", "owned")


class Offer(PriceHistory["OfferPrice"], Base):
    """Where a hardware profile can be had and on what terms. Prices live in OfferPrice."""

    __tablename__ = "offers"
    __table_args__ = (
        CheckConstraint("pricing IN ('on_demand', 'reserved', 'spot', 'owned')", name="pricing_known"),
        CheckConstraint("accelerators_per_instance > 0", name="accelerators_per_instance_positive"),
        # A reservation has its term, spot capacity its preemption rate; other pricings neither.
        CheckConstraint("(pricing = 'reserved') = (term_days IS NOT NULL)", name="term_only_reserved"),
        CheckConstraint("term_days IS NULL OR term_days > 0", name="term_positive"),
        CheckConstraint(
            "(pricing = 'spot') = (preemptions_per_instance_hour IS NOT NULL)", name="preemptions_only_spot"
        ),
        CheckConstraint(
            "preemptions_per_instance_hour IS NULL "
            "OR (preemptions_per_instance_hour >= 0 AND preemptions_per_instance_hour < 1)",
            name="preemptions_range",
        ),
        CheckConstraint("requeue_seconds IS NULL OR requeue_seconds >= 0", name="requeue_not_negative"),
        CheckConstraint("pue IS NULL OR (pue >= 1 AND pue <= 3)", name="pue_range"),
        Index("ix_offers_provider_region", "provider", "region"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    slug: Mapped[str] = mapped_column(String(63), unique=True)
    hardware_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("hardware_profiles.id", ondelete="RESTRICT"), index=True
    )
    provider: Mapped[str] = mapped_column(String(63))  # "aws", "gcp", "lambda", "ours"...
    region: Mapped[str | None] = mapped_column(String(100))  # the provider's name for it
    availability_zone: Mapped[str | None] = mapped_column(String(100))
    instance_type: Mapped[str | None] = mapped_column(String(100))
    accelerators_per_instance: Mapped[int] = mapped_column(Integer)
    pricing: Mapped[str] = mapped_column(String(16), index=True)
    term_days: Mapped[int | None] = mapped_column(Integer)  # reserved: paid for whether used or not
    # Spot: instances the provider takes back per instance-hour, with the figure's source, and how long a
    # preempted job waits for capacity (NULL: core.offers.DEFAULT_REQUEUE_SECONDS).
    preemptions_per_instance_hour: Mapped[float | None] = mapped_column(Float)
    preemptions_source: Mapped[str | None] = mapped_column(Text)
    requeue_seconds: Mapped[float | None] = mapped_column(Float)
    # The site's power usage effectiveness (NULL: the default for the provider's kind of site) and the grid
    # region its carbon intensity is looked up by (NULL: provider and region).
    pue: Mapped[float | None] = mapped_column(Float)
    grid_region: Mapped[str | None] = mapped_column(String(100))
    source: Mapped[str] = mapped_column(Text)
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    version: Mapped[int] = mapped_column(Integer)

    hardware: Mapped[HardwareProfile] = relationship()
    prices: Mapped[list[OfferPrice]] = relationship(
        back_populates="offer", order_by="OfferPrice.effective_at", cascade="all, delete-orphan"
    )

    __mapper_args__ = {"version_id_col": version}

    @property
    def hardware_slug(self) -> str:
        return self.hardware.slug

    @property
    def price_per_kwh(self) -> Decimal | None:
        return price.price_per_kwh if (price := self.current_price) is not None else None


class OfferPrice(PriceRow, Base):
    """An offer's price per accelerator-hour (for an owned offer, its amortised capital, and the energy's
    price per kWh), in force from `effective_at` until the next one: the history is kept."""

    __tablename__ = "offer_prices"
    __table_args__ = (
        CheckConstraint("price_per_hour >= 0", name="price_not_negative"),
        CheckConstraint("price_per_kwh IS NULL OR price_per_kwh >= 0", name="energy_price_not_negative"),
        Index("ix_offer_prices_offer_id_effective_at", "offer_id", "effective_at"),
    )

    offer_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("offers.id", ondelete="CASCADE"))
    price_per_kwh: Mapped[Decimal | None] = mapped_column(Money)

    offer: Mapped[Offer] = relationship(back_populates="prices")

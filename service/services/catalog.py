"""Loading the built-in data into the database, idempotently (run by `flask --app service setup`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.data.catalog import PRECISIONS, HardwareSpec, builtin_hardware, sample_offers
from service.data.models import HARDWARE_FIGURES, HardwarePrice, HardwareProfile, Offer, utcnow
from service.infra.locks import hold_setup_lock
from service.services import offers


@dataclass
class CatalogLoad:
    """What a load did, slug by slug."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    repriced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # a custom profile already holds the slug


def _columns(spec: HardwareSpec) -> dict[str, object]:
    columns: dict[str, object] = {name: getattr(spec, name) for name in HARDWARE_FIGURES}
    columns.update({f"peak_flops_{p}": spec.peak_flops.get(p) for p in PRECISIONS})
    return columns


def _current_price(profile: HardwareProfile) -> HardwarePrice | None:
    return profile.prices[-1] if profile.prices else None


def load_builtin_hardware(session: Session, now: datetime | None = None) -> CatalogLoad:
    """Insert missing built-in profiles, bring changed ones up to date, record new prices as history."""
    hold_setup_lock(session.connection())
    now = now or utcnow()
    report = CatalogLoad()
    existing = {p.slug: p for p in session.scalars(select(HardwareProfile))}
    for spec in builtin_hardware():
        profile = existing.get(spec.slug)
        if profile is None:
            profile = HardwareProfile(
                slug=spec.slug, built_in=True, created_at=now, updated_at=now, **_columns(spec)
            )
            session.add(profile)
            report.created.append(spec.slug)
        elif not profile.built_in:
            report.skipped.append(spec.slug)
            continue
        else:
            changed = {k: v for k, v in _columns(spec).items() if getattr(profile, k) != v}
            for name, value in changed.items():
                setattr(profile, name, value)
            (report.updated if changed else report.unchanged).append(spec.slug)

        current = _current_price(profile)
        price = spec.price
        if price is not None and (
            current is None
            or (current.price_per_hour, current.currency, current.as_of)
            != (price.price_per_hour, price.currency, price.as_of)
        ):
            profile.prices.append(
                HardwarePrice(
                    price_per_hour=price.price_per_hour,
                    currency=price.currency,
                    as_of=price.as_of,
                    source=price.source,
                    effective_at=now,
                )
            )
            if spec.slug not in report.created:
                report.repriced.append(spec.slug)
    session.commit()
    return report


def load_sample_offers(session: Session) -> list[str]:
    """The sample offers (`offers.json`), into a service that has no offer: a newcomer can compare at once,
    and a service with offers of its own is left alone. Their slugs."""
    hold_setup_lock(session.connection())
    if session.scalar(select(Offer.id).limit(1)) is not None:
        session.rollback()
        return []
    created = [offers.new_offer(session, _offer_fields(entry)) for entry in sample_offers()]
    session.add_all(created)
    session.commit()
    return [offer.slug for offer in created]


def _offer_fields(entry: dict[str, Any]) -> offers.OfferFields:
    """A sample offer as POST /v1/offers takes it (a test loads each through OfferSchema too)."""
    fields: dict[str, Any] = {name: value for name, value in entry.items() if name != "hardware"}
    for name in ("price_per_hour", "price_per_kwh"):
        if name in fields:
            fields[name] = Decimal(fields[name])
    return offers.OfferFields(**fields, hardware_slug=entry["hardware"])

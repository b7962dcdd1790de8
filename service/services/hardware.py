"""Use cases for hardware profiles: the built-in catalog (read-only here) and custom profiles."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from service.data.catalog import PRECISIONS
from service.data.models import (
    HARDWARE_FIGURES,
    HardwarePrice,
    HardwareProfile,
    Plan,
    budget_hardware,
    utcnow,
)
from service.services.changes import Changes
from service.services.errors import ConflictError, NotFoundError
from service.services.pagination import Cursor, Page, paginate
from service.services.preconditions import require_version
from service.services.transactions import commit_new, commit_or

PRICE_FIELDS = ("price_per_hour", "currency", "price_as_of", "price_source")


@dataclass(frozen=True, kw_only=True)
class HardwareFields(Changes):
    """A custom profile's fields as a request sets them (what HardwareSchema loads); its slug only when it
    is created."""

    slug: str | None = None
    name: str | None = None
    vendor: str | None = None
    peak_flops: Mapping[str, float] | None = None  # by precision
    memory_bytes: int | None = None
    memory_bandwidth_bytes_per_second: int | None = None
    interconnect_bandwidth_bytes_per_second: int | None = None
    interconnect: str | None = None
    tdp_watts: int | None = None
    accelerators_per_node: int | None = None
    scale_up_bandwidth_bytes_per_second: int | None = None
    scale_out_bandwidth_bytes_per_second: int | None = None
    failures_per_accelerator_hour: float | None = None
    run_overhead: float | None = None  # what whole runs on it lose beyond failures and checkpoints
    efficiency: Mapping[str, Any] | None = None  # core.performance.Efficiency's fields
    source: str | None = None
    note: str | None = None
    price_per_hour: Decimal | None = None
    currency: str | None = None
    price_as_of: str | None = None  # ISO 8601, of year, month or day precision
    price_source: str | None = None


def list_hardware(
    session: Session, *, vendor: str | None, precision: str | None, limit: int, after: Cursor | None
) -> Page[HardwareProfile]:
    stmt = select(HardwareProfile).options(selectinload(HardwareProfile.prices))
    if vendor is not None:
        stmt = stmt.where(func.lower(HardwareProfile.vendor) == vendor.lower())
    if precision is not None:
        stmt = stmt.where(getattr(HardwareProfile, f"peak_flops_{precision}").is_not(None))
    return paginate(session, stmt, HardwareProfile, limit, after)


def get_hardware(session: Session, slug: str) -> HardwareProfile:
    """The profile `slug` names, with its prices."""
    profile = session.scalars(
        select(HardwareProfile)
        .where(HardwareProfile.slug == slug)
        .options(selectinload(HardwareProfile.prices))
    ).first()
    if profile is None:
        raise NotFoundError(f"No hardware profile {slug!r}.")
    return profile


def list_prices(session: Session, slug: str, *, limit: int, after: Cursor | None) -> Page[HardwarePrice]:
    profile = get_hardware(session, slug)
    stmt = select(HardwarePrice).where(HardwarePrice.hardware_id == profile.id)
    return paginate(session, stmt, HardwarePrice, limit, after, time="effective_at")


def create_hardware(session: Session, fields: HardwareFields) -> HardwareProfile:
    """A custom profile, with its first price when one is given. One transaction: all of it or nothing."""
    assert fields.slug is not None, "a new profile's slug is required (HardwareSchema)"
    now = utcnow()
    profile = HardwareProfile(slug=fields.slug, built_in=False, created_at=now, updated_at=now)
    _apply(profile, fields, replace=True)
    session.add(profile)
    _add_price_if_changed(profile, fields)
    commit_new(session, HardwareProfile, fields.slug, "A hardware profile")
    return profile


def update_hardware(
    session: Session, slug: str, fields: HardwareFields, *, if_match: str | None, replace: bool
) -> HardwareProfile:
    """PATCH (`replace=False`: only the fields given) or PUT (`replace=True`: the whole profile).

    A changed price is added to the price history, effective now; earlier prices stay as they were.
    """
    profile = get_hardware(session, slug)
    require_version(if_match, profile.version)
    _refuse_built_in(profile, "changed")
    _apply(profile, fields, replace=replace)
    _add_price_if_changed(profile, fields)
    if session.is_modified(profile):  # an update that changes nothing keeps the version (and the ETag)
        profile.updated_at = utcnow()
    session.commit()
    return profile


def delete_hardware(session: Session, slug: str, *, if_match: str | None) -> None:
    profile = get_hardware(session, slug)
    require_version(if_match, profile.version)
    _refuse_built_in(profile, "deleted")
    budgets = session.scalar(
        select(func.count()).select_from(budget_hardware).where(budget_hardware.c.hardware_id == profile.id)
    )
    if budgets:
        raise ConflictError(
            f"{budgets} budget(s) allow {slug!r}; remove it from them first.", budgets=budgets
        )
    plans = session.scalar(select(func.count()).select_from(Plan).where(Plan.hardware_id == profile.id))
    if plans:
        raise ConflictError(f"{plans} plan(s) use {slug!r}; it is kept with their history.", plans=plans)
    session.delete(profile)
    # Refused when a budget or a plan started to use it since we counted.
    commit_or(session, ConflictError(f"A budget or a plan now uses {slug!r}; it cannot be deleted."))


def _refuse_built_in(profile: HardwareProfile, action: str) -> None:
    if profile.built_in:
        raise ConflictError(
            f"{profile.slug!r} is built in: it is maintained by the catalog and cannot be {action}. "
            "Create a custom profile (POST /v1/hardware) for your own figures or prices."
        )


def _apply(profile: HardwareProfile, fields: HardwareFields, *, replace: bool) -> None:
    for name in HARDWARE_FIGURES:
        if fields.sets(name) or replace:
            setattr(profile, name, getattr(fields, name))
    if fields.sets("peak_flops") or replace:
        peaks = fields.peak_flops or {}
        for precision in PRECISIONS:
            setattr(profile, f"peak_flops_{precision}", peaks.get(precision))


def _add_price_if_changed(profile: HardwareProfile, fields: HardwareFields) -> None:
    """Add a price row when the price, its currency, its date or its source changes.

    Restating the current price and currency keeps the date and source not given with it; a new price
    has only the date and source given with it.
    """
    if fields.price_per_hour is None:
        return
    current = profile.current_price
    # The current price when the request restates it (price and currency), else None.
    restated = (
        current
        if current is not None
        and (current.price_per_hour, current.currency) == (fields.price_per_hour, fields.currency)
        else None
    )
    as_of = fields.given_or("price_as_of", restated.as_of if restated is not None else None)
    source = fields.given_or("price_source", restated.source if restated is not None else None)
    if restated is not None and (restated.as_of, restated.source) == (as_of, source):
        return
    profile.prices.append(
        HardwarePrice(
            price_per_hour=fields.price_per_hour,
            currency=fields.currency,
            as_of=as_of,
            source=source,
            effective_at=utcnow(),
        )
    )

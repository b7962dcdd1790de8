"""Use cases for hardware profiles: the built-in catalog (read-only here) and custom profiles."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from service.catalog import PRECISIONS
from service.models import HARDWARE_FIGURES, HardwarePrice, HardwareProfile, Plan, budget_hardware, utcnow
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


# Built-in profiles change only when `flask setup` loads a catalog (the API refuses to change them), so a
# process keeps what it read of them, prices included, for BUILT_IN_SECONDS: a plan on one reads no row of
# it. A catalog loaded into a running deployment is in use everywhere within that time. Custom profiles are
# read afresh: their owners change them through the API and expect the next plan to see it at once.
BUILT_IN_SECONDS = 60.0
# Where a session finds the built-in profiles of its database (Database gives its sessions one; sessions
# without it read every profile from the database).
BUILT_IN_HARDWARE = "built_in_hardware"


class BuiltInHardware:
    """The built-in profiles of one database as last read, shared by the sessions of a process."""

    def __init__(
        self,
        read_apart: Callable[[], Session],
        seconds: float = BUILT_IN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        # A session that reads without waiting for the writing one asking (on SQLite, a DEFERRED one).
        self._read_apart = read_apart
        self._seconds, self._clock = seconds, clock
        self._kept: dict[str, tuple[float, HardwareProfile]] = {}  # slug: (read at, detached profile)

    def get(self, session: Session, slug: str) -> HardwareProfile | None:
        """The profile `slug` names in `session` (no SQL), if it is built in and was read lately."""
        kept = self._kept.get(slug)
        if kept is None or self._clock() - kept[0] > self._seconds:
            return None
        # A copy in the session, its state taken as the database's (load=False: SQLAlchemy's way to put
        # cached objects back into a session); the kept one is only ever read.
        return session.merge(kept[1], load=False)

    def keep(self, slug: str) -> None:
        """Read `slug` apart (a session of its own, closed at once, leaves it detached) and keep it."""
        read_at = self._clock()
        with self._read_apart() as apart:
            profile = _read_profile(apart, slug)
        if profile is not None and profile.built_in:
            self._kept[slug] = (read_at, profile)

    def forget(self) -> None:
        self._kept.clear()


def get_hardware(session: Session, slug: str) -> HardwareProfile:
    built_in: BuiltInHardware | None = session.info.get(BUILT_IN_HARDWARE)
    if built_in is not None and (kept := built_in.get(session, slug)) is not None:
        return kept
    profile = _read_profile(session, slug)
    if profile is None:
        raise NotFoundError(f"No hardware profile {slug!r}.")
    if built_in is not None and profile.built_in:
        built_in.keep(slug)
    return profile


def _read_profile(session: Session, slug: str) -> HardwareProfile | None:
    return session.scalars(
        select(HardwareProfile)
        .where(HardwareProfile.slug == slug)
        .options(selectinload(HardwareProfile.prices))
    ).first()


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

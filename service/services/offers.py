"""Use cases for offers: where a hardware profile can be had, on what terms, at what price (with history)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, selectinload

from service.data.models import HardwareProfile, Offer, OfferPrice, utcnow
from service.services.changes import Changes
from service.services.errors import InvalidFieldError, NotFoundError
from service.services.hardware import get_hardware
from service.services.pagination import Cursor, Page, paginate
from service.services.preconditions import require_version
from service.services.transactions import commit_new

# What describes an offer besides its slug, hardware, pricing and price: set by POST and PATCH alike.
OFFER_TERMS = (
    "provider",
    "region",
    "availability_zone",
    "instance_type",
    "accelerators_per_instance",
    "term_days",
    "preemptions_per_instance_hour",
    "preemptions_source",
    "requeue_seconds",
    "pue",
    "grid_region",
    "source",
    "note",
)
# The terms only one pricing has (the schema states it for a new offer; a change is checked here).
PRICING_TERMS = {
    "term_days": "reserved",
    "preemptions_per_instance_hour": "spot",
    "preemptions_source": "spot",
    "requeue_seconds": "spot",
    "price_per_kwh": "owned",
}


@dataclass(frozen=True, kw_only=True)
class OfferFields(Changes):
    """An offer's fields as a request sets them (what OfferSchema loads); slug, hardware and pricing only
    when it is created: another pricing or hardware is another offer."""

    slug: str | None = None
    hardware_slug: str | None = None
    pricing: str | None = None
    provider: str | None = None
    region: str | None = None
    availability_zone: str | None = None
    instance_type: str | None = None
    accelerators_per_instance: int | None = None
    term_days: int | None = None
    preemptions_per_instance_hour: float | None = None
    preemptions_source: str | None = None
    requeue_seconds: float | None = None
    pue: float | None = None
    grid_region: str | None = None
    source: str | None = None
    note: str | None = None
    price_per_hour: Decimal | None = None
    price_per_kwh: Decimal | None = None
    currency: str | None = None
    price_as_of: str | None = None
    price_source: str | None = None


@dataclass(frozen=True)
class OfferFilter:
    """Which offers a list or a comparison takes: each given list is one of its values (None: any)."""

    hardware: tuple[str, ...] | None = None
    provider: tuple[str, ...] | None = None
    region: tuple[str, ...] | None = None
    pricing: tuple[str, ...] | None = None
    slugs: tuple[str, ...] | None = None


def _filtered(stmt: Select[Offer], chosen: OfferFilter) -> Select[Offer]:
    if chosen.hardware:
        stmt = stmt.where(
            Offer.hardware_id.in_(select(HardwareProfile.id).where(HardwareProfile.slug.in_(chosen.hardware)))
        )
    if chosen.provider:
        stmt = stmt.where(func.lower(Offer.provider).in_([name.lower() for name in chosen.provider]))
    if chosen.region:
        stmt = stmt.where(Offer.region.in_(chosen.region))
    if chosen.pricing:
        stmt = stmt.where(Offer.pricing.in_(chosen.pricing))
    if chosen.slugs:
        stmt = stmt.where(Offer.slug.in_(chosen.slugs))
    return stmt


def _loaded() -> Select[Offer]:
    return select(Offer).options(selectinload(Offer.prices), selectinload(Offer.hardware))


def list_offers(session: Session, chosen: OfferFilter, *, limit: int, after: Cursor | None) -> Page[Offer]:
    return paginate(session, _filtered(_loaded(), chosen), Offer, limit, after)


def find_offers(session: Session, chosen: OfferFilter, *, most: int) -> list[Offer]:
    """The offers `chosen` names (all of them, by slug, up to `most`): what a comparison sizes."""
    return list(session.scalars(_filtered(_loaded(), chosen).order_by(Offer.slug).limit(most)))


def hardware_offered(session: Session) -> list[str]:
    """The slugs of the hardware profiles some offer is of."""
    stmt = select(HardwareProfile.slug).join(Offer, Offer.hardware_id == HardwareProfile.id).distinct()
    return sorted(session.scalars(stmt))


def get_offer(session: Session, slug: str) -> Offer:
    offer = session.scalars(_loaded().where(Offer.slug == slug)).first()
    if offer is None:
        raise NotFoundError(f"No offer {slug!r}.")
    return offer


def list_prices(session: Session, slug: str, *, limit: int, after: Cursor | None) -> Page[OfferPrice]:
    offer = get_offer(session, slug)
    stmt = select(OfferPrice).where(OfferPrice.offer_id == offer.id)
    return paginate(session, stmt, OfferPrice, limit, after, time="effective_at")


def create_offer(session: Session, fields: OfferFields) -> Offer:
    """A new offer with its first price. One transaction: all of it or nothing."""
    assert fields.slug is not None, "OfferSchema requires a new offer's slug"
    offer = new_offer(session, fields)
    session.add(offer)
    commit_new(session, Offer, fields.slug, "An offer")
    return offer


def new_offer(session: Session, fields: OfferFields) -> Offer:
    """The offer `fields` describe, not yet added (create_offer, and the catalog import, add it)."""
    try:
        profile = get_hardware(session, fields.hardware_slug or "")
    except NotFoundError:
        raise InvalidFieldError(
            "hardware", f"No hardware profile {fields.hardware_slug!r} (see GET /v1/hardware)."
        ) from None
    now = utcnow()
    offer = Offer(slug=fields.slug, hardware=profile, pricing=fields.pricing, created_at=now, updated_at=now)
    for name in OFFER_TERMS:
        setattr(offer, name, getattr(fields, name))
    if offer.accelerators_per_instance is None:
        offer.accelerators_per_instance = 1
    add_price_if_changed(offer, fields)
    return offer


def update_offer(session: Session, slug: str, fields: OfferFields, *, if_match: str | None) -> Offer:
    """PATCH: the fields given. A changed price joins the price history, effective now."""
    offer = get_offer(session, slug)
    require_version(if_match, offer.version)
    _refuse_other_pricings_terms(offer.pricing, fields)
    for name in OFFER_TERMS:
        if fields.sets(name):
            setattr(offer, name, getattr(fields, name))
    _require_pricings_terms(offer)
    add_price_if_changed(offer, fields)
    if session.is_modified(offer):  # a change of nothing keeps the version (and the ETag)
        offer.updated_at = utcnow()
    session.commit()
    return offer


def delete_offer(session: Session, slug: str, *, if_match: str | None) -> None:
    offer = get_offer(session, slug)
    require_version(if_match, offer.version)
    session.delete(offer)
    session.commit()


def _refuse_other_pricings_terms(pricing: str, fields: OfferFields) -> None:
    for name, only in PRICING_TERMS.items():
        if fields.sets(name) and getattr(fields, name) is not None and pricing != only:
            raise InvalidFieldError(name, f"Only a {only} offer has {name}; this one is {pricing}.")


def _require_pricings_terms(offer: Offer) -> None:
    required = {"reserved": "term_days", "spot": "preemptions_per_instance_hour"}.get(offer.pricing)
    if required is not None and getattr(offer, required) is None:
        raise InvalidFieldError(
            required, f"A {offer.pricing} offer has its {required}; it cannot be cleared."
        )


def add_price_if_changed(offer: Offer, fields: OfferFields) -> bool:
    """Add a price row when the price, the energy's, the currency, the date or the source changes; whether
    one was added. Restating the current price keeps the date and source not given with it."""
    if fields.price_per_hour is None:
        if fields.sets("price_per_kwh") or fields.sets("currency"):
            raise InvalidFieldError("price_per_hour", "Give the price with a new energy price or currency.")
        return False
    if offer.pricing == "owned" and fields.price_per_kwh is None:
        raise InvalidFieldError("price_per_kwh", "An owned offer's price has the energy's price per kWh.")
    current = offer.current_price
    terms = (fields.price_per_hour, fields.price_per_kwh, fields.currency)
    restated = (
        current
        if current is not None and (current.price_per_hour, current.price_per_kwh, current.currency) == terms
        else None
    )
    as_of, source = fields.price_as_of, fields.price_source  # a new price has what is given with it
    if restated is not None:
        as_of = fields.given_or("price_as_of", restated.as_of)
        source = fields.given_or("price_source", restated.source)
        if (restated.as_of, restated.source) == (as_of, source):
            return False
    offer.prices.append(
        OfferPrice(
            price_per_hour=fields.price_per_hour,
            price_per_kwh=fields.price_per_kwh,
            currency=fields.currency,
            as_of=as_of,
            source=source,
            effective_at=utcnow(),
        )
    )
    return True


def slugs_taken(session: Session, slugs: Iterable[str]) -> dict[str, Offer]:
    """The stored offers among `slugs`, by slug, with their prices."""
    wanted = list(slugs)
    if not wanted:
        return {}
    return {offer.slug: offer for offer in session.scalars(_loaded().where(Offer.slug.in_(wanted)))}

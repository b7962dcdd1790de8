"""Importing offers from a public catalog: SkyPilot's `vms.csv` (skypilot-org/skypilot-catalog, catalogs/v8),
one file per cloud, a row per instance type and availability zone with its on-demand and spot prices.

Each row with an accelerator the service knows gives an on-demand offer per instance type and region (the
price is the region's) and, where the zone has spot capacity and the request gives a preemption rate, a spot
offer per zone. Prices are per instance-hour in the file and per accelerator-hour here. Rows that cannot be
mapped are reported with the reason, never dropped silently; rows without an accelerator (CPU instances, most
of a file) are counted. Format facts and their sources: docs/research/energy-and-offers.md, section 4.1.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy.orm import Session

from service.data.models import MONEY_SCALE
from service.services.errors import InvalidFieldError, NotFoundError
from service.services.hardware import get_hardware
from service.services.offers import OfferFields, add_price_if_changed, new_offer, slugs_taken

# The columns an importer needs, by name (their order differs between clouds).
REQUIRED_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice", "Region")
ZONE_COLUMN = "AvailabilityZone"
# SkyPilot's accelerator names (common/accelerators.csv, catalog v8) with a built-in profile of the same
# part. H100-MEGA is GCP's a3-mega: the same GPU on a faster network than the profile's. H100-NVL (a PCIe
# pair) and GH200 have no profile here: mapped by the request's `accelerators`, or reported.
ACCELERATOR_PROFILES = {
    "V100-32GB": "v100-sxm2-32gb",
    "A100": "a100-40gb",
    "A100-80GB": "a100-80gb",
    "A100-80GB-SXM": "a100-80gb",
    "H100": "h100-sxm",
    "H100-SXM": "h100-sxm",
    "H100-MEGA": "h100-sxm",
    "H200": "h200",
    "H200-SXM": "h200",
    "B200": "b200",
    "MI300X": "mi300x",
    "L4": "l4",
    "L40S": "l40s",
}
# GCP prices a TPU slice whole, as one accelerator named tpu-<generation>-<size>: the size counts TensorCores
# (2 a chip) for v2-v5p, chips for v5e ("v5litepod") and v6e (Google Cloud TPU documentation).
TPU_SLICE = re.compile(r"^tpu-(v4|v5p|v5litepod|v6e)-([0-9]+)$")
TPU_PROFILES = {
    "v4": ("tpu-v4", 2),
    "v5p": ("tpu-v5p", 2),
    "v5litepod": ("tpu-v5e", 1),
    "v6e": ("tpu-v6e", 1),
}
# A price GCP's file gives TPU rows of regions without the product, for on demand and spot alike.
PLACEHOLDER_PRICE = Decimal("700")
MAX_REFUSALS_LISTED = 10_000
_QUANTUM = Decimal(1).scaleb(-MONEY_SCALE)


@dataclass(frozen=True, kw_only=True)
class CatalogImport:
    """What OfferImportSchema loads: the file's text and what the file does not say."""

    catalog: str
    provider: str
    currency: str = "USD"
    source: str
    price_as_of: str | None = None
    spot_preemptions_per_instance_hour: float | None = None
    spot_preemptions_source: str | None = None
    accelerators: Mapping[str, str] = field(
        default_factory=dict
    )  # a name -> a hardware slug, over the built-in
    dry_run: bool = False


@dataclass
class ImportReport:
    rows: int = 0
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # a new price joined the history
    unchanged: int = 0
    without_accelerator: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)
    refused_count: int = 0
    dry_run: bool = False

    def refuse(self, line: int, row: Mapping[str, str], reason: str) -> None:
        self.refused_count += 1
        if len(self.refused) < MAX_REFUSALS_LISTED:
            self.refused.append(
                {
                    "line": line,
                    "instance_type": row.get("InstanceType") or None,
                    "accelerator": row.get("AcceleratorName") or None,
                    "region": row.get("Region") or None,
                    "availability_zone": row.get(ZONE_COLUMN) or None,
                    "reason": reason,
                }
            )


@dataclass(frozen=True)
class _Row:
    line: int
    cells: Mapping[str, str]
    hardware: str
    accelerators: int  # per instance (chips of a TPU slice)
    instance: str


def import_catalog(session: Session, request: CatalogImport) -> ImportReport:
    """Create or re-price the offers of the file, in one transaction (none of it on a dry run)."""
    report = ImportReport(dry_run=request.dry_run)
    wanted: dict[str, OfferFields] = {}
    for row in _mapped_rows(session, request, report):
        for fields in _offers_of(row, request, report):
            assert fields.slug is not None, "an imported offer has its slug"
            if fields.slug in wanted:  # another zone's row of the region's on-demand offer
                if wanted[fields.slug].price_per_hour != fields.price_per_hour:
                    report.refuse(
                        row.line, row.cells, f"another zone of {row.cells['Region']} prices it otherwise"
                    )
                continue
            wanted[fields.slug] = fields
    stored = slugs_taken(session, wanted)
    for slug, fields in wanted.items():
        offer = stored.get(slug)
        if offer is None:
            session.add(new_offer(session, fields))
            report.created.append(slug)
        elif (offer.hardware.slug, offer.pricing) != (fields.hardware_slug, fields.pricing):
            report.refuse(
                0, {"InstanceType": fields.instance_type or ""}, f"offer {slug!r} exists for other terms"
            )
        elif add_price_if_changed(offer, fields):
            offer.updated_at = offer.prices[-1].effective_at
            report.updated.append(slug)
        else:
            report.unchanged += 1
    if request.dry_run:
        session.rollback()
    else:
        session.commit()
    return report


def _mapped_rows(session: Session, request: CatalogImport, report: ImportReport) -> Iterator[_Row]:
    reader = csv.DictReader(io.StringIO(request.catalog, newline=""))
    header = [name.strip() for name in reader.fieldnames or []]
    missing = [name for name in REQUIRED_COLUMNS if name not in header]
    if missing:
        raise InvalidFieldError(
            "catalog", f"The header lacks {', '.join(missing)} (SkyPilot's vms.csv columns); it has {header}."
        )
    reader.fieldnames = header
    known: dict[str, bool] = {}
    for cells in reader:
        report.rows += 1
        line = reader.line_num
        name = (cells.get("AcceleratorName") or "").strip()
        if not name:
            report.without_accelerator += 1
            continue
        mapped = _profile_of(name, cells, request.accelerators)
        if isinstance(mapped, str):
            report.refuse(line, cells, mapped)
            continue
        slug, accelerators = mapped
        if slug not in known:
            known[slug] = _exists(session, slug)
        if not known[slug]:
            report.refuse(line, cells, f"accelerator {name!r} maps to {slug!r}, which is no hardware profile")
            continue
        instance = (cells.get("InstanceType") or "").strip()
        if not instance:
            if not TPU_SLICE.match(name):
                report.refuse(
                    line,
                    cells,
                    "the accelerator is priced apart from its host VM: give their sum as one offer",
                )
                continue
            instance = name
        yield _Row(line, cells, slug, accelerators, instance)


def _profile_of(name: str, cells: Mapping[str, str], given: Mapping[str, str]) -> tuple[str, int] | str:
    """The hardware slug and accelerators per instance of a row, or why there are none."""
    slice_ = TPU_SLICE.match(name)
    if name in given or (not slice_ and name in ACCELERATOR_PROFILES):
        count = _number(cells.get("AcceleratorCount"))
        if count is None or count <= 0 or count != count.to_integral_value():
            return f"AcceleratorCount {cells.get('AcceleratorCount')!r} is not a whole number of accelerators"
        return given.get(name) or ACCELERATOR_PROFILES[name], int(count)
    if slice_:
        slug, per_chip = TPU_PROFILES[slice_.group(1)]
        return slug, max(1, int(slice_.group(2)) // per_chip)
    return f"no hardware profile for accelerator {name!r}: map it in `accelerators`"


def _exists(session: Session, slug: str) -> bool:
    try:
        get_hardware(session, slug)
    except NotFoundError:
        return False
    return True


def _offers_of(row: _Row, request: CatalogImport, report: ImportReport) -> Iterator[OfferFields]:
    cells = row.cells
    price, spot = _number(cells.get("Price")), _number(cells.get("SpotPrice"))
    region = (cells.get("Region") or "").strip() or None
    zone = (cells.get(ZONE_COLUMN) or "").strip() or None
    if PLACEHOLDER_PRICE in (price, spot) and price == spot:
        report.refuse(row.line, cells, "a placeholder price (700.0) of a region without the product")
        return
    on_demand = OfferFields(
        slug=_slug(request.provider, row.instance, region),
        hardware_slug=row.hardware,
        pricing="on_demand",
        provider=request.provider,
        region=region,
        instance_type=row.instance,
        accelerators_per_instance=row.accelerators,
        source=request.source,
        price_per_hour=None if price is None else _per_accelerator(price, row),
        currency=request.currency,
        price_as_of=request.price_as_of,
        price_source=request.source,
    )
    if price is None:
        report.refuse(row.line, cells, "no on-demand price")
    else:
        yield on_demand
    if spot is None or spot == price:  # the same as on demand: no spot capacity there
        return
    if request.spot_preemptions_per_instance_hour is None:
        report.refuse(
            row.line, cells, "a spot price without a preemption rate: give spot_preemptions_per_instance_hour"
        )
        return
    yield dataclasses.replace(
        on_demand,
        slug=_slug(request.provider, row.instance, zone or region, "spot"),
        pricing="spot",
        availability_zone=zone,
        price_per_hour=_per_accelerator(spot, row),
        preemptions_per_instance_hour=request.spot_preemptions_per_instance_hour,
        preemptions_source=request.spot_preemptions_source,
    )


def _per_accelerator(price: Decimal, row: _Row) -> Decimal:
    return (price / row.accelerators).quantize(_QUANTUM)


def _number(text: str | None) -> Decimal | None:
    if text is None or not text.strip():
        return None
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() and value >= 0 else None


def _slug(*parts: str | None) -> str:
    """A slug of the parts: lowercase, hyphens for the rest; a long one keeps a hash of the whole."""
    text = re.sub(r"[^a-z0-9]+", "-", "-".join(part for part in parts if part).lower()).strip("-")
    if len(text) <= 63:
        return text
    return f"{text[:54].rstrip('-')}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"

"""The grid carbon intensities shipped with the package (`grid_intensity.json`): per region, location-based,
each with its source and year, and where a provider publishes one, its fleet's PUE.

Keys are cloud regions as `provider:region` (gcp:us-central1, aws:us-east-1) and places as ISO 3166 codes
(FR, US-IA). A key is matched without regard to case.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class GridIntensity:
    region: str
    location: str
    grid_intensity_g_per_kwh: float
    year: int
    basis: str  # "location": the grid's average, before any contract for clean energy
    source: str
    range: tuple[float, float] | None = None  # the figures of other years the source gives
    range_note: str | None = None
    pue: float | None = None  # the provider's published fleet PUE
    pue_source: str | None = None
    note: str | None = None


def _entry(entry: dict[str, Any]) -> GridIntensity:
    band = entry.get("range")
    return GridIntensity(
        region=entry["region"],
        location=entry["location"],
        grid_intensity_g_per_kwh=float(entry["grid_intensity_g_per_kwh"]),
        year=int(entry["year"]),
        basis=entry["basis"],
        source=entry["source"],
        range=None if band is None else (float(band[0]), float(band[1])),
        range_note=entry.get("range_note"),
        pue=entry.get("pue"),
        pue_source=entry.get("pue_source"),
        note=entry.get("note"),
    )


@cache
def grid_intensities() -> MappingProxyType[str, GridIntensity]:
    """Every region's figure, by its key in lower case."""
    text = resources.files(__package__).joinpath("grid_intensity.json").read_text(encoding="utf-8")
    entries = [_entry(entry) for entry in json.loads(text)["regions"]]
    found = {entry.region.lower(): entry for entry in entries}
    if len(found) != len(entries):
        raise ValueError("grid_intensity.json: a region is listed twice")
    return MappingProxyType(found)


def grid_intensity(region: str) -> GridIntensity | None:
    """The figure of `region` (any case), or None where the table has none."""
    return grid_intensities().get(region.strip().lower())

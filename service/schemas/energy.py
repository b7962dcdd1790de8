"""Energy and emissions: the site a request states (`SiteSchema`), a run's energy as the API shows it
(`EnergySchema`, made by services/energy.py's `energy_document`)."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate

from service.core.energy import (
    ASSUMED_NODE_OVERHEAD,
    DEFAULT_PUE,
    DEFAULT_SITE_PUE,
    MAX_GRAMS_CO2E_PER_KWH,
    MAX_PUE,
    NO_GRID_INTENSITY,
    NO_POWER_FIGURE,
    POWER_BASES,
)
from service.data.catalog.grid import grid_intensities
from service.schemas.common import CaveatSchema, DocumentSchema, StrictSchema, excludes
from service.schemas.fields import Number, PairField, Text
from service.services import energy
from service.services.energy import SiteRequest

REGION_KEYS = (
    "cloud regions as provider:region (gcp:us-central1, aws:us-east-1), places as ISO 3166 codes (FR, US-IA)"
)


def power_basis_field() -> ma.fields.String:
    return ma.fields.String(
        validate=validate.OneOf(POWER_BASES),
        metadata={
            "description": "How the accelerators' power is counted. modeled (default): the draw of a "
            "training run, from an idle floor of 15% of the TDP up to it (83% busy, as OLMo 2's H100s "
            "measured), plus the node's CPUs, memory and network (the DGX rating less its GPUs, at 80% "
            "load). tdp: the TDP throughout and nothing else, as Llama 2, Llama 3.1 and BLOOM counted theirs."
        },
    )


class SiteSchema(StrictSchema):
    """Where a run draws its power. Left out: PUE 1.2 and no emissions (a no_grid_intensity warning)."""

    region = Text(
        validate=validate.Length(min=1, max=100),
        metadata={
            "description": f"A region whose grid's intensity the service knows: {REGION_KEYS}, in any case "
            "(service/data/catalog/grid_intensity.json has each figure's source and year). A region it does "
            "not know is a 422 saying so.",
            # Stated for clients and fuzzers; the service checks it itself, to say what to give instead.
            "enum": [entry.region for entry in grid_intensities().values()],
            "example": "gcp:us-central1",
        },
    )
    pue = Number(
        validate=validate.Range(1, MAX_PUE),
        metadata={
            "description": "The site's power usage effectiveness (facility over IT energy). Default: the "
            f"region's provider's published fleet figure, else {DEFAULT_PUE} (in 1.08-1.58)."
        },
    )
    grid_intensity_g_per_kwh = Number(
        validate=validate.Range(0, MAX_GRAMS_CO2E_PER_KWH),
        metadata={
            "description": "The grid's location-based carbon intensity, gCO2e per kWh; instead of region."
        },
    )
    market_grid_intensity_g_per_kwh = Number(
        validate=validate.Range(0, MAX_GRAMS_CO2E_PER_KWH),
        metadata={
            "description": "Market-based intensity, gCO2e per kWh, after the site's contracts for clean "
            "energy: adds market_emissions_kg_co2e beside the location-based emissions."
        },
    )

    RULES = (
        excludes(
            "grid_intensity_g_per_kwh",
            "region",
            "Give the region or the grid's intensity, not both.",
            at="grid_intensity_g_per_kwh",
        ),
    )
    REQUEST = SiteRequest


class EnergyIntervalsSchema(ma.Schema):
    energy_kwh = PairField(metadata={"description": "[low, high]"})
    emissions_kg_co2e = PairField(
        allow_none=True, metadata={"description": "[low, high]; null without a grid."}
    )
    market_emissions_kg_co2e = PairField(allow_none=True)


class EnergyMethodSchema(ma.Schema):
    model_version = ma.fields.String()
    power_basis = ma.fields.String(metadata={"enum": list(POWER_BASES)})
    tdp_watts = ma.fields.Float(
        allow_none=True, metadata={"description": "Of one accelerator; null: unknown."}
    )
    accelerator_watts = ma.fields.Float(
        allow_none=True, metadata={"description": "Drawn by one accelerator."}
    )
    overhead_watts = ma.fields.Float(
        allow_none=True, metadata={"description": "Drawn by its share of the node (CPUs, memory, network)."}
    )
    node_overhead_watts = ma.fields.Float(
        allow_none=True,
        metadata={"description": "Its share of the node at the node's rating (modeled only)."},
    )
    node_overhead_basis = ma.fields.String(
        allow_none=True,
        metadata={
            "enum": ["rating", "assumed", None],
            "description": "rating: an NVIDIA DGX's maximum less its GPUs; assumed: a share of the TDP.",
        },
    )
    utilisation = ma.fields.Float(
        allow_none=True,
        metadata={"description": "Share of the time the accelerators are busy (modeled only)."},
    )


class EnergySiteSchema(ma.Schema):
    pue = ma.fields.Float()
    pue_source = ma.fields.String(
        metadata={
            "description": "default (1.2 assumed), given in the request, or the provider's published figure."
        }
    )
    region = ma.fields.String(allow_none=True)
    location = ma.fields.String(allow_none=True)
    grid_intensity_g_per_kwh = ma.fields.Float(allow_none=True)
    grid_intensity_basis = ma.fields.String(allow_none=True, metadata={"enum": ["location", None]})
    grid_intensity_source = ma.fields.String(allow_none=True)
    grid_intensity_year = ma.fields.Integer(allow_none=True)
    grid_intensity_note = ma.fields.String(allow_none=True)
    market_grid_intensity_g_per_kwh = ma.fields.Float(allow_none=True)


class EnergySchema(DocumentSchema):
    """A run's energy and emissions (services/energy.py): facility energy (IT energy times the PUE) and its
    location-based emissions (times the grid's intensity), with intervals that span the power model's bands,
    the PUE's, the grid's years and the run's accelerator-hours."""

    document = energy.energy_document

    energy_kwh = ma.fields.Float(
        allow_none=True, metadata={"description": "Facility energy; null when the hardware states no TDP."}
    )
    emissions_kg_co2e = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "Location-based; null without a grid intensity (site.region or "
            "site.grid_intensity_g_per_kwh) or a power figure."
        },
    )
    market_emissions_kg_co2e = ma.fields.Float(
        allow_none=True, metadata={"description": "With site.market_grid_intensity_g_per_kwh."}
    )
    intervals = ma.fields.Nested(EnergyIntervalsSchema, allow_none=True)
    it_energy_kwh = ma.fields.Float(allow_none=True, metadata={"description": "Before the PUE."})
    method = ma.fields.Nested(EnergyMethodSchema)
    site = ma.fields.Nested(EnergySiteSchema)
    warnings = ma.fields.List(
        ma.fields.Nested(CaveatSchema),
        metadata={
            "description": "Codes: "
            f"{NO_POWER_FIGURE}, {NO_GRID_INTENSITY}, {ASSUMED_NODE_OVERHEAD}, {DEFAULT_SITE_PUE}."
        },
    )


class GridIntensitySchema(ma.Schema):
    region = ma.fields.String(metadata={"example": "gcp:us-central1"})
    location = ma.fields.String(metadata={"example": "Iowa"})
    grid_intensity_g_per_kwh = ma.fields.Float(metadata={"description": "Location-based, gCO2e per kWh."})
    year = ma.fields.Integer()
    basis = ma.fields.String(metadata={"enum": ["location"]})
    source = ma.fields.String()
    range = ma.fields.List(
        ma.fields.Float(), allow_none=True, metadata={"description": "[low, high]: other years' figures."}
    )
    range_note = ma.fields.String(allow_none=True)
    pue = ma.fields.Float(allow_none=True, metadata={"description": "The provider's published fleet PUE."})
    pue_source = ma.fields.String(allow_none=True)
    note = ma.fields.String(allow_none=True)


class GridIntensityListSchema(ma.Schema):
    items = ma.fields.List(ma.fields.Nested(GridIntensitySchema), required=True)

"""Energy and emissions of planned runs: the power of their hardware, their site (a region's grid from the
table shipped with the service, or what the request states), and the documents that show them.

The figures are not the engine's: they follow from an estimate's accelerator-hours (core/energy.py), so the
engine's version does not change with them. A plan keeps what they rest on in its snapshot
(`snapshot["energy"]`: the hardware's TDP, the node overhead, the PUE, the grid's figure with its source and
year) and shows them in its estimate, so that its energy is evaluated again as it was made, whatever the
table holds since. Plans made before energy was modelled have no `snapshot["energy"]` and no `energy` in
their estimate.

For other use cases (offers, comparisons), `estimate_energy` and `hours_energy` take a site and the hardware
and answer a `RunEnergy`, which `energy_document` (and schemas/energy.py's EnergySchema) shows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from service.core import energy as model
from service.core import engine
from service.core import validation as v
from service.core.energy import GridFigure, RunEnergy, RunPower, RunSite
from service.data.catalog.grid import GridIntensity, grid_intensity
from service.services.documents import JsonObject, from_document, to_document

# The version of what a plan's energy rests on (core/energy.py's model and constants, this module's choices):
# shown with every figure, kept in snapshots.
ENERGY_MODEL_VERSION = "1.0"
DEFAULT_POWER_BASIS = "modeled"
REQUEST_SOURCE = "given in the request"


@dataclass(frozen=True, kw_only=True)
class SiteRequest:
    """Where a run draws its power, as a request states it: a region whose grid the table knows
    (GET /v1/grid-intensities), or the grid's location-based intensity; the PUE (the region's provider's
    published fleet figure, else core.energy.DEFAULT_PUE); and a market-based intensity, after the site's
    contracts for clean energy, when it has one."""

    region: str | None = None
    pue: float | None = None
    grid_intensity_g_per_kwh: float | None = None
    market_grid_intensity_g_per_kwh: float | None = None


def region_figure(region: str, *, field: str = "site.region") -> GridIntensity:
    """The table's figure for `region`; refused naming `field` when it has none."""
    found = grid_intensity(region)
    if found is None:
        raise v.InvalidInput(
            field, f"no carbon figure for region {region!r}; give grid_intensity_g_per_kwh instead"
        )
    return found


def run_site(site: SiteRequest | None, *, field: str = "site") -> RunSite:
    """The site a request states, its region's figures looked up (a region without one is refused, naming
    `field`.region). Nothing stated: the default PUE, and no grid, so no emissions."""
    if site is None:
        return RunSite()
    grid, pue, pue_range, pue_source = None, site.pue, None, None
    if site.region is not None:
        found = region_figure(site.region, field=f"{field}.region")
        grid = GridFigure(
            grams_co2e_per_kwh=found.grid_intensity_g_per_kwh,
            basis=found.basis,
            source=found.source,
            year=found.year,
            region=found.region,
            location=found.location,
            grams_co2e_per_kwh_range=found.range,
            note=found.note,
        )
        if pue is None and found.pue is not None:
            pue, pue_range, pue_source = found.pue, model.HYPERSCALE_PUE_RANGE, found.pue_source
    if site.grid_intensity_g_per_kwh is not None:
        grid = GridFigure(
            grams_co2e_per_kwh=v.in_range(
                f"{field}.grid_intensity_g_per_kwh",
                site.grid_intensity_g_per_kwh,
                0.0,
                model.MAX_GRAMS_CO2E_PER_KWH,
            ),
            basis="location",
            source=REQUEST_SOURCE,
        )
    if site.pue is not None:
        pue = v.in_range(f"{field}.pue", site.pue, 1.0, model.MAX_PUE)
        pue_range, pue_source = None, REQUEST_SOURCE
    market = site.market_grid_intensity_g_per_kwh
    if market is not None:
        market = v.in_range(
            f"{field}.market_grid_intensity_g_per_kwh", market, 0.0, model.MAX_GRAMS_CO2E_PER_KWH
        )
    return RunSite(
        pue=pue, pue_range=pue_range, pue_source=pue_source, grid=grid, market_grams_co2e_per_kwh=market
    )


def setting_document(
    hardware: str | None, tdp_watts: float | None, site: SiteRequest | None, power_basis: str | None
) -> dict[str, Any]:
    """What a run's energy rests on, as a plan's snapshot keeps it: the power of the hardware (its slug and
    TDP, None when it states none) counted as `power_basis` says, and the site."""
    try:
        power = model.run_power(power_basis or DEFAULT_POWER_BASIS, tdp_watts, hardware)
    except v.InvalidInput as error:
        if error.argument == "power_basis":
            raise
        raise v.InvalidInput("hardware", f"its tdp_watts {error.message}") from None
    return {
        "model_version": ENERGY_MODEL_VERSION,
        "hardware": hardware,
        "power": to_document(power),
        "site": to_document(run_site(site)),
    }


def assess(
    accelerator_hours: float,
    setting: JsonObject,
    *,
    accelerator_hours_interval: tuple[float, float] | None = None,
    hardware: str | None = None,
) -> RunEnergy:
    """The energy of a run of `accelerator_hours` by a setting (`setting_document`)."""
    power = from_document(RunPower, setting["power"])
    site = from_document(RunSite, setting["site"])
    return model.run_energy(
        accelerator_hours,
        power,
        site,
        accelerator_hours_interval=accelerator_hours_interval,
        hardware=hardware or setting.get("hardware") or "the hardware",
    )


def with_energy(run: engine.Estimate, setting: JsonObject | None) -> engine.Estimate:
    """The estimate with its energy by `setting` (unchanged without one: plans from before energy)."""
    if setting is None:
        return run
    hours = run.intervals.accelerator_hours if run.intervals is not None else None
    assessed = assess(
        run.runtime.accelerator_hours,
        setting,
        accelerator_hours_interval=hours,
        hardware=run.cluster.hardware.slug or run.cluster.hardware.name,
    )
    return dataclasses.replace(run, energy=assessed)


def plan_with_energy(plan: engine.Plan, setting: JsonObject | None) -> engine.Plan:
    """The plan with its estimate's energy by `setting` (`with_energy`)."""
    if plan.estimate is None or setting is None:
        return plan
    return dataclasses.replace(plan, estimate=with_energy(plan.estimate, setting))


# --- For offers and comparisons -----------------------------------------------------------------------------


def hours_energy(
    accelerator_hours: float,
    *,
    hardware: str | None = None,
    tdp_watts: float | None,
    site: SiteRequest | None = None,
    power_basis: str = DEFAULT_POWER_BASIS,
    accelerator_hours_interval: tuple[float, float] | None = None,
    utilisation: float | None = None,
) -> RunEnergy:
    """The energy and emissions of `accelerator_hours` on hardware `hardware` (a catalog slug: its node's
    overhead is sourced for some) of `tdp_watts` (None: not known, and the answer says so), at `site`
    (None: the default PUE and no emissions), counted as `power_basis` says ("modeled": the draw of a
    training run, core.energy.MEASURED_TRAINING_UTILISATION unless `utilisation` is given; "tdp": the TDP
    throughout, as published runs counted). Bad input raises core.validation.InvalidInput naming it
    ("site.region": a region without a figure; "accelerator_hours", "tdp_watts", "utilisation", ...)."""
    power = model.run_power(power_basis, tdp_watts, hardware)
    if utilisation is not None:
        power = dataclasses.replace(power, utilisation=v.in_range("utilisation", utilisation, 0.0, 1.0))
    return model.run_energy(
        accelerator_hours,
        power,
        run_site(site),
        accelerator_hours_interval=accelerator_hours_interval,
        hardware=hardware or "the hardware",
    )


def estimate_energy(
    run: engine.Estimate,
    *,
    tdp_watts: float | None,
    site: SiteRequest | None = None,
    power_basis: str = DEFAULT_POWER_BASIS,
) -> RunEnergy:
    """`hours_energy` of an engine estimate: its accelerator-hours and their interval, on its hardware."""
    hours = run.intervals.accelerator_hours if run.intervals is not None else None
    return hours_energy(
        run.runtime.accelerator_hours,
        hardware=run.cluster.hardware.slug,
        tdp_watts=tdp_watts,
        site=site,
        power_basis=power_basis,
        accelerator_hours_interval=hours,
    )


# --- Documents ----------------------------------------------------------------------------------------------


def energy_document(assessed: RunEnergy) -> dict[str, Any]:
    """A run's energy as the API shows it (schemas/energy.py describes it)."""
    energy, power, site = assessed.energy, assessed.power, assessed.site
    grid = site.grid
    emitted = assessed.has_emissions
    market = None if energy is None else energy.market_emissions_kg_co2e
    return {
        "energy_kwh": None if energy is None else float(energy.energy_kwh),
        "emissions_kg_co2e": float(energy.emissions_kg_co2e) if emitted and energy else None,
        "market_emissions_kg_co2e": None if market is None else float(market),
        "intervals": None
        if energy is None
        else {
            "energy_kwh": _pair(energy.energy_kwh_interval),
            "emissions_kg_co2e": _pair(energy.emissions_kg_co2e_interval) if emitted else None,
            "market_emissions_kg_co2e": _pair(energy.market_emissions_kg_co2e_interval),
        },
        "it_energy_kwh": None if energy is None else float(energy.it_energy_kwh),
        "method": {
            "model_version": ENERGY_MODEL_VERSION,
            "power_basis": power.basis,
            "tdp_watts": power.tdp_watts,
            "accelerator_watts": None if energy is None else float(energy.accelerator_watts),
            "overhead_watts": None if energy is None else float(energy.overhead_watts),
            "node_overhead_watts": None if power.overhead is None else float(power.overhead.watts),
            "node_overhead_basis": None if power.overhead is None else power.overhead.basis,
            "utilisation": float(power.utilisation) if power.basis == "modeled" else None,
        },
        "site": {
            "pue": model.DEFAULT_PUE if site.pue is None else float(site.pue),
            "pue_source": site.pue_source or "default",
            "region": None if grid is None else grid.region,
            "location": None if grid is None else grid.location,
            "grid_intensity_g_per_kwh": None if grid is None else float(grid.grams_co2e_per_kwh),
            "grid_intensity_basis": None if grid is None else grid.basis,
            "grid_intensity_source": None if grid is None else grid.source,
            "grid_intensity_year": None if grid is None else grid.year,
            "grid_intensity_note": None if grid is None else grid.note,
            "market_grid_intensity_g_per_kwh": site.market_grams_co2e_per_kwh,
        },
        "warnings": [
            {"code": caveat.code, "message": caveat.message, "details": dict(caveat.details)}
            for caveat in assessed.caveats
        ],
    }


def _pair(pair: tuple[float, float] | None) -> list[float] | None:
    return None if pair is None else [float(bound) for bound in pair]


def energy_kwh(assessed: RunEnergy | None) -> float | None:
    """A run's energy, as a plan's column keeps it for reports (None: not estimated)."""
    if assessed is None or assessed.energy is None:
        return None
    return float(assessed.energy.energy_kwh)


def emissions_kg_co2e(assessed: RunEnergy | None) -> float | None:
    """A run's location-based emissions, as a plan's column keeps it (None: no power figure or no grid)."""
    if assessed is None or assessed.energy is None or not assessed.has_emissions:
        return None
    return float(assessed.energy.emissions_kg_co2e)

"""The energy a run draws and the emissions of generating it: accelerators, their node, the site, the grid.

An accelerator draws P = TDP·(i + (1 - i)·u): an idle floor i·TDP, rising linearly to its TDP as the share u
of the time its compute units are busy goes to 1. Its share of the node (CPUs, memory, NICs, fans) draws the
node's rated overhead per accelerator times a load factor. The IT energy of a run is hours times their sum,
the facility's is that times the site's PUE (power usage effectiveness: facility over IT energy), and the
emissions are the facility's energy times the grid's carbon intensity, location-based (the grid's average)
and, where a site states one, market-based (after its contracts for clean energy).

Published runs used simpler methods, which `at_constant_power` reproduces: hours times a constant power per
accelerator times a PUE and an intensity, the power being the TDP (Llama 2 and 3.1, BLOOM: Touvron et al.
2023; the Llama 3.1 model card; Luccioni et al. 2022) or a measured system power (Patterson et al. 2021).
Figures and their sources: docs/research/energy-and-offers.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from service.core import units
from service.core import validation as v
from service.core.caveats import Caveat

# While an H100 node of OLMo 2 7B wrote a checkpoint, its GPUs drew "just over 100W, or about 15%" of their
# 700 W (Morrison et al. 2025, Figure 2): the floor of a powered GPU waiting on the rest of the job. No source
# here measures the floor of other accelerators; the band of 0.10-0.20 around it is a judgement.
DEFAULT_IDLE_SHARE = 0.15
DEFAULT_IDLE_SHARE_RANGE = (0.10, 0.20)
# Training draws more than MFU suggests: OLMo 2's H100s drew > 600 W of 700 W while stepping (Morrison et al.
# 2025, Figure 2) at an MFU near 40%, i.e. busy u = (600/700 - 0.15) / 0.85 ≈ 0.83 of the time. An MFU passed
# as the utilisation understates the draw; this is the measured alternative.
MEASURED_TRAINING_UTILISATION = (600 / 700 - DEFAULT_IDLE_SHARE) / (1 - DEFAULT_IDLE_SHARE)
# How far the draw of a run strays from the utilisation its caller states: a judgement, as wide as the
# spread of measured 8-H100 training draws (76% of the node's rating, Newkirk et al. 2025; 83%, Latif et al.
# 2025; > 85% of the GPUs' TDP, Morrison et al. 2025) is several times over.
UTILISATION_SPREAD = 0.10

# Node overhead per accelerator at the node's rating: an NVIDIA DGX's maximum system power less its eight
# GPUs' TDP, over eight (DGX A100 "6.5 kW max", DGX H100/H200 "~10.2 kW max", DGX B200 "~14.3 kW max",
# NVIDIA user guides). GB200 NVL72: ~120 kW a rack for 72 GPUs of 1 200 W with 36 Grace CPUs and the
# switches (secondary transcriptions of NVIDIA's specification). Keyed by the built-in catalog's slugs.
DGX_A100_OVERHEAD_WATTS = (6_500 - 8 * 400) / 8  # 412.5
DGX_H100_OVERHEAD_WATTS = (10_200 - 8 * 700) / 8  # 575
DGX_B200_OVERHEAD_WATTS = (14_300 - 8 * 1_000) / 8  # 787.5
GB200_NVL72_OVERHEAD_WATTS = 120_000 / 72 - 1_200  # 467
NODE_OVERHEAD_WATTS = {
    "a100-40gb": DGX_A100_OVERHEAD_WATTS,
    "a100-80gb": DGX_A100_OVERHEAD_WATTS,
    "h100-sxm": DGX_H100_OVERHEAD_WATTS,
    "h200": DGX_H100_OVERHEAD_WATTS,
    "b200": DGX_B200_OVERHEAD_WATTS,
    "gb200": GB200_NVL72_OVERHEAD_WATTS,
}
# Hardware without a sourced node (MI300X, TPUs, PCIe cards...) is assumed to carry the DGX H100's overhead
# for its TDP, 575/700 = 0.82: the middle of the three DGX generations (A100 1.03, B200 0.79).
ASSUMED_OVERHEAD_SHARE_OF_TDP = DGX_H100_OVERHEAD_WATTS / 700
# A DGX's maximum is its power supplies' rating, not its draw: an 8-H100 node measured 8.48 kW of its 10.2 kW
# with the GPUs near full use (Latif et al. 2025), 0.83 of the rating, ~0.8. The band runs from that node less
# eight GPUs at their 700 W TDP ((8.48 - 5.6) / 4.6 = 0.63, ~0.6) to the rating itself.
DEFAULT_OVERHEAD_LOAD = 0.8
DEFAULT_OVERHEAD_LOAD_RANGE = (0.6, 1.0)

# An unstated site: 1.2, a cloud or colocation site's (BLOOM's Jean Zay, Luccioni et al. 2022; AI2's Jupiter,
# Morrison et al. 2025; Uptime 2024: new large builds "1.3 or even better"); its band from the best fleet
# reported (Meta 1.08, 2023) to the industry average (Uptime Institute 2023: 1.58).
DEFAULT_PUE = 1.2
DEFAULT_PUE_RANGE = (1.08, 1.58)
# A hyperscaler's own site: Google's fleet 1.10 (2021), Meta's 1.08 (2023), Meta's new buildings 1.09.
HYPERSCALE_PUE = 1.1
HYPERSCALE_PUE_RANGE = (1.08, 1.2)
INDUSTRY_AVERAGE_PUE = 1.58  # Uptime Institute 2023, flat at 1.55-1.59 since ~2020

# Bounds that catch unit mistakes. PUE is facility over IT energy, so at least 1; past 3, nearly twice the
# industry average, a figure is mistaken rather than a site. The dirtiest grids emit about 1 000 g/kWh
# (coal); 2 000 is a mistake. 100 kW an accelerator is seven whole DGX B200s (the hardware schema's TDP
# bound).
MAX_PUE = 3.0
MAX_GRAMS_CO2E_PER_KWH = 2_000.0
MAX_WATTS = 100_000.0
MAX_ACCELERATOR_HOURS = units.MAX_ACCELERATORS * units.MAX_DAYS * 24

BASES = ("modeled", "tdp", "measured")  # how a run's power was found: `Energy.basis`
OVERHEAD_BASES = ("rating", "assumed")  # where a node overhead comes from: `NodeOverhead.basis`

Band = tuple[float, float]


@dataclass(frozen=True)
class NodeOverhead:
    watts: float  # per accelerator, at the node's rating
    basis: str  # "rating": a vendor's node rating (NODE_OVERHEAD_WATTS); "assumed": a share of the TDP


def node_overhead(slug: str | None, tdp_watts: float) -> NodeOverhead:
    """The node overhead per accelerator of the catalog's hardware `slug`, or an assumed share of its TDP
    (ASSUMED_OVERHEAD_SHARE_OF_TDP) where no node rating is sourced."""
    tdp = v.positive("tdp_watts", tdp_watts, maximum=MAX_WATTS)
    if slug in NODE_OVERHEAD_WATTS:
        return NodeOverhead(NODE_OVERHEAD_WATTS[slug], "rating")
    return NodeOverhead(ASSUMED_OVERHEAD_SHARE_OF_TDP * tdp, "assumed")


@dataclass(frozen=True)
class PowerModel:
    """One accelerator and its share of the node. A band that leaves its point out is stretched to it."""

    tdp_watts: float
    overhead_watts: float = 0.0  # per accelerator, at the node's rating (`node_overhead`)
    idle_share: float = DEFAULT_IDLE_SHARE
    idle_share_range: Band = DEFAULT_IDLE_SHARE_RANGE
    overhead_load: float = DEFAULT_OVERHEAD_LOAD
    overhead_load_range: Band = DEFAULT_OVERHEAD_LOAD_RANGE


@dataclass(frozen=True)
class Site:
    """Where a run draws its power: the grid's intensity and the site's PUE (None: not stated, DEFAULT_PUE in
    DEFAULT_PUE_RANGE; stated without a range: known exactly)."""

    grams_co2e_per_kwh: float  # location-based: the grid's average
    pue: float | None = None
    pue_range: Band | None = None
    grams_co2e_per_kwh_range: Band | None = None  # e.g. the spread of the grid's recent years
    market_grams_co2e_per_kwh: float | None = None  # after the site's contracts (Meta reports 0)


@dataclass(frozen=True)
class Energy:
    basis: str  # one of BASES
    accelerator_hours: float
    accelerator_watts: float  # drawn by one accelerator
    overhead_watts: float  # drawn by its share of the node
    it_energy_kwh: float
    pue: float
    energy_kwh: float  # the facility's: IT energy times PUE
    emissions_kg_co2e: float  # location-based
    energy_kwh_interval: Band
    emissions_kg_co2e_interval: Band
    market_emissions_kg_co2e: float | None = None
    market_emissions_kg_co2e_interval: Band | None = None


def accelerator_watts(tdp_watts: float, utilisation: float, idle_share: float = DEFAULT_IDLE_SHARE) -> float:
    """Power one accelerator draws when busy a share `utilisation` of the time: TDP·(i + (1 - i)·u), i the
    `idle_share` (its floor as a share of TDP)."""
    tdp = v.positive("tdp_watts", tdp_watts, maximum=MAX_WATTS)
    u = v.in_range("utilisation", utilisation, 0.0, 1.0)
    i = v.in_range("idle_share", idle_share, 0.0, 1.0)
    return tdp * _busy_share(u, i)


def training_energy(
    accelerator_hours: float,
    power: PowerModel,
    site: Site,
    *,
    utilisation: float,
    utilisation_range: Band | None = None,
) -> Energy:
    """Energy and emissions of `accelerator_hours` at `utilisation` (see `accelerator_watts`): accelerators
    and node overhead, times the site's PUE and intensity. The interval evaluates the model at the low and
    high ends of every band (utilisation: ± UTILISATION_SPREAD unless given); the draw rises with each input,
    so those two corners bound it."""
    hours = _accelerator_hours(accelerator_hours)
    u = v.in_range("utilisation", utilisation, 0.0, 1.0)
    if utilisation_range is None:
        utilisation_range = (max(u - UTILISATION_SPREAD, 0.0), min(u + UTILISATION_SPREAD, 1.0))
    u_band = _band("utilisation_range", u, utilisation_range, 0.0, 1.0)
    tdp = v.positive("tdp_watts", power.tdp_watts, maximum=MAX_WATTS)
    idle = v.in_range("idle_share", power.idle_share, 0.0, 1.0)
    idle_band = _band("idle_share_range", idle, power.idle_share_range, 0.0, 1.0)
    overhead = v.in_range("overhead_watts", power.overhead_watts, 0.0, MAX_WATTS)
    load = v.in_range("overhead_load", power.overhead_load, 0.0, 1.0)
    load_band = _band("overhead_load_range", load, power.overhead_load_range, 0.0, 1.0)

    def it_watts(corner: int) -> float:
        return tdp * _busy_share(u_band[corner], idle_band[corner]) + overhead * load_band[corner]

    drawn = accelerator_watts(tdp, u, idle)
    return _energy(
        "modeled", hours, site, drawn=drawn, overhead=overhead * load, it_band=(it_watts(0), it_watts(1))
    )


def at_constant_power(
    accelerator_hours: float, watts_per_accelerator: float, site: Site, *, basis: str = "tdp"
) -> Energy:
    """Energy and emissions as published runs counted them: hours times a constant `watts_per_accelerator`
    (the TDP, basis "tdp"; or a measured average system power, basis "measured"), times the site's PUE and
    intensity. Nothing else is counted, so its interval spans only the site's bands."""
    hours = _accelerator_hours(accelerator_hours)
    watts = v.positive("watts_per_accelerator", watts_per_accelerator, maximum=MAX_WATTS)
    return _energy(
        v.choice("basis", basis, BASES[1:]), hours, site, drawn=watts, overhead=0.0, it_band=(watts, watts)
    )


def _energy(basis: str, hours: float, site: Site, *, drawn: float, overhead: float, it_band: Band) -> Energy:
    pue = DEFAULT_PUE if site.pue is None else v.in_range("pue", site.pue, 1.0, MAX_PUE)
    stated = site.pue_range or (DEFAULT_PUE_RANGE if site.pue is None else (pue, pue))
    pue_band = _band("pue_range", pue, stated, 1.0, MAX_PUE)
    grams = v.in_range("grams_co2e_per_kwh", site.grams_co2e_per_kwh, 0.0, MAX_GRAMS_CO2E_PER_KWH)
    grams_band = _band(
        "grams_co2e_per_kwh_range",
        grams,
        site.grams_co2e_per_kwh_range or (grams, grams),
        0.0,
        MAX_GRAMS_CO2E_PER_KWH,
    )
    it_kwh = hours * (drawn + overhead) / 1_000
    kwh = it_kwh * pue
    # The bands hold their points, so the corners hold the estimate but for rounding, which the min and max
    # take away.
    kwh_band = (
        min(hours * it_band[0] / 1_000 * pue_band[0], kwh),
        max(hours * it_band[1] / 1_000 * pue_band[1], kwh),
    )
    market = market_band = None
    if site.market_grams_co2e_per_kwh is not None:
        market_grams = v.in_range(
            "market_grams_co2e_per_kwh", site.market_grams_co2e_per_kwh, 0.0, MAX_GRAMS_CO2E_PER_KWH
        )
        market = kwh * market_grams / 1_000
        market_band = (kwh_band[0] * market_grams / 1_000, kwh_band[1] * market_grams / 1_000)
    return Energy(
        basis=basis,
        accelerator_hours=hours,
        accelerator_watts=drawn,
        overhead_watts=overhead,
        it_energy_kwh=it_kwh,
        pue=pue,
        energy_kwh=kwh,
        emissions_kg_co2e=kwh * grams / 1_000,
        energy_kwh_interval=kwh_band,
        emissions_kg_co2e_interval=(kwh_band[0] * grams_band[0] / 1_000, kwh_band[1] * grams_band[1] / 1_000),
        market_emissions_kg_co2e=market,
        market_emissions_kg_co2e_interval=market_band,
    )


def _busy_share(utilisation: float, idle_share: float) -> float:
    # i + (1 - i)·u, written so that a fully busy accelerator draws its TDP exactly.
    return utilisation + idle_share * (1.0 - utilisation)


def _accelerator_hours(accelerator_hours: float) -> float:
    # Zero hours is a run that has not started: it draws nothing, rather than being refused.
    return v.in_range("accelerator_hours", accelerator_hours, 0.0, MAX_ACCELERATOR_HOURS)


def _band(argument: str, point: float, band: Band, low: float, high: float) -> Band:
    """`band` checked to lie in [low, high] with its ends in order, stretched to hold `point`."""
    try:
        start, end = band
    except (TypeError, ValueError):
        raise v.InvalidInput(argument, f"must be a (low, high) pair, got {band!r}") from None
    start = v.in_range(argument, start, low, high)
    end = v.in_range(argument, end, low, high)
    if start > end:
        raise v.InvalidInput(argument, f"its low end {start:g} is above its high end {end:g}")
    return (min(start, point), max(end, point))


# --- A planned run: its power and site as a plan states them, and what they come to -------------------------

POWER_BASES = ("modeled", "tdp")  # what a plan may ask for: `RunPower.basis`
NO_POWER_FIGURE = "no_power_figure"  # the hardware states no TDP: no energy
NO_GRID_INTENSITY = "no_grid_intensity"  # neither a region nor an intensity: energy without emissions
ASSUMED_NODE_OVERHEAD = "assumed_node_overhead"  # no node rating is sourced for the hardware
DEFAULT_SITE_PUE = "default_pue"  # the site's PUE was not stated


@dataclass(frozen=True)
class GridFigure:
    """A grid's carbon intensity and where it comes from: a region's figure from the table shipped with the
    service, or the one a request gives (`region` None)."""

    grams_co2e_per_kwh: float
    basis: str  # "location": the grid's average
    source: str
    year: int | None = None
    region: str | None = None
    location: str | None = None
    grams_co2e_per_kwh_range: Band | None = None
    note: str | None = None


@dataclass(frozen=True)
class RunSite:
    """The site of a planned run: its PUE (None: not stated, DEFAULT_PUE in DEFAULT_PUE_RANGE), the grid's
    intensity (None: unknown, so no emissions) and a market-based intensity when the site states one."""

    pue: float | None = None
    pue_range: Band | None = None
    pue_source: str | None = None
    grid: GridFigure | None = None
    market_grams_co2e_per_kwh: float | None = None


@dataclass(frozen=True)
class RunPower:
    """What one accelerator of a planned run draws: modeled (`training_energy` at `utilisation`) or its TDP
    throughout, as the published runs counted (`at_constant_power`). `tdp_watts` None: none is known."""

    basis: str  # one of POWER_BASES
    tdp_watts: float | None = None
    overhead: NodeOverhead | None = None  # modeled runs only
    utilisation: float = MEASURED_TRAINING_UTILISATION
    utilisation_range: Band | None = None  # None: ± UTILISATION_SPREAD


@dataclass(frozen=True)
class RunEnergy:
    """A planned run's energy and emissions, with what they rest on. `energy` is None without a power figure;
    its emissions are not to be read (they are zero) when `site.grid` is None."""

    energy: Energy | None
    power: RunPower
    site: RunSite
    caveats: tuple[Caveat, ...]

    @property
    def has_emissions(self) -> bool:
        return self.energy is not None and self.site.grid is not None


def run_power(basis: str, tdp_watts: float | None, slug: str | None) -> RunPower:
    """The power of a run on the hardware `slug` of `tdp_watts` (None: not known), counted as `basis` says:
    modeled runs carry its node's overhead (`node_overhead`)."""
    basis = v.choice("power_basis", basis, POWER_BASES)
    if tdp_watts is None:
        return RunPower(basis, None)
    tdp = v.positive("tdp_watts", tdp_watts, maximum=MAX_WATTS)
    return RunPower(basis, tdp, node_overhead(slug, tdp) if basis == "modeled" else None)


def run_energy(
    accelerator_hours: float,
    power: RunPower,
    site: RunSite,
    *,
    accelerator_hours_interval: Band | None = None,
    hardware: str = "the hardware",
) -> RunEnergy:
    """The energy and emissions of a planned run of `accelerator_hours`, at `power` on `site`; its interval
    also spans `accelerator_hours_interval` (energy is proportional to the hours), when given."""
    hours = _accelerator_hours(accelerator_hours)
    notes: list[Caveat] = []
    if site.pue is None:
        notes.append(_default_pue())
    if power.tdp_watts is None:
        notes.append(
            Caveat(
                NO_POWER_FIGURE,
                f"{hardware} states no TDP (board power), so the run's energy and emissions are not "
                "estimated: plan on a hardware profile that states its tdp_watts.",
                {"hardware": hardware},
            )
        )
        return RunEnergy(None, power, site, tuple(notes))
    if site.grid is None:
        notes.append(
            Caveat(
                NO_GRID_INTENSITY,
                "Emissions need the grid's carbon intensity: give site.region (a region with a sourced "
                "figure) or site.grid_intensity_g_per_kwh.",
            )
        )
    if power.overhead is not None and power.overhead.basis == "assumed":
        notes.append(
            Caveat(
                ASSUMED_NODE_OVERHEAD,
                f"No node rating is sourced for {hardware}: its node's CPUs, memory and network are assumed "
                f"to draw {ASSUMED_OVERHEAD_SHARE_OF_TDP:.0%} of its TDP per accelerator at full load, as a "
                "DGX H100's do.",
                {"overhead_watts": power.overhead.watts},
            )
        )
    grid = site.grid
    core_site = Site(
        grams_co2e_per_kwh=0.0 if grid is None else grid.grams_co2e_per_kwh,
        pue=site.pue,
        pue_range=site.pue_range,
        grams_co2e_per_kwh_range=None if grid is None else grid.grams_co2e_per_kwh_range,
        market_grams_co2e_per_kwh=site.market_grams_co2e_per_kwh,
    )
    if power.basis == "tdp":
        energy = at_constant_power(hours, power.tdp_watts, core_site)
    else:
        model = PowerModel(
            tdp_watts=power.tdp_watts, overhead_watts=0.0 if power.overhead is None else power.overhead.watts
        )
        energy = training_energy(
            hours,
            model,
            core_site,
            utilisation=power.utilisation,
            utilisation_range=power.utilisation_range,
        )
    if accelerator_hours_interval is not None:
        energy = _over_hours(
            energy,
            _band(
                "accelerator_hours_interval", hours, accelerator_hours_interval, 0.0, MAX_ACCELERATOR_HOURS
            ),
        )
    return RunEnergy(energy, power, site, tuple(notes))


def _default_pue() -> Caveat:
    return Caveat(
        DEFAULT_SITE_PUE,
        f"The site's PUE is not stated: {DEFAULT_PUE} is assumed, a cloud or colocation site's, within "
        f"{DEFAULT_PUE_RANGE[0]}-{DEFAULT_PUE_RANGE[1]} (the best fleet reported to the industry average); "
        "give site.pue or site.region.",
        {"pue": DEFAULT_PUE, "pue_range": list(DEFAULT_PUE_RANGE)},
    )


def _over_hours(energy: Energy, hours_band: Band) -> Energy:
    """`energy` with its intervals stretched over the band of its accelerator-hours: energy and emissions are
    proportional to the hours, so the low end of each is scaled by the fewest hours, the high by the most."""
    hours = energy.accelerator_hours
    if hours == 0:
        return energy
    low, high = hours_band[0] / hours, hours_band[1] / hours

    def stretched(band: Band) -> Band:
        return (band[0] * low, band[1] * high)

    market = energy.market_emissions_kg_co2e_interval
    return replace(
        energy,
        energy_kwh_interval=stretched(energy.energy_kwh_interval),
        emissions_kg_co2e_interval=stretched(energy.emissions_kg_co2e_interval),
        market_emissions_kg_co2e_interval=None if market is None else stretched(market),
    )

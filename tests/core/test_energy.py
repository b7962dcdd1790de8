"""Energy and emissions: the power model's invariants, and the published runs reproduced by the method each
used (figures and derivations: docs/research/energy-and-offers.md, §1)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core.energy import (
    ASSUMED_NODE_OVERHEAD,
    ASSUMED_OVERHEAD_SHARE_OF_TDP,
    DEFAULT_PUE,
    DEFAULT_PUE_RANGE,
    DEFAULT_SITE_PUE,
    MEASURED_TRAINING_UTILISATION,
    NO_GRID_INTENSITY,
    NO_POWER_FIGURE,
    GridFigure,
    PowerModel,
    RunSite,
    Site,
    accelerator_watts,
    at_constant_power,
    node_overhead,
    run_energy,
    run_power,
    training_energy,
)
from service.core.validation import InvalidInput

# LLaMA 1 (Touvron et al. 2023a, §6) stated its method: TDP · hours · PUE 1.1 · the US average, 385 g/kWh.
LLAMA_US_SITE = Site(grams_co2e_per_kwh=385, pue=1.1)


def h100(**overrides):
    """An H100 SXM in a DGX H100, its overhead from the node's rating."""
    return PowerModel(
        **{"tdp_watts": 700, "overhead_watts": node_overhead("h100-sxm", 700).watts, **overrides}
    )


# Published runs, by the method each used.


@pytest.mark.parametrize(
    ("model", "a100_hours", "watts", "tonnes"),
    [
        ("7B", 184_320, 400, 31.22),
        ("13B", 368_640, 400, 62.44),
        ("34B", 1_038_336, 350, 153.90),  # the production cluster's power cap
        ("70B", 1_720_320, 400, 291.42),
    ],
)
def test_llama2_rows_are_tdp_times_hours_at_llama1s_pue_and_us_intensity(model, a100_hours, watts, tonnes):
    """Llama 2 (Touvron et al. 2023b, Table 2) counts TDP "as an estimation for GPU power" and states neither
    PUE nor intensity: that every row is 0.4235 kg per TDP-kWh, LLaMA 1's 1.1 · 0.385, is an inference."""
    emitted = at_constant_power(a100_hours, watts, LLAMA_US_SITE)
    assert emitted.basis == "tdp"
    assert emitted.emissions_kg_co2e / 1_000 == pytest.approx(tonnes, rel=5e-4)  # the table's 0.01 t


def test_llama2s_3_3m_a100_hours_emit_its_539_tonnes():
    rows = [(184_320, 400), (368_640, 400), (1_038_336, 350), (1_720_320, 400)]
    total = sum(at_constant_power(hours, watts, LLAMA_US_SITE).emissions_kg_co2e for hours, watts in rows)
    assert total == pytest.approx(539_000, rel=1e-5)  # residual +0.0002%
    # The total's 3 311 616 hours all at 400 W overcount the 34B's 350 W cap by 4.1%, within the 20%.
    at_400 = at_constant_power(3_311_616, 400, LLAMA_US_SITE).emissions_kg_co2e
    assert at_400 == pytest.approx(539_000 * 1.0408, rel=1e-3)


# The Llama 3.1 card gives neither PUE nor intensity, only TDP "adjusted for power usage efficiency": the
# total's 11 390 t over 39.3M H100-hours at 700 W is 0.414 kg per TDP-kWh, PUE and intensity folded together.
LLAMA31_SITE = Site(grams_co2e_per_kwh=414, pue=1.0, market_grams_co2e_per_kwh=0)


@pytest.mark.parametrize(
    ("model", "h100_hours", "tonnes"),
    [("8B", 1.46e6, 420), ("70B", 7.0e6, 2_040), ("405B", 30.84e6, 8_930), ("total", 39.3e6, 11_390)],
)
def test_llama31_is_tdp_times_hours_at_one_factor_and_zero_market_based(model, h100_hours, tonnes):
    emitted = at_constant_power(h100_hours, 700, LLAMA31_SITE)
    # The factor comes from the total (residual -0.008%); the rows, rounded to 10 t, land within 0.8% of it.
    assert emitted.emissions_kg_co2e / 1_000 == pytest.approx(tonnes, rel=0.01)
    assert emitted.market_emissions_kg_co2e == 0
    assert emitted.market_emissions_kg_co2e_interval == (0, 0)


def test_bloom_is_tdp_times_hours_on_the_french_grid_without_pue():
    """Luccioni et al. 2022: 1 082 990 A100-hours; the "dynamic" energy is those hours at the 400 W TDP
    exactly, and its 24.69 t that energy at 57 g/kWh. Jean Zay's PUE of 1.2 enters only their comparison."""
    dynamic = at_constant_power(1_082_990, 400, Site(grams_co2e_per_kwh=57, pue=1.0))
    assert dynamic.energy_kwh == pytest.approx(433_196, rel=1e-12)
    assert dynamic.emissions_kg_co2e == pytest.approx(24_690, rel=2e-4)  # residual +0.009%
    compared = at_constant_power(1_082_990, 400, Site(grams_co2e_per_kwh=57, pue=1.2))
    assert compared.emissions_kg_co2e == pytest.approx(29_600, rel=2e-3)  # the research notes' 29.6 t


def test_blooms_gpus_at_tdp_and_measured_idle_infrastructure_are_near_the_fuller_model():
    """BLOOM's Table 2 adds 256 646 kWh of idle infrastructure to the 433 196 kWh of its GPUs at TDP
    (Luccioni et al. 2022; secondary transcription, 256 646 · 0.057 = 14.6 t checks): what TDP · hours misses.
    The fuller model (GPUs below TDP, the DGX A100's overhead at load, no PUE as BLOOM counted) lands 5.6%
    above their 689 842 kWh, inside its interval. Both are estimates: this checks the overhead's size, not a
    fit."""
    power = PowerModel(tdp_watts=400, overhead_watts=node_overhead("a100-80gb", 400).watts)
    run = training_energy(
        1_082_990, power, Site(grams_co2e_per_kwh=57, pue=1.0), utilisation=MEASURED_TRAINING_UTILISATION
    )
    assert run.it_energy_kwh == pytest.approx(433_196 + 256_646, rel=0.2)  # the tolerance
    assert run.energy_kwh_interval[0] < 433_196 + 256_646 < run.energy_kwh_interval[1]


@pytest.mark.parametrize(
    ("model", "chips", "days", "watts", "pue", "grams", "mwh", "tonnes"),
    [
        ("GPT-3", 10_000, 14.8, 330, 1.10, 429, 1_287, 552.1),
        ("T5", 512, 20, 310, 1.12, 545, 85.7, 46.7),
        ("Meena", 1_024, 30, 289, 1.09, 415, 232, 96.4),
        ("GShard-600B", 1_024, 3.1, 288, 1.09, 201, 24.1, 4.8),
        ("Switch Transformer", 1_024, 27, 245, 1.10, 403, 179, 72.2),
    ],
)
def test_patterson_2021_is_measured_system_power_times_hours_pue_and_intensity(
    model, chips, days, watts, pue, grams, mwh, tonnes
):
    """Patterson et al. 2021, Table 4: kWh = hours · processors · measured average system power (memory,
    NICs, fans and host CPU included) · PUE. Their days are rounded to 0.1 (GShard 3.1): residuals < 1%."""
    run = at_constant_power(
        chips * days * 24, watts, Site(grams_co2e_per_kwh=grams, pue=pue), basis="measured"
    )
    assert run.basis == "measured"
    assert run.energy_kwh / 1_000 == pytest.approx(mwh, rel=0.01)
    assert run.emissions_kg_co2e / 1_000 == pytest.approx(tonnes, rel=0.01)


def test_gpt3_reproduces_pattersons_1287_mwh_and_552_tonnes_to_a_fifth_of_a_percent():
    gpt3 = at_constant_power(3_552_000, 330, Site(grams_co2e_per_kwh=429, pue=1.10), basis="measured")
    assert gpt3.energy_kwh == pytest.approx(1_287_000, rel=2.5e-3)  # 1 289 376 kWh, +0.18%
    assert gpt3.emissions_kg_co2e == pytest.approx(552_100, rel=2.5e-3)  # 553 142 kg, +0.19%


@pytest.mark.parametrize(
    ("model", "a100_hours", "mwh", "tonnes"),
    [
        ("7B", 82_432, 36, 14),
        ("13B", 135_168, 59, 23),
        ("33B", 530_432, 233, 90),
        ("65B", 1_022_362, 449, 173),
    ],
)
def test_llama1_states_the_method_llama2_is_inferred_to_use(model, a100_hours, mwh, tonnes):
    """LLaMA 1 (Touvron et al. 2023a, Table 15, from secondary transcriptions that agree): 400 W, PUE 1.1,
    385 g/kWh, rounded to whole MWh and tonnes (7B: 36.27 MWh, 0.8%)."""
    run = at_constant_power(a100_hours, 400, LLAMA_US_SITE)
    assert run.energy_kwh / 1_000 == pytest.approx(mwh, rel=0.01)
    assert run.emissions_kg_co2e / 1_000 == pytest.approx(tonnes, rel=0.01)


# The power model.


def test_an_accelerator_draws_its_idle_floor_when_waiting_and_its_tdp_when_always_busy():
    assert accelerator_watts(700, 0.0) == pytest.approx(105.0, rel=1e-12)  # Morrison 2025: "about 15%"
    assert accelerator_watts(700, 1.0) == 700.0
    draws = [accelerator_watts(700, u) for u in np.linspace(0, 1, 41)]
    assert all(a < b for a, b in itertools.pairwise(draws))


def test_the_measured_training_utilisation_is_olmo2s_600_watts_of_an_h100s_700():
    assert accelerator_watts(700, MEASURED_TRAINING_UTILISATION) == pytest.approx(600, rel=1e-12)


def test_energy_rises_with_utilisation_between_the_idle_floor_and_tdp():
    site = Site(grams_co2e_per_kwh=400, pue=1.1)
    runs = [training_energy(1e6, h100(overhead_watts=0), site, utilisation=u) for u in np.linspace(0, 1, 21)]
    assert all(a.energy_kwh < b.energy_kwh for a, b in itertools.pairwise(runs))
    assert runs[0].it_energy_kwh == pytest.approx(1e6 * 105 / 1_000, rel=1e-12)
    assert runs[-1].it_energy_kwh == pytest.approx(1e6 * 700 / 1_000, rel=1e-12)


def test_always_busy_without_overhead_is_the_tdp_method_exactly():
    site = Site(grams_co2e_per_kwh=385, pue=1.1)
    modeled = training_energy(
        1e6, PowerModel(tdp_watts=400), site, utilisation=1.0, utilisation_range=(1.0, 1.0)
    )
    published = at_constant_power(1e6, 400, site)
    assert modeled.basis == "modeled"
    assert modeled.energy_kwh == published.energy_kwh
    assert modeled.emissions_kg_co2e == published.emissions_kg_co2e
    assert published.energy_kwh_interval == (published.energy_kwh, published.energy_kwh)


def test_the_node_overhead_adds_its_rating_times_its_load():
    site = Site(grams_co2e_per_kwh=400, pue=1.0)
    bare = training_energy(1e6, h100(overhead_watts=0), site, utilisation=0.8)
    dressed = training_energy(1e6, h100(), site, utilisation=0.8)
    assert dressed.overhead_watts == pytest.approx(0.8 * 575, rel=1e-12)
    assert dressed.it_energy_kwh - bare.it_energy_kwh == pytest.approx(1e6 * 0.8 * 575 / 1_000, rel=1e-9)


@pytest.mark.parametrize(
    ("slug", "tdp", "watts", "basis"),
    [
        ("a100-80gb", 400, 412.5, "rating"),  # DGX A100: (6.5 kW - 8 · 400 W) / 8
        ("h100-sxm", 700, 575.0, "rating"),  # DGX H100: (10.2 kW - 8 · 700 W) / 8
        ("h200", 700, 575.0, "rating"),
        ("b200", 1_000, 787.5, "rating"),  # DGX B200: (14.3 kW - 8 · 1 kW) / 8
        ("mi300x", 750, 750 * ASSUMED_OVERHEAD_SHARE_OF_TDP, "assumed"),
        (None, 300, 300 * ASSUMED_OVERHEAD_SHARE_OF_TDP, "assumed"),
    ],
)
def test_node_overhead_is_the_dgx_rating_less_its_gpus_or_an_assumed_share_of_tdp(slug, tdp, watts, basis):
    overhead = node_overhead(slug, tdp)
    assert overhead.watts == pytest.approx(watts, rel=1e-12)
    assert overhead.basis == basis


def test_a_site_without_a_pue_gets_the_default_and_its_band():
    unstated = training_energy(1e6, h100(), Site(grams_co2e_per_kwh=400), utilisation=0.8)
    stated = training_energy(
        1e6,
        h100(),
        Site(grams_co2e_per_kwh=400, pue=DEFAULT_PUE, pue_range=DEFAULT_PUE_RANGE),
        utilisation=0.8,
    )
    assert unstated.pue == DEFAULT_PUE
    assert unstated.energy_kwh == pytest.approx(unstated.it_energy_kwh * DEFAULT_PUE, rel=1e-12)
    assert unstated.energy_kwh_interval == stated.energy_kwh_interval


def test_the_interval_widens_with_each_uncertain_input():
    site = Site(grams_co2e_per_kwh=400, pue=1.1)
    exact = training_energy(
        1e6,
        h100(idle_share_range=(0.15, 0.15), overhead_load_range=(0.8, 0.8)),
        site,
        utilisation=0.8,
        utilisation_range=(0.8, 0.8),
    )
    assert exact.energy_kwh_interval == pytest.approx((exact.energy_kwh, exact.energy_kwh), rel=1e-12)
    widths = [
        _width(
            training_energy(
                1e6, h100(overhead_load_range=(0.8, 0.8)), site, utilisation=0.8, utilisation_range=(0.8, 0.8)
            )
        ),
        _width(training_energy(1e6, h100(overhead_load_range=(0.8, 0.8)), site, utilisation=0.8)),
        _width(training_energy(1e6, h100(), site, utilisation=0.8)),
        _width(
            training_energy(
                1e6, h100(), Site(grams_co2e_per_kwh=400, pue=1.1, pue_range=(1.08, 1.2)), utilisation=0.8
            )
        ),
    ]
    assert 0 < widths[0] < widths[1] < widths[2] < widths[3]


def test_a_grid_intensity_band_widens_only_the_emissions():
    # Google's us-west1 (Oregon): 79 g/kWh in 2024, 98 in 2025 (GoogleCloudPlatform/region-carbon-info).
    steady = at_constant_power(1e6, 700, Site(grams_co2e_per_kwh=98, pue=1.1))
    yearly = at_constant_power(
        1e6, 700, Site(grams_co2e_per_kwh=98, pue=1.1, grams_co2e_per_kwh_range=(79, 98))
    )
    assert yearly.energy_kwh_interval == steady.energy_kwh_interval
    assert yearly.emissions_kg_co2e_interval == pytest.approx(
        (steady.energy_kwh * 0.079, steady.energy_kwh * 0.098)
    )


@given(
    hours=st.floats(min_value=0, max_value=1e9),
    utilisation=st.floats(min_value=0, max_value=1),
    idle_share=st.floats(min_value=0, max_value=1),
    load=st.floats(min_value=0, max_value=1),
    pue=st.floats(min_value=1, max_value=3),
    grams=st.floats(min_value=0, max_value=2_000),
)
def test_the_interval_always_holds_the_estimate(hours, utilisation, idle_share, load, pue, grams):
    power = h100(idle_share=idle_share, overhead_load=load)
    run = training_energy(
        hours,
        power,
        Site(grams_co2e_per_kwh=grams, pue=pue, market_grams_co2e_per_kwh=grams / 2),
        utilisation=utilisation,
    )
    assert run.energy_kwh_interval[0] <= run.energy_kwh <= run.energy_kwh_interval[1]
    assert run.emissions_kg_co2e_interval[0] <= run.emissions_kg_co2e <= run.emissions_kg_co2e_interval[1]
    market_low, market_high = run.market_emissions_kg_co2e_interval
    assert market_low <= run.market_emissions_kg_co2e <= market_high


def test_zero_hours_draw_nothing():
    run = training_energy(0.0, h100(), Site(grams_co2e_per_kwh=400), utilisation=0.8)
    assert (run.energy_kwh, run.emissions_kg_co2e) == (0.0, 0.0)
    assert run.energy_kwh_interval == (0.0, 0.0)
    assert at_constant_power(0.0, 700, Site(grams_co2e_per_kwh=400)).energy_kwh == 0.0


def test_no_market_based_figure_unless_the_site_states_one():
    run = at_constant_power(1e6, 700, Site(grams_co2e_per_kwh=400))
    assert run.market_emissions_kg_co2e is None
    assert run.market_emissions_kg_co2e_interval is None


# Refusals.


@pytest.mark.parametrize("hours", [-1.0, math.nan, math.inf, "many"])
def test_negative_or_non_finite_hours_are_refused_naming_them(hours):
    with pytest.raises(InvalidInput, match="accelerator_hours") as refused:
        training_energy(hours, h100(), Site(grams_co2e_per_kwh=400), utilisation=0.8)
    assert refused.value.argument == "accelerator_hours"
    with pytest.raises(InvalidInput, match="accelerator_hours"):
        at_constant_power(hours, 700, Site(grams_co2e_per_kwh=400))


@pytest.mark.parametrize(
    ("argument", "call"),
    [
        ("utilisation", lambda: training_energy(1e6, h100(), Site(400), utilisation=1.5)),
        ("utilisation", lambda: training_energy(1e6, h100(), Site(400), utilisation=math.nan)),
        ("tdp_watts", lambda: training_energy(1e6, h100(tdp_watts=-700), Site(400), utilisation=0.8)),
        ("tdp_watts", lambda: accelerator_watts(math.inf, 0.5)),
        ("idle_share", lambda: training_energy(1e6, h100(idle_share=-0.1), Site(400), utilisation=0.8)),
        ("overhead_watts", lambda: training_energy(1e6, h100(overhead_watts=-1), Site(400), utilisation=0.8)),
        (
            "overhead_load",
            lambda: training_energy(1e6, h100(overhead_load=math.nan), Site(400), utilisation=0.8),
        ),
        (
            "overhead_load_range",
            lambda: training_energy(1e6, h100(overhead_load_range=(1.0, 0.6)), Site(400), utilisation=0.8),
        ),
        (
            "utilisation_range",
            lambda: training_energy(1e6, h100(), Site(400), utilisation=0.8, utilisation_range=(0.5,)),
        ),
        ("pue", lambda: at_constant_power(1e6, 700, Site(400, pue=0.9))),
        ("pue", lambda: at_constant_power(1e6, 700, Site(400, pue=math.inf))),
        ("pue_range", lambda: at_constant_power(1e6, 700, Site(400, pue=1.1, pue_range=(0.5, 1.2)))),
        ("grams_co2e_per_kwh", lambda: at_constant_power(1e6, 700, Site(-1))),
        ("grams_co2e_per_kwh", lambda: at_constant_power(1e6, 700, Site(math.nan))),
        (
            "market_grams_co2e_per_kwh",
            lambda: at_constant_power(1e6, 700, Site(400, market_grams_co2e_per_kwh=-5)),
        ),
        ("watts_per_accelerator", lambda: at_constant_power(1e6, 0, Site(400))),
        ("basis", lambda: at_constant_power(1e6, 700, Site(400), basis="modeled")),
    ],
)
def test_bad_input_is_refused_naming_the_argument(argument, call):
    with pytest.raises(InvalidInput) as refused:
        call()
    assert refused.value.argument == argument


def _width(run):
    low, high = run.energy_kwh_interval
    return high - low


# A planned run: its power and site as a plan states them.


def test_a_run_on_hardware_without_a_tdp_has_no_energy_and_says_so():
    run = run_energy(1e6, run_power("modeled", None, "tpu-v5p"), RunSite(), hardware="tpu-v5p")
    assert run.energy is None
    assert not run.has_emissions
    assert NO_POWER_FIGURE in [caveat.code for caveat in run.caveats]


def test_a_run_without_a_grid_has_energy_at_the_default_pue_and_no_emissions():
    run = run_energy(1e6, run_power("modeled", 700, "h100-sxm"), RunSite())
    assert run.energy is not None
    assert run.energy.pue == DEFAULT_PUE
    assert not run.has_emissions
    assert [caveat.code for caveat in run.caveats] == [DEFAULT_SITE_PUE, NO_GRID_INTENSITY]


def test_the_tdp_basis_is_the_published_method_exactly():
    grid = GridFigure(grams_co2e_per_kwh=385, basis="location", source="LLaMA 1, §6")
    run = run_energy(1_720_320, run_power("tdp", 400, "a100-80gb"), RunSite(pue=1.1, grid=grid))
    published = at_constant_power(1_720_320, 400, LLAMA_US_SITE)
    assert run.energy == published
    assert run.power.overhead is None  # the published runs counted none


def test_hardware_without_a_sourced_node_says_its_overhead_is_assumed():
    run = run_energy(1e6, run_power("modeled", 750, "mi300x"), RunSite(pue=1.2))
    assert ASSUMED_NODE_OVERHEAD in [caveat.code for caveat in run.caveats]


def test_the_interval_spans_the_runs_accelerator_hours_in_proportion():
    power, site = (
        run_power("modeled", 700, "h100-sxm"),
        RunSite(pue=1.1, grid=GridFigure(400, "location", "x")),
    )
    exact = run_energy(1e6, power, site)
    spread = run_energy(1e6, power, site, accelerator_hours_interval=(0.8e6, 1.5e6))
    assert spread.energy.energy_kwh == exact.energy.energy_kwh
    assert spread.energy.energy_kwh_interval == pytest.approx(
        (exact.energy.energy_kwh_interval[0] * 0.8, exact.energy.energy_kwh_interval[1] * 1.5), rel=1e-12
    )
    assert spread.energy.emissions_kg_co2e_interval == pytest.approx(
        (exact.energy.emissions_kg_co2e_interval[0] * 0.8, exact.energy.emissions_kg_co2e_interval[1] * 1.5),
        rel=1e-12,
    )


@pytest.mark.parametrize(
    ("argument", "call"),
    [
        ("power_basis", lambda: run_power("measured", 700, None)),
        ("tdp_watts", lambda: run_power("modeled", -1, None)),
        (
            "accelerator_hours_interval",
            lambda: run_energy(
                1e6, run_power("tdp", 700, None), RunSite(), accelerator_hours_interval=(2e6, 1e6)
            ),
        ),
    ],
)
def test_a_planned_runs_bad_input_is_refused_naming_the_argument(argument, call):
    with pytest.raises(InvalidInput) as refused:
        call()
    assert refused.value.argument == argument

"""The energy of a run for other use cases (offers, comparisons): `hours_energy` and `estimate_energy` take a
site and the hardware, answer a RunEnergy, and EnergySchema shows it as estimates do."""

from __future__ import annotations

import pytest

from service.core import engine
from service.core.validation import InvalidInput
from service.schemas.energy import EnergySchema
from service.services.energy import SiteRequest, energy_document, estimate_energy, hours_energy

H100 = engine.Hardware(name="H100", slug="h100-sxm", peak_flops={"bf16": 989e12}, memory_bytes=80e9)


def test_a_region_key_gives_emissions_at_its_grid_and_its_providers_pue():
    run = hours_energy(1e6, hardware="h100-sxm", tdp_watts=700, site=SiteRequest(region="gcp:europe-west9"))
    assert run.site.pue == 1.1
    assert run.site.grid.grams_co2e_per_kwh == 15.83
    assert run.energy.emissions_kg_co2e == pytest.approx(run.energy.energy_kwh * 0.01583, rel=1e-12)


def test_an_owned_site_states_its_pue_and_intensity_and_a_market_based_one():
    site = SiteRequest(pue=1.35, grid_intensity_g_per_kwh=420, market_grid_intensity_g_per_kwh=0)
    run = hours_energy(1e6, hardware="h100-sxm", tdp_watts=700, site=site)
    assert run.energy.pue == 1.35
    assert run.energy.market_emissions_kg_co2e == 0
    assert run.caveats == ()


def test_an_estimates_energy_spans_its_accelerator_hours_interval():
    run = engine.estimate(7e9, 1.4e11, engine.Cluster(hardware=H100, accelerators=64, mfu=0.4))
    assessed = estimate_energy(run, tdp_watts=700, site=SiteRequest(region="FR"))
    exact = hours_energy(
        run.runtime.accelerator_hours, hardware="h100-sxm", tdp_watts=700, site=SiteRequest(region="FR")
    )
    assert assessed.energy.energy_kwh == exact.energy.energy_kwh
    assert assessed.energy.energy_kwh_interval[0] < exact.energy.energy_kwh_interval[0]
    assert assessed.energy.energy_kwh_interval[1] > exact.energy.energy_kwh_interval[1]


def test_the_schema_dumps_the_document_estimates_show():
    run = hours_energy(1e6, hardware="b200", tdp_watts=1_000, site=SiteRequest(region="aws:eu-west-3"))
    assert EnergySchema().dump(run) == energy_document(run)
    assert energy_document(run)["method"]["node_overhead_basis"] == "rating"


@pytest.mark.parametrize(
    ("call", "argument", "words"),
    [
        (
            lambda: hours_energy(1e6, tdp_watts=700, site=SiteRequest(region="aws:us-east-2")),
            "site.region",
            "no carbon figure for region 'aws:us-east-2'",
        ),
        (lambda: hours_energy(1e6, tdp_watts=700, site=SiteRequest(pue=0.5)), "site.pue", "must be in"),
        (lambda: hours_energy(-1, tdp_watts=700), "accelerator_hours", "must be in"),
        (lambda: hours_energy(1e6, tdp_watts=700, utilisation=2), "utilisation", "must be in"),
        (lambda: hours_energy(1e6, tdp_watts=700, power_basis="metered"), "power_basis", "must be one of"),
    ],
)
def test_bad_input_is_refused_naming_it(call, argument, words):
    with pytest.raises(InvalidInput, match=words) as refused:
        call()
    assert refused.value.argument == argument

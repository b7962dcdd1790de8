"""Energy and emissions of estimates, allocations and plans over HTTP: published runs reproduced by the method
each used (docs/research/energy-and-offers.md §1), the site a request states, and what it may not."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from service.core.energy import DEFAULT_PUE, MEASURED_TRAINING_UTILISATION
from service.data.catalog.grid import grid_intensity
from service.data.models import Plan
from service.services.catalog import load_builtin_hardware
from service.services.plans import reevaluate
from tests.problems import assert_problem

A100_BF16 = 312e12  # FLOP/s, the catalog's a100-80gb
H100_BF16 = 989e12  # the catalog's h100-sxm
V100_FP16 = 125e12
START = "2027-01-04T00:00:00Z"


@pytest.fixture
def catalog(session):
    load_builtin_hardware(session)


def mfu_for(accelerator_hours: float, flops: float, peak: float) -> float:
    """The MFU at which `flops` take `accelerator_hours` on accelerators of `peak` FLOP/s."""
    return flops / (peak * accelerator_hours * 3600)


def estimate(client, **body) -> dict:
    response = client.post("/v1/estimates", json=body)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def run_of(accelerator_hours: float, params: float, tokens: float, hardware: str, peak: float, **fields):
    """An estimate body whose run takes `accelerator_hours` (at the MFU that makes it so)."""
    mfu = mfu_for(accelerator_hours, 6 * params * tokens, peak)
    return {
        "params": params,
        "tokens": tokens,
        "hardware": hardware,
        "accelerators": 2048,
        "mfu": mfu,
        **fields,
    }


# Published runs, by the method each used.


def test_llama2_70b_1_72m_a100_hours_at_tdp_emit_its_291_tonnes(client, catalog):
    """Llama 2 (Touvron et al. 2023b, Table 2): TDP (400 W) times hours, 291.42 t; its factor is LLaMA 1's
    stated PUE 1.1 and US average 385 g/kWh (an inference: Llama 2 states neither)."""
    body = run_of(
        1_720_320,
        70e9,
        2e12,
        "a100-80gb",
        A100_BF16,
        power_basis="tdp",
        site={"pue": 1.1, "grid_intensity_g_per_kwh": 385},
    )
    answer = estimate(client, **body)
    assert answer["accelerator_hours"] == pytest.approx(1_720_320, rel=1e-9)
    energy = answer["energy"]
    assert energy["method"]["power_basis"] == "tdp"
    assert energy["method"]["tdp_watts"] == 400
    assert energy["emissions_kg_co2e"] / 1_000 == pytest.approx(291.42, rel=5e-4)
    low, high = energy["intervals"]["emissions_kg_co2e"]
    assert low < energy["emissions_kg_co2e"] < high  # the run's accelerator-hours are uncertain
    assert energy["warnings"] == []


def test_llama31_405b_at_tdp_and_the_cards_factor_emits_8930_tonnes_and_none_market_based(client, catalog):
    """The Llama 3.1 card: 30.84M H100-hours at 700 W, 8 930 t location-based and 0 market-based; PUE and
    intensity folded into 0.414 kg per TDP-kWh (its total's)."""
    body = run_of(
        30.84e6,
        405e9,
        15.6e12,
        "h100-sxm",
        H100_BF16,
        power_basis="tdp",
        site={"pue": 1.0, "grid_intensity_g_per_kwh": 414, "market_grid_intensity_g_per_kwh": 0},
    )
    energy = estimate(client, **body)["energy"]
    assert energy["emissions_kg_co2e"] / 1_000 == pytest.approx(8_930, rel=0.01)
    assert energy["market_emissions_kg_co2e"] == 0
    assert energy["intervals"]["market_emissions_kg_co2e"] == [0, 0]


def test_bloom_at_tdp_on_the_french_grid_of_the_table_is_within_2_percent_of_its_24_7_tonnes(client, catalog):
    """BLOOM (Luccioni et al. 2022): 1 082 990 A100-hours at 400 W, 433 196 kWh without PUE, 24.69 t at 57 g.
    The table's France is 56.0 g (OWID 2023): 1.7% under, within the issue's 20%."""
    body = run_of(
        1_082_990, 176e9, 366e9, "a100-80gb", A100_BF16, power_basis="tdp", site={"region": "FR", "pue": 1.0}
    )
    energy = estimate(client, **body)["energy"]
    assert energy["energy_kwh"] == pytest.approx(433_196, rel=1e-6)
    assert energy["emissions_kg_co2e"] == pytest.approx(24_690, rel=0.02)
    assert energy["site"]["grid_intensity_year"] == 2023
    assert energy["site"]["pue_source"] == "given in the request"


def test_blooms_modeled_draw_lands_within_a_fifth_of_its_gpus_and_idle_infrastructure(client, catalog):
    """BLOOM's Table 2 adds 256 646 kWh of idle infrastructure to its GPUs' 433 196 kWh: the modeled draw
    (GPUs below TDP, the DGX A100's overhead) counts both."""
    body = run_of(1_082_990, 176e9, 366e9, "a100-80gb", A100_BF16, site={"region": "FR", "pue": 1.0})
    energy = estimate(client, **body)["energy"]
    assert energy["method"]["node_overhead_basis"] == "rating"
    assert energy["method"]["utilisation"] == pytest.approx(MEASURED_TRAINING_UTILISATION)
    assert energy["energy_kwh"] == pytest.approx(433_196 + 256_646, rel=0.2)


def test_gpt3_at_its_v100s_tdp_is_within_a_tenth_of_pattersons_measured_1287_mwh_and_552_tonnes(
    client, catalog
):
    """Patterson et al. 2021 measured 330 W per V100 with its host; at the 300 W TDP the API counts 9%
    less."""
    body = run_of(
        3_552_000,
        175e9,
        300e9,
        "v100-sxm2-32gb",
        V100_FP16,
        precision="fp16",
        power_basis="tdp",
        site={"pue": 1.1, "grid_intensity_g_per_kwh": 429},
    )
    energy = estimate(client, **body)["energy"]
    assert energy["energy_kwh"] == pytest.approx(1_287_000, rel=0.1)
    assert energy["emissions_kg_co2e"] == pytest.approx(552_100, rel=0.1)


# The site.


def test_without_a_site_energy_is_at_the_default_pue_and_emissions_are_null_with_a_warning(client, catalog):
    energy = estimate(client, params=7e9, tokens=1.4e11, hardware="h100-sxm", accelerators=64, mfu=0.4)[
        "energy"
    ]
    assert energy["energy_kwh"] > 0
    assert energy["site"]["pue"] == DEFAULT_PUE
    assert energy["site"]["pue_source"] == "default"
    assert energy["emissions_kg_co2e"] is None
    assert energy["intervals"]["emissions_kg_co2e"] is None
    codes = [warning["code"] for warning in energy["warnings"]]
    assert codes == ["default_pue", "no_grid_intensity"]
    low, high = energy["intervals"]["energy_kwh"]
    assert low < energy["energy_kwh"] < high


def test_a_cloud_region_brings_its_grid_its_year_its_source_and_its_providers_pue(client, catalog):
    body = {"params": 7e9, "tokens": 1.4e11, "hardware": "h100-sxm", "accelerators": 64, "mfu": 0.4}
    energy = estimate(client, **body, site={"region": "gcp:us-central1"})["energy"]
    figure = grid_intensity("gcp:us-central1")
    assert energy["site"]["grid_intensity_g_per_kwh"] == figure.grid_intensity_g_per_kwh == 431.95
    assert energy["site"]["grid_intensity_year"] == 2025
    assert energy["site"]["grid_intensity_basis"] == "location"
    assert "region-carbon-info" in energy["site"]["grid_intensity_source"]
    assert energy["site"]["pue"] == 1.1
    assert energy["emissions_kg_co2e"] == pytest.approx(energy["energy_kwh"] * 0.43195, rel=1e-12)
    assert energy["warnings"] == []
    low, high = energy["intervals"]["emissions_kg_co2e"]
    assert low < energy["emissions_kg_co2e"] < high


def test_an_aws_region_says_its_figure_is_the_grid_of_its_metro_not_aws(client, catalog):
    body = {"params": 7e9, "tokens": 1.4e11, "hardware": "h100-sxm", "accelerators": 64, "mfu": 0.4}
    energy = estimate(client, **body, site={"region": "AWS:US-EAST-1"})["energy"]
    assert energy["site"]["region"] == "aws:us-east-1"
    assert (
        energy["site"]["grid_intensity_g_per_kwh"] == grid_intensity("gcp:us-east4").grid_intensity_g_per_kwh
    )
    assert "not an AWS figure" in energy["site"]["grid_intensity_note"]


def test_allocations_on_hardware_carry_the_energy_of_their_run(client, catalog):
    response = client.post(
        "/v1/allocations",
        json={
            "flops": 1e23,
            "hardware": "h100-sxm",
            "accelerators": 256,
            "mfu": 0.4,
            "site": {"region": "SE"},
        },
    )
    assert response.status_code == 200, response.get_json()
    energy = response.get_json()["estimate"]["energy"]
    assert energy["emissions_kg_co2e"] == pytest.approx(energy["energy_kwh"] * 0.0407, rel=1e-12)


# What cannot be estimated is said, never a NaN or a 500.


def test_hardware_without_a_tdp_has_no_energy_and_says_why(client, catalog):
    answer = estimate(client, params=7e9, tokens=1.4e11, hardware="tpu-v5p", accelerators=64, mfu=0.4)
    energy = answer["energy"]
    assert energy["energy_kwh"] is None
    assert energy["emissions_kg_co2e"] is None
    assert energy["intervals"] is None
    assert "no_power_figure" in [warning["code"] for warning in energy["warnings"]]


def test_inline_hardware_states_no_tdp_so_no_energy(client):
    hardware = {"peak_flops": {"bf16": 1e15}, "memory_bytes": 80e9}
    energy = estimate(client, params=1e9, tokens=2e10, hardware=hardware, accelerators=8, mfu=0.4)["energy"]
    assert energy["energy_kwh"] is None
    assert "no_power_figure" in [warning["code"] for warning in energy["warnings"]]


@pytest.mark.parametrize(
    ("site", "pointer", "words"),
    [
        ({"region": "mars-1"}, "#/site/region", "no carbon figure for region 'mars-1'"),
        ({"region": "FR", "grid_intensity_g_per_kwh": 50}, "#/site/grid_intensity_g_per_kwh", "not both"),
        ({"pue": 0.9}, "#/site/pue", ""),
        ({"grid_intensity_g_per_kwh": -1}, "#/site/grid_intensity_g_per_kwh", ""),
        ({"grid_intensity_g_per_kwh": "NaN"}, "#/site/grid_intensity_g_per_kwh", ""),
        ({"market_grid_intensity_g_per_kwh": 5000}, "#/site/market_grid_intensity_g_per_kwh", ""),
        ({"city": "Paris"}, "#/site/city", ""),
    ],
)
def test_a_site_that_cannot_be_used_is_a_422_naming_its_field(client, catalog, site, pointer, words):
    body = {
        "params": 7e9,
        "tokens": 1.4e11,
        "hardware": "h100-sxm",
        "accelerators": 64,
        "mfu": 0.4,
        "site": site,
    }
    problem = assert_problem(client.post("/v1/estimates", json=body), 422)
    assert [error["pointer"] for error in problem["errors"]] == [pointer]
    assert words.lower() in problem["errors"][0]["detail"].lower()


def test_an_unknown_region_says_to_give_the_grids_intensity(client, catalog):
    body = {"params": 7e9, "tokens": 1.4e11, "hardware": "h100-sxm", "accelerators": 64, "mfu": 0.4}
    problem = assert_problem(
        client.post("/v1/estimates", json={**body, "site": {"region": "aws:us-east-2"}}), 422
    )
    assert "grid_intensity_g_per_kwh" in problem["errors"][0]["detail"]


def test_an_unknown_power_basis_and_a_site_without_hardware_are_422s(client, catalog):
    body = {"params": 7e9, "tokens": 1.4e11, "hardware": "h100-sxm", "accelerators": 64, "mfu": 0.4}
    problem = assert_problem(client.post("/v1/estimates", json={**body, "power_basis": "measured"}), 422)
    assert [error["pointer"] for error in problem["errors"]] == ["#/power_basis"]
    problem = assert_problem(
        client.post("/v1/allocations", json={"flops": 1e23, "site": {"region": "FR"}}), 422
    )
    assert "site" in problem["errors"][0]["detail"]


# Plans.


@pytest.fixture
def acme(client, catalog):
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201


def create_plan(client, **fields) -> dict:
    body = {
        "organization": "acme",
        "params": 7e9,
        "tokens": 1.4e11,
        "hardware": "h100-sxm",
        "accelerators": 64,
        "mfu": 0.4,
        "start_at": START,
        **fields,
    }
    response = client.post("/v1/plans", json=body)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def test_a_plan_keeps_its_energy_its_site_in_its_snapshot_and_replays_to_it(client, session, acme):
    made = create_plan(client, site={"region": "gcp:europe-west9"})
    energy = made["result"]["estimate"]["energy"]
    stored = session.scalar(select(Plan).where(Plan.id == uuid.UUID(made["id"])))
    assert stored.snapshot["energy"]["site"]["grid"]["region"] == "gcp:europe-west9"
    assert stored.energy_kwh == pytest.approx(energy["energy_kwh"], rel=1e-12)
    assert stored.emissions_kg_co2e == pytest.approx(energy["emissions_kg_co2e"], rel=1e-12)
    assert reevaluate(stored) == stored.result


def test_a_plan_without_a_site_stores_its_energy_and_no_emissions(client, session, acme):
    made = create_plan(client)
    stored = session.scalar(select(Plan).where(Plan.id == uuid.UUID(made["id"])))
    assert stored.energy_kwh == pytest.approx(made["result"]["estimate"]["energy"]["energy_kwh"], rel=1e-12)
    assert stored.emissions_kg_co2e is None


def test_a_plan_on_hardware_without_a_tdp_stores_no_energy(client, session, acme):
    made = create_plan(client, hardware="tpu-v5p")
    stored = session.scalar(select(Plan).where(Plan.id == uuid.UUID(made["id"])))
    assert (stored.energy_kwh, stored.emissions_kg_co2e) == (None, None)
    assert made["result"]["estimate"]["energy"]["energy_kwh"] is None


def test_a_plan_made_before_energy_shows_none_and_still_replays_to_what_it_holds(client, session, acme):
    made = create_plan(client, site={"region": "FR"})
    stored = session.scalar(select(Plan).where(Plan.id == uuid.UUID(made["id"])))
    snapshot = {key: value for key, value in stored.snapshot.items() if key != "energy"}
    estimate_then = {key: value for key, value in stored.result["estimate"].items() if key != "energy"}
    stored.snapshot, stored.result = snapshot, {**stored.result, "estimate": estimate_then}
    assert reevaluate(stored) == stored.result


# Reports.


def test_the_cost_report_sums_energy_and_emissions_by_month_and_label_and_counts_plans_without(client, acme):
    french = create_plan(client, site={"region": "FR"}, labels={"team": "a"})
    unsited = create_plan(client, labels={"team": "a"})
    create_plan(client, hardware="tpu-v5p", labels={"team": "b"})
    energy = {plan["id"]: plan["result"]["estimate"]["energy"] for plan in (french, unsited)}

    response = client.get(
        "/v1/reports/costs?from=2027-01-01T00:00:00Z&to=2028-01-01T00:00:00Z&granularity=month&group_by=label:team"
        "&status=draft"
    )

    assert response.status_code == 200, response.get_json()
    rows = {row["label:team"]: row for row in response.get_json()["rows"]}
    assert rows["a"]["energy_kwh"] == pytest.approx(sum(e["energy_kwh"] for e in energy.values()), rel=1e-9)
    assert rows["a"]["emissions_kg_co2e"] == pytest.approx(
        energy[french["id"]]["emissions_kg_co2e"], rel=1e-9
    )
    assert (rows["a"]["plans_without_energy"], rows["a"]["plans_without_emissions"]) == (0, 1)
    assert (rows["b"]["energy_kwh"], rows["b"]["emissions_kg_co2e"]) == (None, None)
    assert (rows["b"]["plans_without_energy"], rows["b"]["plans_without_emissions"]) == (1, 1)
    (totals,) = response.get_json()["totals"]
    assert totals["energy_kwh"] == pytest.approx(rows["a"]["energy_kwh"], rel=1e-9)
    assert (totals["plans_without_energy"], totals["plans_without_emissions"]) == (1, 2)


def test_the_grid_intensities_list_every_region_a_site_may_name_with_its_source(client):
    listed = client.get("/v1/grid-intensities").get_json()["items"]
    regions = [entry["region"] for entry in listed]
    assert regions == sorted(regions)
    assert {"gcp:us-central1", "aws:us-east-1", "FR"} <= set(regions)
    assert all(entry["source"] and entry["year"] and entry["basis"] == "location" for entry in listed)

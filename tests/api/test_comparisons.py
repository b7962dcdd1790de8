"""POST /v1/comparisons: one run priced on offers of every pricing, ranked, with the frontier and energy."""

from __future__ import annotations

from decimal import Decimal

import pytest

from service.core import wall_clock
from service.services.catalog import load_builtin_hardware
from tests.problems import assert_problem

# Prices of docs/research/energy-and-offers.md (4.2) and /work/shared/reference/hardware.md: AWS p5.48xlarge
# in us-east-1 on demand (55.04 / 8) and spot in us-east-2 (11.2543 / 8), an EC2 Capacity Block for p5
# (4.916 per GPU-hour, 2024-12), Lambda's 8x B200, and an owned H100 cluster at illustrative figures.
OFFERS = [
    {
        "slug": "aws-h100",
        "hardware": "h100-sxm",
        "pricing": "on_demand",
        "provider": "aws",
        "region": "us-east-1",
        "accelerators_per_instance": 8,
        "price_per_hour": "6.88",
    },
    {
        "slug": "aws-h100-spot",
        "hardware": "h100-sxm",
        "pricing": "spot",
        "provider": "aws",
        "region": "us-east-2",
        "accelerators_per_instance": 8,
        "price_per_hour": "1.406788",
        "preemptions_per_instance_hour": 1.07e-4,
        "preemptions_source": "AWS Spot Instance Advisor 5-10% bucket, midpoint",
    },
    {
        "slug": "aws-h100-block",
        "hardware": "h100-sxm",
        "pricing": "reserved",
        "provider": "aws",
        "region": "us-east-1",
        "accelerators_per_instance": 8,
        "price_per_hour": "4.916",
        "term_days": 14,
    },
    {
        "slug": "lambda-b200",
        "hardware": "b200",
        "pricing": "on_demand",
        "provider": "lambda",
        "region": "us-south-1",
        "accelerators_per_instance": 8,
        "price_per_hour": "6.69",
    },
    {
        "slug": "ours-h100",
        "hardware": "h100-sxm",
        "pricing": "owned",
        "provider": "ours",
        "grid_region": "FR",
        "pue": 1.3,
        "accelerators_per_instance": 8,
        "price_per_hour": "1.16",
        "price_per_kwh": "0.08",
    },
]
MODEL = {"params": 7e9, "tokens": 1.4e11}


@pytest.fixture
def offers(client, session):
    load_builtin_hardware(session)
    for offer in OFFERS:
        body = {"source": "test", "currency": "USD", **offer}
        response = client.post("/v1/offers", json=body)
        assert response.status_code == 201, response.get_json()


def compare(client, **body):
    response = client.post("/v1/comparisons", json=body)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_the_cheapest_way_by_a_date_ranks_every_pricing_by_what_is_paid(client, offers):
    result = compare(client, **MODEL, days=10)
    rows = {row["offer"]: row for row in result["offers"]}
    assert set(rows) | {row["offer"] for row in result["unable"]} == {offer["slug"] for offer in OFFERS}
    costs = [Decimal(row["cost"]) for row in result["offers"]]
    assert costs == sorted(costs)
    assert [row["rank"] for row in result["offers"]] == list(range(1, len(rows) + 1))
    for row in result["offers"]:
        assert row["days"] <= 10
        assert row["intervals"]["days"][0] <= row["days"] <= row["intervals"]["days"][1]
        assert row["layout"]["tensor_parallel"] >= 1
        assert row["energy"]["energy_kwh"] > 0
    # The spot offer pays for its preemptions in time, and the on-demand one does not have them.
    assert rows["aws-h100-spot"]["goodput"]["preemptions"] > 0
    assert rows["aws-h100"]["goodput"]["preemptions"] == 0
    # The same accelerators cost the same hours on demand, a fifth of the price on spot.
    assert Decimal(rows["aws-h100-spot"]["cost"]) < Decimal(rows["aws-h100"]["cost"])


def test_an_offer_rented_in_large_instances_is_sized_in_whole_instances(client, offers):
    pod = {**OFFERS[0], "slug": "aws-h100-pod", "accelerators_per_instance": 64}
    assert client.post("/v1/offers", json={"source": "test", "currency": "USD", **pod}).status_code == 201

    result = compare(client, **MODEL, days=10, offers=["aws-h100", "aws-h100-pod"])

    rows = {row["offer"]: row for row in result["offers"]}
    assert rows["aws-h100"]["accelerators"] < 64  # a node or a few are enough by the date
    assert rows["aws-h100-pod"]["accelerators"] == 64  # but that offer rents 64 at a time
    assert Decimal(rows["aws-h100-pod"]["cost"]) > Decimal(rows["aws-h100"]["cost"])


def test_a_reservation_is_paid_for_its_whole_term(client, offers):
    row = next(r for r in compare(client, **MODEL, days=10)["offers"] if r["offer"] == "aws-h100-block")
    term_hours = 14 * 24
    assert row["days"] * 24 < term_hours
    paid = Decimal("4.916") * row["accelerators"] * term_hours
    assert Decimal(row["cost"]) == paid.quantize(Decimal("0.01"))
    assert Decimal(row["run_cost"]) < Decimal(row["cost"])


def test_an_owned_cluster_pays_its_energy_at_the_meter(client, offers):
    row = next(r for r in compare(client, **MODEL, days=10)["offers"] if r["offer"] == "ours-h100")
    energy_per_hour = row["energy"]["energy_kwh"] / row["accelerator_hours"]
    assert Decimal(row["price_per_hour"]) == pytest.approx(
        Decimal("1.16") + Decimal("0.08") * Decimal(repr(energy_per_hour)), abs=Decimal("0.01")
    )
    assert row["energy"]["emissions_kg_co2e"] > 0  # France's grid, from the table


def test_the_frontier_holds_the_offers_no_other_beats_on_days_and_cost(client, offers):
    result = compare(client, **MODEL, days=10, rank_by="days")
    rows = {row["offer"]: row for row in result["offers"]}
    days = [row["days"] for row in result["offers"]]
    assert days == sorted(days)
    frontier = result["frontier"]
    assert frontier
    for slug, row in rows.items():
        beaten = any(
            other["days"] <= row["days"]
            and Decimal(other["cost"]) <= Decimal(row["cost"])
            and (other["days"], other["cost"]) != (row["days"], row["cost"])
            for other in rows.values()
        )
        assert (slug in frontier) == (not beaten) == row["on_frontier"], slug


def test_the_fastest_for_the_money_is_the_most_accelerators_within_it(client, offers):
    result = compare(client, **MODEL, cost="20000", rank_by="days")
    assert result["offers"]
    assert [row["days"] for row in result["offers"]] == sorted(row["days"] for row in result["offers"])
    for row in result["offers"]:
        assert Decimal(row["cost"]) <= Decimal("20000")
    # Paying by the hour: the next count the planner chooses among costs more than the money, and neither of
    # the two below (within it) is faster.
    row = next(row for row in result["offers"] if row["pricing"] in ("on_demand", "owned"))
    counts = wall_clock.candidate_counts(8, 32_768)
    price = {"price_per_hour": row["price_per_hour"], "currency": "USD"}

    def run_on(count):
        body = {**MODEL, "hardware": row["hardware"], "accelerators": count, **price}
        return client.post("/v1/estimates", json=body).get_json()

    index = counts.index(row["accelerators"])
    assert Decimal(run_on(counts[index + 1])["cost"]) > Decimal("20000")
    for fewer in map(run_on, counts[index - 2 : index]):
        assert Decimal(fewer["cost"]) > Decimal("20000") or fewer["days"] >= row["days"]


def test_a_budget_is_allocated_by_the_law_on_each_offer(client, offers):
    result = compare(
        client,
        cost="50000",
        days=30,
        law="chinchilla-2022",
        hardware=["h100-sxm"],
        pricing=["on_demand", "spot"],
    )
    assert {row["offer"] for row in result["offers"]} == {"aws-h100", "aws-h100-spot"}
    rows = {row["offer"]: row for row in result["offers"]}
    # The same money buys a larger model on spot capacity.
    assert rows["aws-h100-spot"]["flops"] > rows["aws-h100"]["flops"]
    assert all(row["predicted_loss"] is not None for row in rows.values())


def test_an_offer_in_another_currency_is_unable_and_says_why(client, offers):
    client.post("/v1/offers", json={**OFFERS[0], "slug": "eur-h100", "source": "x", "currency": "EUR"})
    result = compare(client, **MODEL, days=10)
    unable = {row["offer"]: row["reason"] for row in result["unable"]}
    assert "priced in EUR" in unable["eur-h100"]


def test_a_region_without_a_carbon_figure_gives_energy_without_emissions(client, offers):
    row = next(r for r in compare(client, **MODEL, days=10)["offers"] if r["offer"] == "lambda-b200")
    assert row["energy"]["energy_kwh"] > 0
    assert row["energy"]["emissions_kg_co2e"] is None
    assert any("no carbon figure for region 'lambda:us-south-1'" in note for note in row["notes"])


def test_no_offer_is_an_empty_comparison(client, offers):
    result = compare(client, **MODEL, days=10, provider=["nobody"])
    assert result == {"rank_by": "cost", "currency": "USD", "offers": [], "frontier": [], "unable": []}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tokens": 1e11, "days": 10}, "params"),
        ({"params": 7e9, "tokens": 1e11, "flops": 1e22}, "flops"),
        ({}, "'#'"),
        ({**MODEL, "days": 10, "rank_by": "speed"}, "rank_by"),
        ({"cost": "1000", "law": "no-such-law"}, "law"),
    ],
)
def test_bad_requests_are_422_naming_the_field(client, offers, body, field):
    problem = assert_problem(client.post("/v1/comparisons", json=body), 422)
    assert field in str(problem["errors"]) or field in problem["detail"]


def test_each_row_saves_as_a_plan_of_the_same_run(client, offers):
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    rows = {row["offer"]: row for row in compare(client, **MODEL, days=10)["offers"]}
    for slug in ("aws-h100-spot", "ours-h100"):
        row = rows[slug]
        response = client.post("/v1/plans", json={**row["plan"], "organization": "acme"})
        assert response.status_code == 201, response.get_json()
        plan = response.get_json()
        assert plan["labels"]["offer"] == slug
        assert plan["accelerators"] == row["accelerators"]
        assert plan["days"] == pytest.approx(row["days"], rel=1e-9)
        assert Decimal(plan["cost"]) == Decimal(row["run_cost"])


def test_spot_capacity_takes_longer_with_a_wider_interval_and_more_so_when_checkpoints_are_slow(
    client, offers
):
    run = {**MODEL, "hardware": "h100-sxm", "accelerators": 512}

    def estimate(**reliability):
        response = client.post("/v1/estimates", json={**run, "reliability": reliability})
        assert response.status_code == 200, response.get_json()
        return response.get_json()

    spot = {"preemptions_per_accelerator_hour": 1.07e-4 / 8, "requeue_seconds": 1800}
    for bandwidth in (2e12, 2e10):  # a parallel filesystem, and a slow bucket
        on_demand = estimate(checkpoint_write_bytes_per_second=bandwidth)
        preempted = estimate(checkpoint_write_bytes_per_second=bandwidth, **spot)
        assert preempted["days"] > on_demand["days"]
        width = lambda answer: answer["intervals"]["days"][1] / answer["intervals"]["days"][0]  # noqa: E731
        assert width(preempted) > width(on_demand)
    fast_loss = (
        estimate(checkpoint_write_bytes_per_second=2e12, **spot)["days"]
        / estimate(checkpoint_write_bytes_per_second=2e12)["days"]
    )
    slow_loss = (
        estimate(checkpoint_write_bytes_per_second=2e10, **spot)["days"]
        / estimate(checkpoint_write_bytes_per_second=2e10)["days"]
    )
    assert slow_loss > fast_loss

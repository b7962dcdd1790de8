"""Planned against actual (GET /v1/reports/costs with measure=actual or both) and the FOCUS export
(format=focus): what runs spent, read from their daily sums (usage_days), beside what their plans planned,
month by month and group by group, money exact and never added across currencies, every month of the window
present, names beside ids, a CSV a person reads (hours to the hundredth, a totals row) and one a FinOps tool
reads (FOCUS 1.1 columns, one usage charge per plan per day)."""

from __future__ import annotations

import csv
import io
import json
import re
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete

from service.data.models import Plan, UsageDay
from service.services.focus import FOCUS_COLUMNS
from tests.api.test_reports import CHARGED, FINANCE_COLUMNS, World, insert_plans, make_world, pieces
from tests.api.test_reports import PlanSpec as PlannedSpec
from tests.conftest import bearer
from tests.problems import assert_problem

JANUARY, APRIL = "2026-01-01T00:00:00Z", "2026-04-01T00:00:00Z"
QUARTER = {"from_": JANUARY, "to": APRIL}
MONTHS = [("2026-01-01", "2026-02-01"), ("2026-02-01", "2026-03-01"), ("2026-03-01", "2026-04-01")]
BOTH_METRICS = FINANCE_COLUMNS  # measure both: every column of a finance file


@pytest.fixture
def world(client, session) -> World:
    return make_world(client, session)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def plan(
    organization: str = "acme",
    start_at: str = "2026-01-10T00:00:00+00:00",
    *,
    status: str = "running",
    cost: str | None = "100.00",
    **overrides,
) -> PlannedSpec:
    return PlannedSpec(
        organization,
        at(start_at),
        status=status,
        cost=None if cost is None else Decimal(cost),
        **overrides,
    )


def spend(session, world: World, plan_id: uuid.UUID, days: dict[str, tuple[float, str]], currency="USD"):
    """Usage days of a plan, as the usage service keeps them: {"2026-01-10": (hours, cost)}."""
    organization_id = session.get(Plan, plan_id).organization_id
    session.add_all(
        UsageDay(
            plan_id=plan_id,
            day=date.fromisoformat(day),
            organization_id=organization_id,
            accelerator_hours=hours,
            cost=Decimal(cost),
            currency=currency,
        )
        for day, (hours, cost) in days.items()
    )
    session.commit()


def report(client, key: str | None = None, **params):
    headers = {} if key is None else bearer(key)
    query = urlencode({name.removesuffix("_"): value for name, value in params.items() if value is not None})
    return client.get(f"/v1/reports/costs?{query}", headers=headers)


def focus(client, key: str | None = None, **params):
    headers = {} if key is None else bearer(key)
    query = urlencode({name.removesuffix("_"): value for name, value in params.items() if value is not None})
    return client.get(f"/v1/reports/focus?{query}", headers=headers)


def body_of(client, key: str | None = None, **params) -> dict:
    response = report(client, key, **params)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def table(response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.get_data(as_text=True), newline="")))


def figures(row: dict) -> tuple:
    return tuple(row[name] for name in BOTH_METRICS)


# --- Planned beside actual --------------------------------------------------------------------------------


def test_both_sets_each_months_planned_beside_its_actual_and_the_variance(client, session, world):
    january_run, march_run = insert_plans(
        session,
        world,
        [
            plan(start_at="2026-01-10T00:00:00+00:00", cost="100.00", accelerator_hours=40.0),
            plan(start_at="2026-03-02T00:00:00+00:00", cost="50.00", accelerator_hours=20.0),
        ],
    )
    # The January run spends over two months, more than planned; the March one less.
    spend(session, world, january_run, {"2026-01-30": (24.0, "60.00"), "2026-02-01": (24.5, "61.25")})
    spend(session, world, march_run, {"2026-03-03": (8.0, "20.00")})

    body = body_of(client, **QUARTER, measure="both", granularity="month")

    assert body["measure"] == "both"
    assert body["statuses"] == ["committed", "running", "completed", "failed"]
    assert [list(row) for row in body["rows"]] == [
        ["period_start", "period_end", "currency", *BOTH_METRICS]
    ] * 3
    assert [(row["period_start"], row["period_end"]) for row in body["rows"]] == MONTHS
    assert [figures(row) for row in body["rows"]] == [
        # Plans made without energy (their hardware states no TDP): none summed, and counted.
        (1, 40.0, "100.00", 1, 24.0, "60.00", 0.0, "0.00", "-40.00", -40.0, None, None, 1, 1),
        # Nothing planned: no percentage, and no energy.
        (0, 0.0, "0.00", 1, 24.5, "61.25", 0.0, "0.00", "61.25", None, 0.0, 0.0, 0, 0),
        (1, 20.0, "50.00", 1, 8.0, "20.00", 0.0, "0.00", "-30.00", -60.0, None, None, 1, 1),
    ]
    assert body["totals"] == [
        {
            "currency": "USD",
            "planned_plans": 2,
            "planned_accelerator_hours": 60.0,
            "planned_cost": "150.00",
            "actual_plans": 2,  # each plan once, though the January one spent in two months
            "actual_accelerator_hours": 56.5,
            "actual_cost": "141.25",
            "off_schedule_accelerator_hours": 0.0,
            "off_schedule_cost": "0.00",
            "variance_cost": "-8.75",
            "variance_percent": -5.83,
            "planned_energy_kwh": None,  # not zero: none of its plans has it
            "planned_emissions_kg_co2e": None,
            "planned_plans_without_energy": 2,
            "planned_plans_without_emissions": 2,
        }
    ]
    # Under plan is negative, and the description says it may be (a fuzzing run found it did not).
    spec = client.get("/openapi.json").get_json()["components"]["schemas"]
    for component, documents in (("CostRow", body["rows"]), ("CostTotals", body["totals"])):
        pattern = spec[component]["properties"]["variance_cost"]["pattern"]
        assert all(re.search(pattern, document["variance_cost"]) for document in documents), component


def test_every_month_of_the_window_is_a_row_even_with_nothing_in_it(client, world):
    body = body_of(client, **QUARTER, measure="both", granularity="month")

    assert [(row["period_start"], row["currency"]) for row in body["rows"]] == [(m[0], None) for m in MONTHS]
    assert {figures(row) for row in body["rows"]} == {
        (0, 0.0, None, 0, 0.0, "0.00", 0.0, "0.00", None, None, 0.0, 0.0, 0, 0)
    }


def test_a_group_seen_in_the_window_has_a_row_of_zeros_in_the_months_it_has_nothing(client, session, world):
    acme, globex = insert_plans(
        session,
        world,
        [
            plan("acme", "2026-01-10T00:00:00+00:00", budget="acme-USD"),
            plan("globex", "2026-02-10T00:00:00+00:00", budget="globex-USD", cost="30.00"),
        ],
    )
    spend(session, world, acme, {"2026-03-15": (4.0, "10.00")})  # only actual in March

    body = body_of(client, **QUARTER, measure="both", granularity="month", group_by="organization")

    assert [
        (row["period_start"], row["organization"], row["planned_cost"], row["actual_cost"])
        for row in body["rows"]
    ] == [
        ("2026-01-01", "acme", "100.00", "0.00"),
        ("2026-01-01", "globex", "0.00", "0.00"),
        ("2026-02-01", "acme", "0.00", "0.00"),
        ("2026-02-01", "globex", "30.00", "0.00"),
        ("2026-03-01", "acme", "0.00", "10.00"),
        ("2026-03-01", "globex", "0.00", "0.00"),
    ]
    assert globex  # planned only: present every month, its actual zero


def test_organisation_and_budget_names_stand_beside_their_ids(client, session, world):
    (run,) = insert_plans(session, world, [plan("globex", budget="globex-EUR", cost="9.00", currency="EUR")])
    spend(session, world, run, {"2026-01-11": (1.0, "3.00")}, currency="EUR")

    body = body_of(client, **QUARTER, measure="both", group_by="organization,budget")

    (row,) = body["rows"]
    assert list(row)[:5] == ["organization", "organization_name", "budget", "budget_name", "currency"]
    assert (row["organization"], row["organization_name"]) == ("globex", "Globex")
    assert (row["budget"], row["budget_name"]) == (str(world.budgets["globex-EUR"]), "globex EUR")
    assert (row["currency"], row["planned_cost"], row["actual_cost"], row["variance_cost"]) == (
        "EUR",
        "9.00",
        "3.00",
        "-6.00",
    )


def test_planned_counts_every_plan_whose_cost_is_reserved_or_spent_unless_a_status_is_asked_for(
    client, session, world
):
    statuses = ("draft", "committed", "running", "completed", "failed", "cancelled")
    insert_plans(
        session,
        world,
        [plan(status=status, cost=str(10**index)) for index, status in enumerate(statuses)],
    )

    default = body_of(client, **QUARTER, measure="both")
    failed = body_of(client, **QUARTER, measure="both", status="failed")
    two = body_of(client, **QUARTER, measure="both", status="draft,cancelled")
    planned = body_of(client, **QUARTER)

    assert [(row["planned_plans"], row["planned_cost"]) for row in default["rows"]] == [(4, "11110.00")]
    assert [(row["planned_plans"], row["planned_cost"]) for row in failed["rows"]] == [(1, "10000.00")]
    assert [(row["planned_plans"], row["planned_cost"]) for row in two["rows"]] == [(2, "100001.00")]
    assert two["statuses"] == ["draft", "cancelled"]
    # The planned measure counts the same plans by default: one meaning of committed money.
    assert [(row["plans"], row["cost"]) for row in planned["rows"]] == [(4, "11110.00")]
    assert planned["statuses"] == default["statuses"]


@pytest.mark.parametrize("status", ["", "committed,", "committed,committed", "done", "committed,done"])
def test_an_unknown_empty_or_repeated_status_is_a_422_naming_it(client, world, status):
    problem = assert_problem(report(client, **QUARTER, status=status), 422)
    assert [error["parameter"] for error in problem["errors"]] == ["status"]


def test_a_status_filters_the_actual_side_too_and_groups_by_it(client, session, world):
    running, completed = insert_plans(session, world, [plan(status="running"), plan(status="completed")])
    spend(session, world, running, {"2026-01-12": (1.0, "1.00")})
    spend(session, world, completed, {"2026-01-12": (2.0, "2.00")})

    only_completed = body_of(client, **QUARTER, measure="actual", status="completed")
    by_status = body_of(client, **QUARTER, measure="actual", group_by="status")

    assert [(row["actual_plans"], row["actual_cost"]) for row in only_completed["rows"]] == [(1, "2.00")]
    assert [(row["status"], row["actual_cost"]) for row in by_status["rows"]] == [
        ("completed", "2.00"),
        ("running", "1.00"),
    ]
    assert list(by_status["rows"][0]) == [
        "status",
        "currency",
        "actual_plans",
        "actual_accelerator_hours",
        "actual_cost",
        "off_schedule_accelerator_hours",
        "off_schedule_cost",
    ]


def test_actual_counts_in_the_period_of_its_utc_day_and_the_window_is_half_open(client, session, world):
    (run,) = insert_plans(session, world, [plan(start_at="2025-12-20T00:00:00+00:00")])
    spend(
        session,
        world,
        run,
        {
            "2025-12-31": (1.0, "1.00"),
            "2026-01-01": (1.0, "10.00"),
            "2026-01-04": (1.0, "100.00"),  # a Sunday: the ISO week of 29 December
            "2026-01-05": (1.0, "1000.00"),  # a Monday
            "2026-01-31": (1.0, "10000.00"),
            "2026-02-01": (1.0, "100000.00"),
        },
    )

    month = body_of(client, from_=JANUARY, to="2026-02-01T00:00:00Z", measure="actual")
    weeks = body_of(client, from_=JANUARY, to="2026-02-01T00:00:00Z", measure="actual", granularity="week")

    assert [row["actual_cost"] for row in month["rows"]] == ["11110.00"]
    assert [(row["period_start"], row["actual_cost"]) for row in weeks["rows"]] == [
        ("2025-12-29", "110.00"),
        ("2026-01-05", "1000.00"),
        ("2026-01-12", "0.00"),
        ("2026-01-19", "0.00"),
        ("2026-01-26", "10000.00"),
    ]


def test_usd_and_eur_spend_are_rows_and_totals_of_their_own(client, session, world):
    usd, eur = insert_plans(
        session, world, [plan(cost="10.00"), plan(cost="20.00", currency="EUR", budget="acme-EUR")]
    )
    spend(session, world, usd, {"2026-01-12": (1.0, "0.10"), "2026-01-13": (1.0, "0.20")})
    spend(session, world, eur, {"2026-01-12": (1.0, "7.00")}, currency="EUR")

    body = body_of(client, **QUARTER, measure="both")

    assert [(row["currency"], row["actual_cost"], row["variance_cost"]) for row in body["rows"]] == [
        ("EUR", "7.00", "-13.00"),
        ("USD", "0.30", "-9.70"),  # exact: 0.1 + 0.2 as floats would not be 0.3
    ]
    assert [(total["currency"], total["actual_cost"]) for total in body["totals"]] == [
        ("EUR", "7.00"),
        ("USD", "0.30"),
    ]


def test_actual_sums_beyond_the_largest_single_amount_stay_exact(client, session, world):
    (run,) = insert_plans(session, world, [plan(cost="1.00")])
    largest = Decimal("999999999999.999999")  # Money is NUMERIC(18, 6)
    spend(session, world, run, {f"2026-01-{day:02d}": (1.0, str(largest)) for day in range(1, 11)})

    body = body_of(client, **QUARTER, measure="actual")

    assert [Decimal(row["actual_cost"]) for row in body["rows"]] == [largest * 10]
    assert body["rows"][0]["actual_cost"] == "9999999999999.99999"


def test_labels_group_actual_spend_through_its_plan(client, session, world):
    alpha, beta, unlabelled = insert_plans(
        session,
        world,
        [plan(labels={"team": "alpha"}), plan(labels={"team": "beta"}), plan()],
    )
    for run, cost in ((alpha, "1.00"), (beta, "2.00"), (unlabelled, "4.00")):
        spend(session, world, run, {"2026-02-02": (1.0, cost)})

    body = body_of(client, **QUARTER, measure="actual", group_by="label:team")

    assert [(row["label:team"], row["actual_cost"]) for row in body["rows"]] == [
        (None, "4.00"),
        ("alpha", "1.00"),
        ("beta", "2.00"),
    ]


def test_an_organisation_key_reads_only_its_own_spend(client, session, world, issue_key):
    acme, globex = insert_plans(session, world, [plan("acme"), plan("globex")])
    spend(session, world, acme, {"2026-01-12": (1.0, "1.00")})
    spend(session, world, globex, {"2026-01-12": (1.0, "400.00")})
    key = issue_key("finance", "acme")

    own = body_of(client, key, **QUARTER, measure="actual", group_by="organization")
    asked_for_other = body_of(client, key, **QUARTER, measure="actual", organization="globex")
    exported = table(focus(client, key, **QUARTER))

    assert [(row["organization"], row["actual_cost"]) for row in own["rows"]] == [("acme", "1.00")]
    assert asked_for_other["rows"] == []
    assert [row["BillingAccountId"] for row in exported] == ["acme"]


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ({"from_": JANUARY, "to": "2026-01-03T00:00:00Z"}, "3.00"),
        ({"from_": "2026-01-01T00:00:01Z", "to": "2026-01-03T00:00:00Z"}, "2.00"),
        ({"from_": JANUARY, "to": "2026-01-02T00:00:01Z"}, "3.00"),
        ({"from_": "2026-01-01T01:00:00+01:00", "to": "2026-01-02T23:59:59-01:00"}, "3.00"),  # 00:00, 00:59
        ({"from_": "2026-01-01T12:00:00Z", "to": "2026-01-01T13:00:00Z"}, None),
    ],
)
def test_a_day_of_spend_counts_when_it_begins_in_the_window_as_a_plan_does(
    client, session, world, window, expected
):
    (run,) = insert_plans(session, world, [plan()])
    spend(session, world, run, {"2026-01-01": (1.0, "1.00"), "2026-01-02": (1.0, "2.00")})

    body = body_of(client, **window, measure="actual")
    exported = table(focus(client, **window))

    assert [row["actual_cost"] for row in body["rows"]] == ([] if expected is None else [expected])
    assert sum(Decimal(line["BilledCost"]) for line in exported) == Decimal(expected or 0)


def test_an_unknown_measure_is_422_naming_it(client, world):
    response = report(client, **QUARTER, measure="forecast")

    body = assert_problem(response, 422)
    assert {error["parameter"] for error in body["errors"]} == {"measure"}


# --- CSV for a person -------------------------------------------------------------------------------------


def test_the_csv_rounds_hours_and_money_to_the_hundredth_and_gives_its_totals_as_a_file_of_their_own(
    client, session, world
):
    usd, eur = insert_plans(
        session,
        world,
        [
            plan(cost="100.004", accelerator_hours=40.125, budget="acme-USD"),
            plan(cost="20.00", currency="EUR", budget="acme-EUR", accelerator_hours=1.0),
        ],
    )
    spend(session, world, usd, {"2026-01-12": (12.345, "30.125"), "2026-02-01": (0.004, "0.01")})
    spend(session, world, eur, {"2026-01-12": (2.0, "5.00")}, currency="EUR")
    params = {**QUARTER, "measure": "both", "granularity": "month", "group_by": "budget"}

    in_json = body_of(client, **params)
    lines = table(report(client, **params, format="csv"))

    header = list(lines[0])
    assert header == ["period_start", "period_end", "budget", "budget_name", "currency", *BOTH_METRICS]
    assert len(lines) == len(in_json["rows"])  # the rows alone: no sum of a column counts twice
    january_usd = next(
        line for line in lines if line["period_start"] == "2026-01-01" and line["currency"] == "USD"
    )
    assert {name: january_usd[name] for name in BOTH_METRICS} == {
        "planned_plans": "1",
        "planned_accelerator_hours": "40.13",  # half up, as a person rounds: 40.125 is 40.13
        "planned_cost": "100.00",
        "actual_plans": "1",
        "actual_accelerator_hours": "12.35",
        "actual_cost": "30.13",
        "off_schedule_accelerator_hours": "0.00",
        "off_schedule_cost": "0.00",
        "variance_cost": "-69.88",  # rounded from the exact -69.879, not the difference of rounded cells
        "variance_percent": "-69.88",
        "planned_energy_kwh": "",
        "planned_emissions_kg_co2e": "",
        "planned_plans_without_energy": "1",
        "planned_plans_without_emissions": "1",
    }
    assert january_usd["budget_name"] == "acme USD"
    totals_response = report(client, **params, format="csv", part="totals")
    totals = table(totals_response)
    assert "_totals.csv" in totals_response.headers["Content-Disposition"]
    assert list(totals[0]) == ["currency", *BOTH_METRICS]
    assert [
        (line["currency"], line["planned_cost"], line["actual_cost"], line["actual_accelerator_hours"])
        for line in totals
    ] == [
        ("EUR", "20.00", "5.00", "2.00"),
        ("USD", "100.00", "30.14", "12.35"),
    ]
    usd_row = next(row for row in in_json["rows"] if row["currency"] == "USD")
    assert usd_row["actual_accelerator_hours"] == 12.345  # JSON keeps every digit
    assert usd_row["planned_cost"] == "100.004"


def test_a_csv_without_periods_or_groups_is_its_totals_already(client, session, world):
    (run,) = insert_plans(session, world, [plan()])
    spend(session, world, run, {"2026-01-12": (1.0, "1.00")})

    lines = table(report(client, **QUARTER, measure="both", format="csv"))

    assert [(line["currency"], line["actual_cost"]) for line in lines] == [("USD", "1.00")]


# --- FOCUS ------------------------------------------------------------------------------------------------


@pytest.fixture
def runs(session, world) -> dict[str, uuid.UUID]:
    """A labelled run on h100-sxm charged to acme's USD budget, and an unnamed, unbudgeted one of globex."""
    labelled, bare = insert_plans(
        session,
        world,
        [
            plan(
                "acme",
                budget="acme-USD",
                hardware="h100-sxm",
                labels={"team": "alpha", "cost.centre": "=1+2"},
                energy_kwh=48.0,  # of its 40 accelerator-hours: 1.2 kWh each
                emissions_kg_co2e=12.0,
            ),
            plan("globex", status="completed"),
        ],
    )
    session.get(Plan, labelled).name = "llama-7b"
    session.commit()
    spend(session, world, labelled, {"2026-01-30": (24.0, "60.123456"), "2026-02-01": (1.5, "3.75")})
    spend(session, world, bare, {"2026-01-30": (2.0, "5.00")})
    return {"labelled": labelled, "bare": bare}


def test_focus_is_one_usage_charge_per_plan_and_utc_day_in_the_columns_focus_names(client, runs, world):
    response = focus(client, **QUARTER)

    lines = table(response)
    assert list(lines[0]) == list(FOCUS_COLUMNS)
    assert (
        response.headers["Content-Disposition"]
        == 'attachment; filename="focus_20260101T000000Z_20260401T000000Z.csv"'
    )
    assert [(line["ChargePeriodStart"], line["ResourceId"]) for line in lines] == sorted(
        [
            ("2026-01-30T00:00:00Z", str(runs["labelled"])),
            ("2026-01-30T00:00:00Z", str(runs["bare"])),
            ("2026-02-01T00:00:00Z", str(runs["labelled"])),
        ]
    )
    first = next(line for line in lines if line["ResourceId"] == str(runs["labelled"]))
    assert first == {
        "BilledCost": "60.123456",  # every digit: FOCUS tools sum the rows again
        "EffectiveCost": "60.123456",
        "ListCost": "60.123456",
        "ContractedCost": "60.123456",
        "BillingCurrency": "USD",
        "BillingPeriodStart": "2026-01-01T00:00:00Z",
        "BillingPeriodEnd": "2026-02-01T00:00:00Z",
        "ChargePeriodStart": "2026-01-30T00:00:00Z",
        "ChargePeriodEnd": "2026-01-31T00:00:00Z",
        "ChargeCategory": "Usage",
        "ChargeClass": "",
        "ChargeFrequency": "Usage-Based",
        "ChargeDescription": "24.00 accelerator-hours on h100-sxm for plan llama-7b",
        "BillingAccountId": "acme",
        "BillingAccountName": "Acme",
        "SubAccountId": str(world.budgets["acme-USD"]),
        "SubAccountName": "acme USD",
        "ProviderName": "Compute Planner",
        "PublisherName": "Compute Planner",
        "InvoiceIssuerName": "Compute Planner",
        "InvoiceId": "",
        "ServiceName": "Model training",
        "ServiceCategory": "AI and Machine Learning",
        "ServiceSubcategory": "Machine Learning",
        "ResourceId": str(runs["labelled"]),
        "ResourceName": "llama-7b",
        "ResourceType": "Training run",
        "SkuId": "h100-sxm",
        "SkuPriceId": "",
        "ConsumedQuantity": "24.0",
        "ConsumedUnit": "Accelerator-Hours",
        "PricingQuantity": "24.0",
        "PricingUnit": "Accelerator-Hours",
        "PricingCategory": "Standard",
        "Tags": first["Tags"],
        "x_PlanStatus": "running",
        "x_OffScheduleCost": "0.00",
        "x_EnergyKwh": "28.8",  # its 24 hours at its plan's 1.2 kWh an accelerator-hour
        "x_EmissionsKgCO2e": "7.2",
    }
    assert json.loads(first["Tags"]) == {
        "team": "alpha",
        "cost.centre": "=1+2",  # inside a JSON object, which no spreadsheet evaluates
        "planner/budget": "acme USD",
        "planner/budget_id": str(world.budgets["acme-USD"]),
    }
    bare = next(line for line in lines if line["ResourceId"] == str(runs["bare"]))
    assert (bare["SubAccountId"], bare["ResourceName"], bare["SkuId"], bare["Tags"]) == (
        "",
        "",
        "custom",
        "{}",
    )
    assert bare["x_PlanStatus"] == "completed"
    assert (bare["x_EnergyKwh"], bare["x_EmissionsKgCO2e"]) == ("", "")  # its plan has none


def test_focus_by_month_has_the_months_charge_and_its_sums_equal_the_actual_report(client, runs):
    lines = table(focus(client, **QUARTER, granularity="month"))
    actual = body_of(client, **QUARTER, measure="actual", group_by="organization")

    labelled = [line for line in lines if line["ResourceId"] == str(runs["labelled"])]
    assert [
        (line["ChargePeriodStart"], line["ChargePeriodEnd"], line["BilledCost"]) for line in labelled
    ] == [
        ("2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "60.123456"),
        ("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", "3.75"),
    ]
    by_account: dict[str, Decimal] = {}
    for line in lines:
        by_account[line["BillingAccountId"]] = by_account.get(line["BillingAccountId"], 0) + Decimal(
            line["BilledCost"]
        )
    assert by_account == {row["organization"]: Decimal(row["actual_cost"]) for row in actual["rows"]}


def test_focus_takes_the_reports_filters(client, runs, world):
    budget = table(focus(client, **QUARTER, budget_id=str(world.budgets["acme-USD"])))
    completed = table(focus(client, **QUARTER, status="completed"))
    february = table(focus(client, from_="2026-02-01T00:00:00Z", to="2026-03-01T00:00:00Z"))

    assert {line["ResourceId"] for line in budget} == {str(runs["labelled"])}
    assert {line["ResourceId"] for line in completed} == {str(runs["bare"])}
    assert [line["ChargePeriodStart"] for line in february] == ["2026-02-01T00:00:00Z"]


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"group_by": "budget"}, "group_by"),
        ({"measure": "both"}, "measure"),
        ({"granularity": "week"}, "granularity"),
        ({"granularity": "none"}, "granularity"),
    ],
)
def test_focus_refuses_what_a_charge_per_plan_and_period_cannot_be(client, world, params, parameter):
    response = client.get("/v1/reports/focus?" + urlencode({"from": JANUARY, "to": APRIL, **params}))

    body = assert_problem(response, 422)
    assert {error["parameter"] for error in body["errors"]} == {parameter}


def test_focus_version_1_3_names_the_service_and_host_providers(client, runs):
    lines = table(focus(client, **QUARTER, focus_version="1.3"))
    default = table(focus(client, **QUARTER))

    assert "ProviderName" not in lines[0]
    assert (lines[0]["ServiceProviderName"], lines[0]["HostProviderName"]) == (
        "Compute Planner",
        "Compute Planner",
    )
    assert list(lines[0]).index("ServiceProviderName") == list(default[0]).index("ProviderName")
    assert [line["BilledCost"] for line in lines] == [line["BilledCost"] for line in default]
    assert_problem(focus(client, **QUARTER, focus_version="1.1"), 422)


def test_an_empty_focus_export_is_its_header_alone(client, world):
    response = focus(client, **QUARTER)

    assert response.get_data(as_text=True) == ",".join(FOCUS_COLUMNS) + "\r\n"


# --- The report equals a recomputation --------------------------------------------------------------------

START, END = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 7, 1, tzinfo=UTC)


@st.composite
def histories(draw) -> tuple[list[PlannedSpec], list[dict[str, tuple[float, str]]]]:
    """Up to 8 plans starting around the window, each with up to 6 days of spend around it."""
    count = draw(st.integers(1, 8))
    specs, days = [], []
    for _ in range(count):
        organization = draw(st.sampled_from(["acme", "globex"]))
        currency = draw(st.sampled_from(["USD", "EUR"]))
        start = START + timedelta(seconds=draw(st.integers(-40 * 86_400, 220 * 86_400)))
        status = draw(st.sampled_from(["draft", "committed", "running", "completed", "cancelled"]))
        specs.append(
            PlannedSpec(
                organization,
                start,
                status=status,
                budget=draw(st.sampled_from([None, f"{organization}-{currency}"])),
                hardware=draw(st.sampled_from([None, "h100-sxm"])),
                labels=draw(st.sampled_from([{}, {"team": "alpha"}, {"team": "beta"}])),
                cost=Decimal(draw(st.integers(0, 10**12))).scaleb(-6),
                currency=currency,
                accelerator_hours=draw(st.floats(0.5, 1e5)),
            )
        )
        # Only a plan whose money is committed takes usage (a draft or a cancelled plan is refused it).
        offsets = draw(st.lists(st.integers(-40, 220), unique=True, max_size=6)) if status in CHARGED else []
        days.append(
            {
                (START.date() + timedelta(days=offset)).isoformat(): (
                    draw(st.floats(0, 1e4)),
                    str(Decimal(draw(st.integers(0, 10**12))).scaleb(-6)),
                )
                for offset in offsets
            }
        )
    return specs, days


@given(
    history=histories(),
    granularity=st.sampled_from(["none", "week", "month"]),
    group_by=st.sampled_from(["", "organization", "budget,label:team", "hardware,status"]),
)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_planned_and_actual_equal_a_recomputation_over_the_same_plans_and_days(
    client, session, world, history, granularity, group_by
):
    specs, days = history
    ids = insert_plans(session, world, specs)
    for plan_id, spec, spent in zip(ids, specs, days, strict=True):
        spend(session, world, plan_id, spent, currency=spec.currency)
    try:
        body = body_of(
            client,
            from_=START.isoformat(),
            to=END.isoformat(),
            measure="both",
            granularity=granularity,
            group_by=group_by or None,
        )
        groups = [name for name in group_by.split(",") if name]
        planned: dict[tuple, Decimal] = {}
        actual: dict[tuple, Decimal] = {}
        for spec, spent in zip(specs, days, strict=True):
            group = (*(_group_value(spec, name, world) for name in groups), spec.currency)
            if spec.start_at < END and spec.end_at > START and spec.status in CHARGED:
                window = SimpleNamespace(start=START, end=END, granularity=granularity)
                for bounds, _share, cost in pieces(spec, window):
                    key = (bounds[0] if bounds else None, *group)
                    planned[key] = planned.get(key, Decimal(0)) + cost
            for day, (_, cost) in spent.items():
                if START.date() <= date.fromisoformat(day) < END.date():
                    key = (_period_start(date.fromisoformat(day), granularity), *group)
                    actual[key] = actual.get(key, Decimal(0)) + Decimal(cost)

        found_planned, found_actual = {}, {}
        for row in body["rows"]:
            key = (row.get("period_start"), *(row[name] for name in groups), row["currency"])
            assert key not in found_planned, "a group appears twice"
            found_planned[key] = Decimal(row["planned_cost"] or 0)
            found_actual[key] = Decimal(row["actual_cost"])
            assert Decimal(row["variance_cost"] or 0) == found_actual[key] - found_planned[key]
        assert {key: value for key, value in found_planned.items() if value} == {
            key: value for key, value in planned.items() if value
        }
        assert {key: value for key, value in found_actual.items() if value} == {
            key: value for key, value in actual.items() if value
        }
        assert set(planned) | set(actual) <= set(found_planned)
        if granularity != "none":  # every period of the window, for every group seen
            periods = {key[0] for key in found_planned}
            expected = {_period_start(START.date() + timedelta(days=n), granularity) for n in range(181)}
            assert periods == expected
    finally:
        session.execute(delete(UsageDay).where(UsageDay.plan_id.in_(ids)))
        session.execute(delete(Plan).where(Plan.id.in_(ids)))
        session.commit()


def _group_value(spec: PlannedSpec, name: str, world: World) -> str | None:
    if name == "organization":
        return spec.organization
    if name == "budget":
        return None if spec.budget is None else str(world.budgets[spec.budget])
    if name == "hardware":
        return spec.hardware
    if name == "status":
        return spec.status
    return spec.labels.get(name.removeprefix("label:"))


def _period_start(day: date, granularity: str) -> str | None:
    if granularity == "none":
        return None
    if granularity == "week":
        return (day - timedelta(days=day.weekday())).isoformat()
    return day.replace(day=1).isoformat()


# --- Through the usage API --------------------------------------------------------------------------------


def test_usage_reported_through_the_api_is_the_actual_spend_of_reports_and_focus(client, world):
    """A plan on lab-gpu (2.50 USD an hour), committed, reports 36 hours from 12:00 on 31 January to midnight
    on 2 February: 12 hours in January and 24 in February, each day's share of the 90.00 USD charged."""
    budget = str(world.budgets["acme-USD"])
    body = {"organization": "acme", "budget_id": budget, "params": 1e9, "tokens": 6e10, "hardware": "lab-gpu"}
    plan = client.post("/v1/plans", json={**body, "accelerators": 10, "mfu": 0.5, "start_at": JANUARY})
    assert plan.status_code == 201, plan.get_json()
    plan_id = plan.get_json()["id"]
    assert client.post(f"/v1/plans/{plan_id}/commit").status_code == 200
    usage = {
        "reporter": "slurm-a",
        "period_start": "2026-01-31T12:00:00Z",
        "period_end": "2026-02-02T00:00:00Z",
        "accelerator_hours": 36,
        "tokens": 1e10,
    }
    recorded = client.post(f"/v1/plans/{plan_id}/usage", json=usage)
    assert recorded.status_code == 201, recorded.get_json()
    assert recorded.get_json()["cost"] == "90.00"

    body = body_of(client, **QUARTER, measure="both", granularity="month", group_by="budget")
    lines = table(focus(client, **QUARTER))

    assert [
        (
            row["period_start"],
            row["budget_name"],
            row["planned_cost"],
            row["actual_cost"],
            row["actual_plans"],
        )
        for row in body["rows"]
    ] == [
        ("2026-01-01", "acme USD", "500.00", "30.00", 1),
        ("2026-02-01", "acme USD", "0.00", "60.00", 1),
        ("2026-03-01", "acme USD", "0.00", "0.00", 0),
    ]
    assert [
        (line["ChargePeriodStart"][:10], line["BilledCost"], line["ConsumedQuantity"]) for line in lines
    ] == [
        ("2026-01-31", "30.00", "12.0"),
        ("2026-02-01", "60.00", "24.0"),
    ]
    assert {line["x_PlanStatus"] for line in lines} == {"running"}


def test_a_window_with_nothing_grouped_by_status_has_rows_of_zeros_whose_groups_are_null(client, world):
    body = body_of(
        client,
        from_=JANUARY,
        to="2026-02-01T00:00:00Z",
        measure="both",
        granularity="month",
        group_by="status,label:team",
    )

    assert [
        (row["status"], row["label:team"], row["currency"], row["actual_cost"]) for row in body["rows"]
    ] == [(None, None, None, "0.00")]


def test_format_focus_on_the_cost_report_is_the_focus_export(client, session, world):
    (run,) = insert_plans(session, world, [plan()])
    spend(session, world, run, {"2026-01-12": (1.0, "1.00"), "2026-02-03": (2.0, "2.00")})

    as_format = report(client, **QUARTER, format="focus", granularity="month")
    exported = focus(client, **QUARTER, granularity="month")

    assert as_format.status_code == 200
    assert as_format.headers["Content-Type"].startswith("text/csv")
    assert as_format.get_data() == exported.get_data()


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"group_by": "budget"}, "group_by"),
        ({"measure": "both"}, "measure"),
        ({"granularity": "week"}, "granularity"),
    ],
)
def test_format_focus_refuses_what_a_focus_row_cannot_be(client, world, params, parameter):
    response = report(client, **QUARTER, format="focus", **params)

    body = assert_problem(response, 422)
    assert [error["parameter"] for error in body["errors"]] == [parameter]

"""Cost reports and budget utilisation over HTTP: sums that equal a recomputation in Python, exact money
never mixed across currencies, UTC windows and buckets, CSV that a spreadsheet cannot turn into a formula,
and every organisation reading only its own plans."""

from __future__ import annotations

import csv
import io
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, select

from service.data.models import HardwareProfile, Organization, Plan
from service.services.catalog import load_builtin_hardware
from tests.builders import gpu_body
from tests.conftest import bearer
from tests.problems import assert_problem

ORGANIZATIONS = ("acme", "globex")
CURRENCIES = ("USD", "EUR")
STATUSES = ("draft", "committed", "cancelled")
LABEL_KEYS = ("team", "cost.centre")
# Accents and CJK, the empty string, a word SQL and JSON treat specially, and cells a spreadsheet would
# evaluate (the API refuses control codes in labels; a tab is stored directly to check the CSV anyway).
LABEL_VALUES = ("alpha", "beta", "équipe", "团队", "", "null", "=1+2", "+cmd", "-2", "@sum", "\tx")
GROUPS = ("organization", "budget", "hardware", "status", *(f"label:{key}" for key in LABEL_KEYS))
ENERGY = ["energy_kwh", "emissions_kg_co2e", "plans_without_energy", "plans_without_emissions"]
METRICS = ["plans", "accelerator_hours", "flops", "cost", "estimated", *ENERGY]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
JANUARY, FEBRUARY = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"


@dataclass
class World:
    organizations: dict[str, uuid.UUID]
    hardware: dict[str, uuid.UUID]
    budgets: dict[str, uuid.UUID]  # "acme-USD" -> id


@pytest.fixture
def world(client, session) -> World:
    return make_world(client, session)


def make_world(client, session) -> World:
    """acme and globex with a USD and a EUR budget each; h100-sxm (built in, USD), lab-gpu (2.50 USD an
    hour) and eu-gpu (3.00 EUR an hour)."""
    load_builtin_hardware(session)
    for slug in ORGANIZATIONS:
        assert client.post("/v1/organizations", json={"slug": slug, "name": slug.title()}).status_code == 201
    for slug, price, currency in (("lab-gpu", "2.50", "USD"), ("eu-gpu", "3.00", "EUR")):
        assert client.post("/v1/hardware", json=gpu_body(slug, price, currency)).status_code == 201
    budgets = {}
    for organization in ORGANIZATIONS:
        for currency in CURRENCIES:
            response = client.post(
                "/v1/budgets",
                json={
                    "organization": organization,
                    "name": f"{organization} {currency}",
                    "amount": "1000000000.00",
                    "currency": currency,
                    "period_start": "2025-01-01T00:00:00Z",
                    "period_end": "2029-01-01T00:00:00Z",
                },
            )
            assert response.status_code == 201, response.get_json()
            budgets[f"{organization}-{currency}"] = uuid.UUID(response.get_json()["id"])
    return World(
        organizations=dict(session.execute(select(Organization.slug, Organization.id)).all()),
        hardware=dict(session.execute(select(HardwareProfile.slug, HardwareProfile.id)).all()),
        budgets=budgets,
    )


@dataclass(frozen=True)
class PlanSpec:
    """What a report reads of a plan."""

    organization: str
    start_at: datetime
    status: str = "committed"
    budget: str | None = None  # a key of World.budgets
    hardware: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    cost: Decimal | None = Decimal("100.00")
    currency: str | None = "USD"
    accelerator_hours: float = 40.0
    flops: float = 1e21
    energy_kwh: float | None = None  # None: its hardware states no TDP
    emissions_kg_co2e: float | None = None  # None: made without a site (or without energy)
    duration: timedelta | None = None  # its schedule's length; by default its hours on 8 accelerators

    @property
    def end_at(self) -> datetime:
        return self.start_at + (self.duration or timedelta(hours=self.accelerator_hours / 8))


def insert_plans(session, world: World, specs: list[PlanSpec]) -> list[uuid.UUID]:
    """Stores plans directly (the planner would take far longer to make them), plausible in every column."""
    plans = [
        Plan(
            organization_id=world.organizations[spec.organization],
            budget_id=None if spec.budget is None else world.budgets[spec.budget],
            hardware_id=None if spec.hardware is None else world.hardware[spec.hardware],
            labels=dict(spec.labels),
            status=spec.status,
            start_at=spec.start_at,
            end_at=spec.end_at,
            inputs={"params": 1e9, "tokens": spec.flops / 6e9, "accelerators": 8},
            snapshot={},
            result={},
            method="fixed",
            params=1e9,
            tokens=spec.flops / 6e9,
            flops=spec.flops,
            accelerators=8,
            days=spec.accelerator_hours / 8 / 24,
            accelerator_hours=spec.accelerator_hours,
            cost=spec.cost,
            currency=spec.currency,
            energy_kwh=spec.energy_kwh,
            emissions_kg_co2e=spec.emissions_kg_co2e,
            created_by="test",
            committed_at=spec.start_at if spec.status != "draft" else None,
            cancelled_at=spec.start_at if spec.status == "cancelled" else None,
        )
        for spec in specs
    ]
    session.add_all(plans)
    session.commit()
    return [plan.id for plan in plans]


def report(client, key: str | None = None, **params):
    headers = {} if key is None else bearer(key)
    headers.update(params.pop("headers", {}))
    query = urlencode({name.removesuffix("_"): value for name, value in params.items() if value is not None})
    return client.get(f"/v1/reports/costs?{query}", headers=headers)


def report_body(client, key: str | None = None, **params) -> dict:
    response = report(client, key, **params)
    assert response.status_code == 200, response.get_json()
    assert response.headers["Content-Type"] == "application/json"
    return response.get_json()


def csv_rows(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(response.get_data().decode("utf-8"), newline="")))


FINANCE_COLUMNS = [
    "planned_plans",
    "planned_accelerator_hours",
    "planned_cost",
    "actual_plans",
    "actual_accelerator_hours",
    "actual_cost",
    "off_schedule_accelerator_hours",
    "off_schedule_cost",
    "variance_cost",
    "variance_percent",
    *(f"planned_{name}" for name in ENERGY),  # last: the columns before them keep their places
]
ACTUAL_AND_VARIANCE = FINANCE_COLUMNS[3:10]
NAMES = {"organization": "organization_name", "budget": "budget_name"}


def cell_value(cell: str) -> str:
    """What a CSV cell holds, its formula guard taken off."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(FORMULA_STARTS) else cell


def assert_csv_matches_json(csv_response, json_rows: list[dict], group_by: tuple[str, ...] = ()) -> None:
    """The finance CSV holds the planned JSON's rows as finance reads them: the same groups (names beside
    organisation and budget ids, formulae defused), plans, hours to the hundredth and money to the cent on
    the planned side, the actual side and the variance blank; the periods without plans are rows of zeros."""
    assert csv_response.status_code == 200, csv_response.get_data(as_text=True)
    assert csv_response.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert re.fullmatch(
        r'attachment; filename="[A-Za-z0-9_.-]+\.csv"', csv_response.headers["Content-Disposition"]
    )
    header, *lines = csv_rows(csv_response)
    groups = [column for name in group_by for column in ([name, NAMES[name]] if name in NAMES else [name])]
    period = ["period_start", "period_end"] if header[0] == "period_start" else []
    assert header == [*period, *groups, "currency", *FINANCE_COLUMNS]
    keys = [*period, *group_by, "currency"]
    in_csv = {}
    for line in lines:
        cells = dict(zip(header, line, strict=True))
        key = tuple(cell_value(cells[name]) for name in keys)
        assert key not in in_csv, "a row appears twice"
        in_csv[key] = cells
        for name in ACTUAL_AND_VARIANCE:
            assert cells[name] == "", name  # measure planned: no actual side, no variance
    for row in json_rows:
        key = tuple("" if row[name] is None else row[name] for name in keys)
        cells = in_csv.pop(key)
        assert int(cells["planned_plans"]) == row["plans"]
        hours = Decimal(repr(row["accelerator_hours"])).quantize(Decimal("0.01"), ROUND_HALF_UP)
        assert cells["planned_accelerator_hours"] == f"{hours:f}"
        if row["cost"] is None:
            assert cells["planned_cost"] == ""
        else:
            assert (
                cells["planned_cost"] == f"{Decimal(row['cost']).quantize(Decimal('0.01'), ROUND_HALF_UP):f}"
            )
        for name in ("energy_kwh", "emissions_kg_co2e"):  # to the hundredth, blank where no plan has it
            figure = row[name]
            expected = (
                ""
                if figure is None
                else f"{Decimal(repr(figure)).quantize(Decimal('0.01'), ROUND_HALF_UP):f}"
            )
            assert cells[f"planned_{name}"] == expected, name
        for name in ("plans_without_energy", "plans_without_emissions"):
            assert int(cells[f"planned_{name}"]) == row[name], name
    for cells in in_csv.values():  # a period of the window without plans
        assert (cells["planned_plans"], cells["planned_accelerator_hours"]) == ("0", "0.00")
        assert cells["planned_cost"] in {"0.00", ""}


# --- The report equals a recomputation --------------------------------------------------------------------

BASE = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday
MONDAY = datetime(2026, 1, 5, tzinfo=UTC)
BOUNDARIES = sorted(
    {
        datetime(2025, 12, 1, tzinfo=UTC),
        *(datetime(year, month, 1, tzinfo=UTC) for year in (2026, 2027) for month in range(1, 13)),
        datetime(2028, 1, 1, tzinfo=UTC),
        *(MONDAY + timedelta(weeks=weeks) for weeks in range(0, 104, 9)),
    }
)
MICROSECOND = timedelta(microseconds=1)
OFFSETS = (
    UTC,
    timezone(timedelta(hours=1)),
    timezone(timedelta(hours=-1)),
    timezone(timedelta(hours=5, minutes=30)),
    timezone(timedelta(hours=-9, minutes=-30)),
    timezone(timedelta(hours=14)),
)


def moments() -> st.SearchStrategy[datetime]:
    """Any second from December 2025 to 2027, or a day, week or month boundary, or just before one."""
    anywhere = st.integers(-31 * 86_400, 730 * 86_400).map(lambda seconds: BASE + timedelta(seconds=seconds))
    edge = st.tuples(st.sampled_from(BOUNDARIES), st.sampled_from([timedelta(0), -MICROSECOND])).map(
        lambda pair: pair[0] + pair[1]
    )
    return st.one_of(anywhere, edge)


def money() -> st.SearchStrategy[tuple[Decimal | None, str | None]]:
    """Whole cents, or millionths as prices times hours give, up to a hundred million; a third unpriced."""
    amount = st.one_of(
        st.integers(0, 10**10).map(lambda cents: Decimal(cents).scaleb(-2)),
        st.integers(0, 10**14).map(lambda millionths: Decimal(millionths).scaleb(-6)),
    )
    priced = st.tuples(amount, st.sampled_from(CURRENCIES))
    return st.one_of(st.just((None, None)), priced, priced)


def within(start: datetime, end: datetime) -> st.SearchStrategy[datetime]:
    """Any microsecond in [start, end)."""
    span = (end - start) // MICROSECOND
    return st.integers(0, span - 1).map(lambda micros: start + micros * MICROSECOND)


@st.composite
def plan_specs(draw, start: datetime, end: datetime) -> PlanSpec:
    organization = draw(st.sampled_from(ORGANIZATIONS))
    cost, currency = draw(money())
    budget = draw(st.sampled_from([None, *(f"{organization}-{currency}" for currency in CURRENCIES)]))
    if budget is not None and currency is not None:
        currency = budget.split("-")[1]  # a plan charged to a budget costs the budget's currency
    return PlanSpec(
        organization=organization,
        start_at=draw(
            st.one_of(
                within(start, end),
                within(start, end),
                st.sampled_from([start, end, end - MICROSECOND, start - MICROSECOND]),
                moments(),
            )
        ),
        status=draw(st.sampled_from(["committed", "committed", "draft", "cancelled"])),
        budget=budget,
        hardware=draw(st.sampled_from([None, "h100-sxm", "eu-gpu"])),
        labels=draw(st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2)),
        cost=cost,
        currency=currency,
        accelerator_hours=(hours := draw(st.floats(0.5, 1e6))),
        flops=draw(st.floats(1e15, 1e26)),
        energy_kwh=(kwh := draw(st.sampled_from([None, hours * 0.8, hours * 1.3]))),
        emissions_kg_co2e=None if kwh is None else draw(st.sampled_from([None, kwh * 0.4])),
    )


@dataclass(frozen=True)
class Case:
    start: datetime
    end: datetime
    offset: timezone
    granularity: str | None
    group_by: tuple[str, ...]
    organization: str | None
    budget: str | None
    hardware: str | None
    status: str | None
    plans: list[PlanSpec]

    def params(self, world: World) -> dict[str, str | None]:
        def stamp(moment: datetime) -> str:
            return moment.astimezone(self.offset).isoformat().replace("+00:00", "Z")

        return {
            "from": stamp(self.start),
            "to": stamp(self.end),
            "granularity": self.granularity,
            "group_by": ",".join(self.group_by) or None,
            "organization": self.organization,
            "budget_id": None if self.budget is None else str(world.budgets[self.budget]),
            "hardware": self.hardware,
            "status": self.status,
        }


@st.composite
def cases(draw) -> Case:
    start = draw(moments())
    end = draw(
        st.one_of(
            st.integers(1, 800 * 86_400).map(lambda seconds: start + timedelta(seconds=seconds)),
            st.sampled_from(BOUNDARIES),
        )
    )
    if end <= start:
        end = start + timedelta(days=35)
    return Case(
        start=start,
        end=end,
        offset=draw(st.sampled_from(OFFSETS)),
        granularity=draw(st.sampled_from([None, "none", "day", "week", "month"])),
        group_by=tuple(draw(st.lists(st.sampled_from(GROUPS), unique=True, max_size=3))),
        # Filters now and then: each alone leaves a third of the plans or fewer.
        organization=draw(st.sampled_from([None] * 6 + [*ORGANIZATIONS, "initech"])),
        budget=draw(st.sampled_from([None] * 8 + ["acme-USD", "globex-EUR"])),
        hardware=draw(st.sampled_from([None] * 6 + ["h100-sxm", "eu-gpu", "no-such-gpu"])),
        status=draw(st.sampled_from([None] * 5 + [*STATUSES])),
        plans=draw(st.lists(plan_specs(start, end), min_size=1, max_size=20)),
    )


def period(moment: datetime, granularity: str) -> tuple[str, ...]:
    """The UTC day, ISO week (from Monday) or month a moment falls in, as (first day, day after the last)."""
    day = moment.astimezone(UTC).date()
    if granularity == "day":
        first, end = day, day + timedelta(days=1)
    elif granularity == "week":
        first = day - timedelta(days=day.weekday())
        end = first + timedelta(days=7)
    elif granularity == "month":
        first = day.replace(day=1)
        end = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    else:
        return ()
    return first.isoformat(), end.isoformat()


def group_value(spec: PlanSpec, name: str, world: World) -> str | None:
    if name == "organization":
        return spec.organization
    if name == "budget":
        return None if spec.budget is None else str(world.budgets[spec.budget])
    if name == "hardware":
        return spec.hardware
    if name == "status":
        return spec.status
    return spec.labels.get(name.removeprefix("label:")) or None  # empty is as missing (one null group)


CHARGED = ("committed", "running", "completed", "failed")


def pieces(spec: PlanSpec, case: Case) -> list[tuple[tuple[str, ...], Fraction, Decimal | None]]:
    """The periods of the window the plan's schedule falls in, each with its share of the schedule's time and
    of its cost, as the report's rule has it: time pro rata; the cost in cents (millionths where it has
    them), by the largest remainder over the pieces inside the window, then the parts before and after it."""
    granularity = case.granularity or "none"
    inside_start, inside_end = max(spec.start_at, case.start), min(spec.end_at, case.end)
    found: list[tuple[tuple[str, ...], int]] = []
    moment = inside_start
    while moment < inside_end:
        bounds = period(moment, granularity)
        after = inside_end if not bounds else min(at(bounds[1] + "T00:00:00+00:00"), inside_end)
        found.append((bounds, (after - moment) // MICROSECOND))
        moment = after
    weights = [w for _, w in found] + [
        (inside_start - spec.start_at) // MICROSECOND,
        (spec.end_at - inside_end) // MICROSECOND,
    ]
    total = sum(weights)
    money: list[Decimal | None] = [None] * len(found)
    if spec.cost is not None:
        quantum = Decimal("0.01") if spec.cost == spec.cost.quantize(Decimal("0.01")) else Decimal("0.000001")
        units = int(spec.cost / quantum)
        ideal = [Fraction(units * w, total) for w in weights]
        parts = [int(value) for value in ideal]
        order = sorted(range(len(weights)), key=lambda i: -(ideal[i] - parts[i]))
        for i in order[: units - sum(parts)]:
            parts[i] += 1
        money = [quantum * part for part in parts[: len(found)]]
    return [(bounds, Fraction(w, total), cost) for (bounds, w), cost in zip(found, money, strict=True)]


def recompute(case: Case, world: World) -> tuple[dict[tuple, dict], dict[str | None, dict]]:
    """The rows (by key: period, groups, currency) and the totals per currency, straight from the specs."""
    rows: dict[tuple, dict] = {}
    totals: dict[str | None, dict] = {}
    for spec in case.plans:
        if not (
            spec.start_at < case.end
            and spec.end_at > case.start
            and spec.status in (case.status.split(",") if case.status else CHARGED)
            and case.organization in (None, spec.organization)
            and case.budget in (None, spec.budget)
            and case.hardware in (None, spec.hardware)
        ):
            continue
        groups = tuple(group_value(spec, name, world) for name in case.group_by)
        total = totals.setdefault(spec.currency, figures_of_none())
        total["plans"] += 1
        total["plans_without_energy"] += spec.energy_kwh is None
        total["plans_without_emissions"] += spec.emissions_kg_co2e is None
        for bounds, share, cost in pieces(spec, case):
            for figures in (rows.setdefault((*bounds, *groups, spec.currency), figures_of_none()),):
                figures["plans"] += 1
                figures["plans_without_energy"] += spec.energy_kwh is None
                figures["plans_without_emissions"] += spec.emissions_kg_co2e is None
            for figures in (rows[(*bounds, *groups, spec.currency)], total):
                figures["accelerator_hours"] += spec.accelerator_hours * float(share)
                figures["flops"] += spec.flops * float(share)
                if cost is not None:
                    figures["cost"] = (figures["cost"] or Decimal(0)) + cost
                for name in ("energy_kwh", "emissions_kg_co2e"):  # spread like the hours
                    if (figure := getattr(spec, name)) is not None:
                        figures[name] = (figures[name] or 0.0) + figure * float(share)
    return rows, totals


def figures_of_none() -> dict:
    return {
        "plans": 0,
        "accelerator_hours": 0.0,
        "flops": 0.0,
        "cost": None,
        "energy_kwh": None,
        "emissions_kg_co2e": None,
        "plans_without_energy": 0,
        "plans_without_emissions": 0,
    }


def assert_figures(actual: dict, expected: dict) -> None:
    for name in ("energy_kwh", "emissions_kg_co2e"):
        if expected[name] is None:
            assert actual[name] is None, name
        else:
            assert actual[name] == pytest.approx(expected[name], rel=1e-9), name
    assert (actual["plans_without_energy"], actual["plans_without_emissions"]) == (
        expected["plans_without_energy"],
        expected["plans_without_emissions"],
    )
    assert actual["plans"] == expected["plans"]
    assert actual["accelerator_hours"] == pytest.approx(expected["accelerator_hours"], rel=1e-9)
    assert actual["flops"] == pytest.approx(expected["flops"], rel=1e-9)
    if expected["cost"] is None:
        assert actual["cost"] is None
    else:  # a string, exact to the millionth, never through a float: the cents and any further digits
        assert re.fullmatch(r"\d+\.\d\d(\d{0,3}[1-9])?", actual["cost"]), actual["cost"]
        assert Decimal(actual["cost"]) == expected["cost"]
    assert actual["estimated"] is True


@given(case=cases())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_report_equals_a_recomputation_over_the_same_plans(client, session, world, case):
    ids = insert_plans(session, world, case.plans)
    try:
        body = report_body(client, **case.params(world))

        bounds = ["period_start", "period_end"] if case.granularity not in (None, "none") else []
        keys = [*bounds, *case.group_by, "currency"]
        expected_rows, expected_totals = recompute(case, world)
        assert datetime.fromisoformat(body["from"]) == case.start
        assert datetime.fromisoformat(body["to"]) == case.end
        for row in body["rows"]:
            assert list(row) == keys + METRICS
        found = {tuple(row[name] for name in keys): row for row in body["rows"]}
        assert len(found) == len(body["rows"]), "a group appears twice"
        assert set(found) == set(expected_rows)
        for key, row in found.items():
            assert_figures(row, expected_rows[key])
        totals = {total["currency"]: total for total in body["totals"]}
        assert len(totals) == len(body["totals"])
        assert set(totals) == set(expected_totals)
        for currency, total in totals.items():
            assert_figures(total, expected_totals[currency])

        assert_csv_matches_json(
            report(client, **case.params(world), format="csv"), body["rows"], case.group_by
        )
    finally:
        session.execute(delete(Plan).where(Plan.id.in_(ids)))
        session.commit()


# --- Windows and time zones -------------------------------------------------------------------------------


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


HOUR = timedelta(hours=1)


def test_the_window_includes_from_and_excludes_to(client, session, world):
    insert_plans(
        session,
        world,
        [
            PlanSpec("acme", at("2025-12-31T23:00:00+00:00"), cost=Decimal("1.00"), duration=HOUR),
            PlanSpec("acme", at("2026-01-01T00:00:00+00:00"), cost=Decimal("10.00"), duration=HOUR),
            PlanSpec("acme", at("2026-01-31T23:00:00+00:00"), cost=Decimal("100.00"), duration=HOUR),
            PlanSpec("acme", at("2026-02-01T00:00:00+00:00"), cost=Decimal("1000.00"), duration=HOUR),
        ],
    )

    body = report_body(client, from_=JANUARY, to=FEBRUARY)

    assert [(row["plans"], row["cost"]) for row in body["rows"]] == [(2, "110.00")]
    assert body["totals"] == [
        {
            "currency": "USD",
            "plans": 2,
            "accelerator_hours": 80.0,
            "flops": 2e21,
            "cost": "110.00",
            "estimated": True,
            "energy_kwh": None,
            "emissions_kg_co2e": None,
            "plans_without_energy": 2,
            "plans_without_emissions": 2,
        }
    ]


@pytest.mark.parametrize("granularity", ["none", "day"])
@pytest.mark.parametrize("measure", ["planned", "actual", "both"])
def test_a_window_that_ends_where_it_begins_is_an_empty_report(client, session, world, granularity, measure):
    # Half-open: [from, to) with to = from holds no instant. The description allows it (`x-not-less-than`),
    # and schemathesis sends it as valid; refusing it was the server being stricter than its description.
    insert_plans(session, world, [PlanSpec("acme", at("2026-01-01T00:00:00+00:00"), cost=Decimal("10.00"))])
    same_instant = "2026-01-01T01:00:00+01:00"

    body = report_body(client, from_=JANUARY, to=same_instant, granularity=granularity, measure=measure)

    assert (body["rows"], body["totals"]) == ([], [])


def test_a_window_that_ends_before_it_begins_is_still_refused(client, world):
    body = assert_problem(report(client, from_=FEBRUARY, to=JANUARY), 422)

    assert body["errors"] == [{"parameter": "to", "detail": "Must not be before from."}]


def test_a_plan_counts_in_a_window_with_the_part_of_its_schedule_inside_it(client, session, world):
    # Ten hours from 22:00 on 31 December: two in December, eight in January.
    insert_plans(
        session,
        world,
        [PlanSpec("acme", at("2025-12-31T22:00:00+00:00"), cost=Decimal("100.00"), duration=10 * HOUR)],
    )

    january = report_body(client, from_=JANUARY, to=FEBRUARY)
    both = report_body(client, from_="2025-12-01T00:00:00Z", to=FEBRUARY, granularity="month")

    assert [(row["plans"], row["cost"], row["accelerator_hours"]) for row in january["rows"]] == [
        (1, "80.00", 32.0)
    ]
    assert [(row["period_start"], row["cost"]) for row in both["rows"]] == [
        ("2025-12-01", "20.00"),
        ("2026-01-01", "80.00"),
    ]
    assert both["totals"][0]["plans"] == 1  # once, though in two months
    assert both["totals"][0]["cost"] == "100.00"


def test_a_plan_split_across_periods_keeps_every_cent(client, session, world):
    # 100.00 over three equal days: 33.34, 33.33, 33.33 (the largest remainder, the first of a tie).
    insert_plans(
        session,
        world,
        [PlanSpec("acme", at("2026-01-01T00:00:00+00:00"), cost=Decimal("100.00"), duration=72 * HOUR)],
    )

    body = report_body(client, from_=JANUARY, to=FEBRUARY, granularity="day")

    assert [row["cost"] for row in body["rows"]] == ["33.34", "33.33", "33.33"]
    assert body["totals"][0]["cost"] == "100.00"


def test_a_window_given_with_an_offset_is_the_same_instant_in_utc(client, session, world):
    insert_plans(
        session,
        world,
        [
            PlanSpec("acme", at("2025-12-31T22:30:00+00:00"), cost=Decimal("1.00"), duration=HOUR),
            PlanSpec("acme", at("2026-01-01T00:00:00+00:00"), cost=Decimal("10.00"), duration=HOUR),
        ],
    )

    with_offset = report_body(client, from_="2026-01-01T01:00:00+01:00", to="2026-01-31T23:00:00-01:00")
    in_utc = report_body(client, from_=JANUARY, to=FEBRUARY)

    assert with_offset["from"] == in_utc["from"] == "2026-01-01T00:00:00+00:00"
    assert with_offset["to"] == in_utc["to"] == "2026-02-01T00:00:00+00:00"
    assert with_offset["rows"] == in_utc["rows"]
    assert [row["cost"] for row in in_utc["rows"]] == ["10.00"]


def test_a_plan_counts_in_the_utc_month_of_its_schedule(client, session, world):
    # 23:30 on 31 January at UTC-1 is 00:30 on 1 February in UTC.
    insert_plans(
        session,
        world,
        [PlanSpec("acme", at("2026-01-31T23:30:00-01:00"), cost=Decimal("5.00"), duration=HOUR)],
    )

    body = report_body(client, from_=JANUARY, to="2026-03-01T00:00:00Z", granularity="month")

    assert [(row["period_start"], row["period_end"], row["cost"]) for row in body["rows"]] == [
        ("2026-02-01", "2026-03-01", "5.00")
    ]


@pytest.mark.parametrize(
    ("granularity", "start_at", "bounds"),
    [
        ("day", "2026-03-01T23:59:59.999999+00:00", ("2026-03-01", "2026-03-02")),
        ("day", "2026-03-02T00:30:00+01:00", ("2026-03-01", "2026-03-02")),
        ("week", "2026-03-01T12:00:00+00:00", ("2026-02-23", "2026-03-02")),  # a Sunday
        ("week", "2026-03-02T00:00:00+00:00", ("2026-03-02", "2026-03-09")),  # a Monday
        ("week", "2027-01-01T00:00:00+00:00", ("2026-12-28", "2027-01-04")),  # ISO week 53 of 2026
        ("month", "2026-12-31T23:59:59+00:00", ("2026-12-01", "2027-01-01")),
        ("week", "1970-01-01T00:00:00+00:00", ("1969-12-29", "1970-01-05")),  # the earliest a plan starts
        ("day", "9998-12-31T23:00:00+00:00", ("9998-12-31", "9999-01-01")),  # and the latest
        ("week", "9998-12-31T23:00:00+00:00", ("9998-12-28", "9999-01-04")),
        ("month", "9998-12-31T23:00:00+00:00", ("9998-12-01", "9999-01-01")),
    ],
)
def test_periods_are_utc_days_iso_weeks_from_monday_and_calendar_months(
    client, session, world, granularity, start_at, bounds
):
    insert_plans(session, world, [PlanSpec("acme", at(start_at), duration=MICROSECOND)])

    body = report_body(
        client, from_="1970-01-01T00:00:00Z", to="9998-12-31T23:59:59.999999Z", granularity=granularity
    )

    assert [(row["period_start"], row["period_end"]) for row in body["rows"]] == [bounds]
    assert period(at(start_at), granularity) == bounds  # as the recomputation has it


# --- Empty reports ----------------------------------------------------------------------------------------


def test_a_report_with_no_plans_has_no_rows_and_no_totals(client, world):
    body = report_body(client, from_=JANUARY, to=FEBRUARY, granularity="month", group_by="budget,label:team")

    assert (body["rows"], body["totals"]) == ([], [])
    assert body["group_by"] == ["budget", "label:team"]


@pytest.mark.parametrize(
    ("params", "header"),
    [
        ({}, "currency,"),
        ({"group_by": "budget,label:team"}, "budget,budget_name,label:team,currency,"),
    ],
)
def test_an_empty_csv_report_is_its_header_alone(client, world, params, header):
    response = report(client, from_=JANUARY, to=FEBRUARY, format="csv", **params)

    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert response.get_data().decode("utf-8") == header + ",".join(FINANCE_COLUMNS) + "\r\n"


def test_an_empty_csv_report_by_period_has_a_row_of_zeros_for_every_period(client, world):
    response = report(client, from_=JANUARY, to="2026-04-01T00:00:00Z", granularity="month", format="csv")

    header, *lines = csv_rows(response)
    assert header == ["period_start", "period_end", "currency", *FINANCE_COLUMNS]
    assert [line[:3] for line in lines] == [
        ["2026-01-01", "2026-02-01", ""],
        ["2026-02-01", "2026-03-01", ""],
        ["2026-03-01", "2026-04-01", ""],
    ]
    assert {tuple(line[3:6]) for line in lines} == {("0", "0.00", "")}  # no currency: no money


# --- CSV --------------------------------------------------------------------------------------------------


@pytest.fixture
def labelled(session, world) -> None:
    """January plans whose team labels are accented, CJK, absent, or would be formulae in a spreadsheet."""
    insert_plans(
        session,
        world,
        [
            PlanSpec(
                "acme",
                at(f"2026-01-{day:02d}T09:00:00+00:00"),
                budget="acme-USD",
                hardware="h100-sxm",
                labels={} if value is None else {"team": value},
                cost=Decimal("1234.56") + day,
                accelerator_hours=12.5 * day,
                flops=1.234e21 * day,
            )
            for day, value in enumerate(
                [None, "équipe", "团队", '=HYPERLINK("http://x")', "+1", "-1", "@SUM(A1)", "\tx", "plain"],
                start=1,
            )
        ],
    )


def test_a_csv_report_has_the_json_rows_in_the_same_columns(client, labelled):
    params = {
        "from_": JANUARY,
        "to": FEBRUARY,
        "granularity": "day",
        "group_by": "label:team,budget,hardware",
    }
    body = report_body(client, **params)

    response = report(client, format="csv", **params)

    assert len(body["rows"]) == 9
    assert_csv_matches_json(response, body["rows"], ("label:team", "budget", "hardware"))
    header, first, *_ = csv_rows(response)
    assert header[:7] == [
        "period_start",
        "period_end",
        "label:team",
        "budget",
        "budget_name",
        "hardware",
        "currency",
    ]
    assert first[:2] == ["2026-01-01", "2026-01-02"]
    assert first[4:10] == ["acme USD", "h100-sxm", "USD", "1", "12.50", "1235.56"]


def test_csv_keeps_unicode_labels_and_defuses_formulae_which_json_keeps_as_they_are(client, labelled):
    params = {"from_": JANUARY, "to": FEBRUARY, "group_by": "label:team"}

    in_json = {row["label:team"] for row in report_body(client, **params)["rows"]}
    response = report(client, format="csv", **params)
    header, *lines = csv_rows(response)
    in_csv = {line[header.index("label:team")] for line in lines}

    assert in_json == {
        None,
        "équipe",
        "团队",
        '=HYPERLINK("http://x")',
        "+1",
        "-1",
        "@SUM(A1)",
        "\tx",
        "plain",
    }
    assert in_csv == {
        "",
        "équipe",
        "团队",
        '\'=HYPERLINK("http://x")',
        "'+1",
        "'-1",
        "'@SUM(A1)",
        "'\tx",
        "plain",
    }
    assert "团队".encode() in response.get_data()


def test_a_csv_report_is_an_attachment_named_after_its_window(client, world):
    response = report(client, from_="2026-01-01T01:00:00+01:00", to=FEBRUARY, format="csv")

    disposition = response.headers["Content-Disposition"]
    assert disposition.startswith("attachment; ")
    assert re.fullmatch(r'attachment; filename="[^"/\\]+\.csv"', disposition)
    assert "20260101T000000Z" in disposition


def test_accept_text_csv_asks_for_csv_and_format_wins_over_accept(client, labelled):
    params = {"from_": JANUARY, "to": FEBRUARY, "group_by": "label:team"}
    as_format = report(client, format="csv", **params)

    by_accept = report(client, headers={"Accept": "text/csv"}, **params)
    json_despite_accept = report(client, headers={"Accept": "text/csv"}, format="json", **params)
    csv_despite_accept = report(client, headers={"Accept": "application/json"}, format="csv", **params)

    assert by_accept.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert by_accept.get_data() == as_format.get_data()
    assert csv_despite_accept.get_data() == as_format.get_data()
    assert json_despite_accept.headers["Content-Type"] == "application/json"
    assert json_despite_accept.get_json()["rows"] == report_body(client, **params)["rows"]


def test_csv_money_has_two_decimals_and_json_keeps_every_digit(client, session, world):
    insert_plans(
        session, world, [PlanSpec("acme", at("2026-01-10T00:00:00+00:00"), cost=Decimal("0.123456"))]
    )
    params = {"from_": JANUARY, "to": FEBRUARY}

    in_json = report_body(client, **params)
    header, line = csv_rows(report(client, format="csv", **params))

    assert in_json["rows"][0]["cost"] == in_json["totals"][0]["cost"] == "0.123456"
    assert dict(zip(header, line, strict=True))["planned_cost"] == "0.12"


# --- Currencies -------------------------------------------------------------------------------------------


def test_usd_and_eur_plans_of_one_group_are_two_rows_and_two_totals(client, world):
    for hardware in ("h100-sxm", "eu-gpu"):
        response = client.post(
            "/v1/plans",
            json={
                "organization": "acme",
                "params": 1e9,
                "tokens": 2e10,
                "hardware": hardware,
                "accelerators": 8,
                "start_at": "2026-01-15T00:00:00Z",
            },
        )
        assert response.status_code == 201, response.get_json()
    plans = client.get("/v1/plans?organization=acme").get_json()["items"]
    cost = {plan["currency"]: plan["cost"] for plan in plans}

    body = report_body(client, from_=JANUARY, to=FEBRUARY, status="draft", group_by="budget,organization")

    assert sorted(
        (row["budget"], row["organization"], row["currency"], row["cost"]) for row in body["rows"]
    ) == [
        (None, "acme", "EUR", cost["EUR"]),
        (None, "acme", "USD", cost["USD"]),
    ]
    assert [(total["currency"], total["plans"], total["cost"]) for total in body["totals"]] == [
        ("EUR", 1, cost["EUR"]),
        ("USD", 1, cost["USD"]),
    ]


def test_amounts_stored_against_one_budget_in_two_currencies_are_still_not_added(client, session, world):
    insert_plans(
        session,
        world,
        [
            PlanSpec("acme", at("2026-01-10T00:00:00+00:00"), budget="acme-USD", cost=Decimal("0.10")),
            PlanSpec("acme", at("2026-01-11T00:00:00+00:00"), budget="acme-USD", cost=Decimal("0.20")),
            PlanSpec(
                "acme", at("2026-01-12T00:00:00+00:00"), budget="acme-USD", cost=Decimal("7"), currency="EUR"
            ),
            PlanSpec("acme", at("2026-01-13T00:00:00+00:00"), budget="acme-USD", cost=None, currency=None),
        ],
    )

    body = report_body(client, from_=JANUARY, to=FEBRUARY, group_by="budget")

    assert sorted(((row["currency"] or ""), row["plans"], row["cost"]) for row in body["rows"]) == [
        ("", 1, None),
        ("EUR", 1, "7.00"),
        ("USD", 2, "0.30"),  # exact: 0.1 + 0.2 as floats would not be 0.3
    ]
    assert {total["currency"]: total["cost"] for total in body["totals"]} == {
        None: None,
        "EUR": "7.00",
        "USD": "0.30",
    }


def test_sums_beyond_the_largest_single_amount_stay_exact(client, session, world):
    largest = Decimal("999999999999.99")  # Money is NUMERIC(18, 6)
    insert_plans(session, world, [PlanSpec("acme", at("2026-01-05T00:00:00+00:00"), cost=largest)] * 10)

    body = report_body(client, from_=JANUARY, to=FEBRUARY)

    assert [row["cost"] for row in body["rows"]] == [str(largest * 10)] == ["9999999999999.90"]


# --- Bad input --------------------------------------------------------------------------------------------

WINDOW = {"from": JANUARY, "to": FEBRUARY}


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"to": FEBRUARY}, "from"),
        ({"from": JANUARY}, "to"),
        ({"from": "2026-01-01T00:00:00", "to": FEBRUARY}, "from"),
        ({"from": JANUARY, "to": "2026-02-01"}, "to"),
        ({"from": "yesterday", "to": FEBRUARY}, "from"),
        ({"from": FEBRUARY, "to": JANUARY}, "to"),
        ({**WINDOW, "granularity": "year"}, "granularity"),
        ({**WINDOW, "group_by": "team"}, "group_by"),
        ({**WINDOW, "group_by": "label:Team"}, "group_by"),
        ({**WINDOW, "group_by": "label:"}, "group_by"),
        ({**WINDOW, "group_by": "label:a b"}, "group_by"),
        ({**WINDOW, "group_by": ""}, "group_by"),
        ({**WINDOW, "group_by": "budget,budget"}, "group_by"),
        ({**WINDOW, "group_by": "budget,hardware,status,organization"}, "group_by"),
        ({**WINDOW, "status": "approved"}, "status"),
        ({**WINDOW, "format": "xlsx"}, "format"),
        ({**WINDOW, "budget_id": "not-a-uuid"}, "budget_id"),
        ({**WINDOW, "colour": "blue"}, "colour"),
    ],
)
def test_bad_report_parameters_are_422_naming_the_parameter(client, params, parameter):
    response = client.get(f"/v1/reports/costs?{urlencode(params)}")

    body = assert_problem(response, 422)
    assert {error["parameter"] for error in body["errors"]} == {parameter}, body["errors"]


def test_a_bad_csv_request_is_still_a_problem_document(client):
    response = client.get("/v1/reports/costs?from=2026-01-01&format=csv", headers={"Accept": "text/csv"})

    body = assert_problem(response, 422)
    assert {error["parameter"] for error in body["errors"]} == {"from", "to"}


# --- Utilisation ------------------------------------------------------------------------------------------


def month_start(moment: datetime, months: int = 0) -> datetime:
    index = moment.year * 12 + moment.month - 1 + months
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def make_budget(client, organization: str, start: datetime, end: datetime, amount: str = "1000.00") -> str:
    response = client.post(
        "/v1/budgets",
        json={
            "organization": organization,
            "name": "utilisation",
            "amount": amount,
            "currency": "USD",
            "period_start": start.isoformat(),
            "period_end": end.isoformat(),
        },
    )
    assert response.status_code == 201, response.get_json()
    return response.get_json()["id"]


def make_plan(client, budget_id: str, start_at: datetime, tokens: float, *, commit: bool = True) -> dict:
    """On lab-gpu, 6·1e9·tokens FLOPs at half of 10 x 1e15 FLOP/s and 2.50 USD an hour: tokens 6e10 cost
    500.00 USD over 20 hours."""
    response = client.post(
        "/v1/plans",
        json={
            "organization": "acme",
            "budget_id": budget_id,
            "params": 1e9,
            "tokens": tokens,
            "hardware": "lab-gpu",
            "accelerators": 10,
            "mfu": 0.5,
            "start_at": start_at.isoformat(),
        },
    )
    assert response.status_code == 201, response.get_json()
    plan = response.get_json()
    if commit:
        committed = client.post(f"/v1/plans/{plan['id']}/commit")
        assert committed.status_code == 200, committed.get_json()
    return plan


def months_between(start: datetime, end: datetime) -> list[str]:
    months, moment = [], start
    while moment < end:
        months.append(f"{moment:%Y-%m}")
        moment = month_start(moment, 1)
    return months


def test_utilization_lists_every_month_of_the_period_with_the_running_total(client, world):
    """A budget that began three months ago: its burn rate and run-out date follow from `as_of`."""
    start = month_start(datetime.now(UTC), -3)
    end = month_start(start, 12)
    budget_id = make_budget(client, "acme", start, end)
    first = make_plan(client, budget_id, start + timedelta(days=1, hours=10), 6e10)
    make_plan(client, budget_id, month_start(start, 1) + timedelta(days=3), 6e10, commit=False)  # a draft
    third = make_plan(client, budget_id, month_start(start, 2) + timedelta(days=5), 3e10)
    assert (first["cost"], third["cost"]) == ("500.00", "250.00")

    response = client.get(f"/v1/budgets/{budget_id}/utilization")

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert (body["amount"], body["committed"], body["remaining"], body["currency"]) == (
        "1000.00",
        "750.00",
        "250.00",
        "USD",
    )
    expected_months = months_between(start, end)
    assert len(expected_months) == 12
    assert [month["month"] for month in body["months"]] == expected_months
    assert [(month["plans"], month["committed"], month["cumulative"]) for month in body["months"][:4]] == [
        (1, "500.00", "500.00"),
        (0, "0.00", "500.00"),
        (1, "250.00", "750.00"),
        (0, "0.00", "750.00"),
    ]
    assert all(month["cumulative"] == "750.00" for month in body["months"][2:])
    as_of = datetime.fromisoformat(body["as_of"])
    elapsed_days = (min(as_of, end) - start).total_seconds() / 86_400
    rate = Decimal(750) / Decimal(elapsed_days)
    assert body["burn_rate_per_day"] == f"{rate.quantize(Decimal('0.01'), ROUND_HALF_UP):.2f}"
    # The run-out date comes from the unrounded rate: a rate under half a cent a day still runs out.
    runs_out = datetime.fromisoformat(body["runs_out_at"])
    assert abs(runs_out - (start + timedelta(days=float(Decimal(1000) / rate)))) < timedelta(seconds=1)
    # 1000 at 750 per `elapsed` runs out at 4/3 of the days elapsed, well before the twelfth month ends.
    assert body["runs_out_before_period_end"] is (runs_out < end)
    assert body["runs_out_before_period_end"] is True


def test_a_period_that_has_ended_burns_at_committed_over_its_whole_length(client, world):
    start, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 3, 1, tzinfo=UTC)  # 59 days
    budget_id = make_budget(client, "acme", start, end, amount="100000.00")
    make_plan(client, budget_id, datetime(2025, 2, 10, tzinfo=UTC), 6e10)

    body = client.get(f"/v1/budgets/{budget_id}/utilization").get_json()

    assert [(month["month"], month["committed"]) for month in body["months"]] == [
        ("2025-01", "0.00"),
        ("2025-02", "500.00"),
    ]
    assert body["burn_rate_per_day"] == "8.47"  # 500 / 59
    # It commits nothing more: no run-out date, however fast it burned.
    assert (body["runs_out_at"], body["runs_out_before_period_end"]) == (None, False)


def test_a_budget_with_nothing_committed_never_runs_out(client, world):
    start = month_start(datetime.now(UTC), -1)
    budget_id = make_budget(client, "acme", start, month_start(start, 3))

    body = client.get(f"/v1/budgets/{budget_id}/utilization").get_json()

    assert body["burn_rate_per_day"] == "0.00"
    assert (body["runs_out_at"], body["runs_out_before_period_end"]) == (None, False)
    assert [(month["plans"], month["committed"], month["cumulative"]) for month in body["months"]] == [
        (0, "0.00", "0.00")
    ] * 3


def test_a_budget_whose_period_has_not_started_has_no_burn_rate(client, world):
    start = month_start(datetime.now(UTC), 2)
    end = month_start(start, 3)
    budget_id = make_budget(client, "acme", start, end)
    make_plan(client, budget_id, start + timedelta(days=2), 6e10)

    body = client.get(f"/v1/budgets/{budget_id}/utilization").get_json()

    assert body["committed"] == "500.00"
    assert (body["burn_rate_per_day"], body["runs_out_at"], body["runs_out_before_period_end"]) == (
        None,
        None,
        False,
    )
    assert [(month["month"], month["plans"], month["cumulative"]) for month in body["months"]] == [
        (f"{start:%Y-%m}", 1, "500.00"),
        (f"{month_start(start, 1):%Y-%m}", 0, "500.00"),
        (f"{month_start(start, 2):%Y-%m}", 0, "500.00"),
    ]


def test_a_run_out_date_beyond_the_year_9998_is_never(client, world):
    start, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 3, 1, tzinfo=UTC)
    budget_id = make_budget(client, "acme", start, end, amount="999999999999.00")
    make_plan(client, budget_id, datetime(2025, 2, 10, tzinfo=UTC), 6e10)

    body = client.get(f"/v1/budgets/{budget_id}/utilization").get_json()

    # 999 999 999 999 at 8.47 a day would take some 118 billion days.
    assert body["burn_rate_per_day"] == "8.47"
    assert (body["runs_out_at"], body["runs_out_before_period_end"]) == (None, False)


def test_a_period_of_more_than_1200_months_lists_only_the_months_with_plans(client, world):
    start, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC)
    budget_id = make_budget(client, "acme", start, end)
    make_plan(client, budget_id, datetime(2025, 2, 10, tzinfo=UTC), 6e10)

    body = client.get(f"/v1/budgets/{budget_id}/utilization").get_json()

    assert body["months"] == [{"month": "2025-02", "plans": 1, "committed": "500.00", "cumulative": "500.00"}]


def test_the_months_of_utilization_always_add_up_to_what_is_committed(client, world):
    start, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 6, 1, tzinfo=UTC)
    budget_id = make_budget(client, "acme", start, end)
    make_plan(client, budget_id, datetime(2025, 2, 10, tzinfo=UTC), 6e10)

    narrowed = client.patch(
        f"/v1/budgets/{budget_id}", json={"period_start": "2025-03-01T00:00:00Z"}, headers={"If-Match": "*"}
    )
    body = client.get(f"/v1/budgets/{budget_id}/utilization").get_json()

    # Either fix keeps the books whole: refuse the change (as for an amount below committed), or list the
    # months of the plans outside the period too.
    if narrowed.status_code == 200:
        assert body["months"][-1]["cumulative"] == body["committed"] == "500.00"
    else:
        assert_problem(narrowed, 409)


def test_a_period_ending_mid_month_lists_that_month_and_not_the_next(client, world):
    start, end = datetime(2025, 1, 15, tzinfo=UTC), datetime(2025, 3, 1, 0, 0, 1, tzinfo=UTC)
    budget_id = make_budget(client, "acme", start, end)

    body = client.get(f"/v1/budgets/{budget_id}/utilization").get_json()

    assert [month["month"] for month in body["months"]] == ["2025-01", "2025-02", "2025-03"]


def test_another_organisations_budget_utilization_is_404_to_an_organisation_key(client, world, issue_key):
    globex_budget = str(world.budgets["globex-USD"])

    for role in ("viewer", "planner", "finance"):
        response = client.get(
            f"/v1/budgets/{globex_budget}/utilization", headers=bearer(issue_key(role, "acme"))
        )
        assert_problem(response, 404)
    assert client.get(f"/v1/budgets/{globex_budget}/utilization").status_code == 200  # admin
    assert_problem(client.get(f"/v1/budgets/{uuid.uuid4()}/utilization"), 404)


# --- Roles and organisations ------------------------------------------------------------------------------


@pytest.fixture
def both(session, world) -> None:
    insert_plans(
        session,
        world,
        [
            PlanSpec("acme", at("2026-01-05T00:00:00+00:00"), budget="acme-USD", cost=Decimal("10.00")),
            PlanSpec("acme", at("2026-01-06T00:00:00+00:00"), budget="acme-USD", cost=Decimal("20.00")),
            PlanSpec("globex", at("2026-01-07T00:00:00+00:00"), budget="globex-USD", cost=Decimal("400.00")),
        ],
    )


@pytest.mark.parametrize("role", ["viewer", "planner", "finance"])
def test_an_organisation_key_reports_its_own_plans_only(client, both, world, issue_key, role):
    key = issue_key(role, "acme")

    own = report_body(client, key, from_=JANUARY, to=FEBRUARY, group_by="organization")
    named_own = report_body(client, key, from_=JANUARY, to=FEBRUARY, organization="acme")
    other = report_body(client, key, from_=JANUARY, to=FEBRUARY, organization="globex")
    other_budget = report_body(
        client, key, from_=JANUARY, to=FEBRUARY, budget_id=str(world.budgets["globex-USD"])
    )

    assert [(row["organization"], row["plans"], row["cost"]) for row in own["rows"]] == [("acme", 2, "30.00")]
    assert [total["cost"] for total in own["totals"]] == ["30.00"]
    assert [row["cost"] for row in named_own["rows"]] == ["30.00"]
    assert (other["rows"], other["totals"]) == ([], [])
    assert (other_budget["rows"], other_budget["totals"]) == ([], [])
    header, *lines = csv_rows(
        report(client, key, from_=JANUARY, to=FEBRUARY, group_by="organization", format="csv")
    )
    assert [dict(zip(header, line, strict=True))["organization"] for line in lines] == ["acme"]
    assert [dict(zip(header, line, strict=True))["organization_name"] for line in lines] == ["Acme"]


def test_an_admin_reports_across_organisations(client, both):
    every = report_body(client, from_=JANUARY, to=FEBRUARY, group_by="organization")
    globex = report_body(client, from_=JANUARY, to=FEBRUARY, group_by="organization", organization="globex")
    unknown = report_body(client, from_=JANUARY, to=FEBRUARY, organization="initech")

    assert sorted((row["organization"], row["plans"], row["cost"]) for row in every["rows"]) == [
        ("acme", 2, "30.00"),
        ("globex", 1, "400.00"),
    ]
    assert [(total["plans"], total["cost"]) for total in every["totals"]] == [(3, "430.00")]
    assert [row["organization"] for row in globex["rows"]] == ["globex"]
    assert unknown["rows"] == []


def test_a_report_needs_a_key(app):
    response = app.test_client().get(f"/v1/reports/costs?{urlencode(WINDOW)}")

    assert_problem(response, 401)


def test_reports_sum_only_the_status_asked_for(client, session, world):
    insert_plans(
        session,
        world,
        [
            PlanSpec("acme", at("2026-01-05T00:00:00+00:00"), status=status, cost=Decimal(cost))
            for status, cost in (("draft", "1.00"), ("committed", "2.00"), ("cancelled", "4.00"))
        ],
    )

    default = report_body(client, from_=JANUARY, to=FEBRUARY)
    by_status = {
        status: report_body(client, from_=JANUARY, to=FEBRUARY, status=status)["rows"][0]["cost"]
        for status in STATUSES
    }

    assert [row["cost"] for row in default["rows"]] == ["2.00"]
    assert by_status == {"draft": "1.00", "committed": "2.00", "cancelled": "4.00"}

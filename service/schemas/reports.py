"""Cost reports and budget utilisation."""

from __future__ import annotations

import re
from decimal import Decimal

import marshmallow as ma
from marshmallow import validate
from webargs.fields import DelimitedList

from service.data.models import PLAN_STATUSES
from service.schemas.common import NOT_LESS_THAN, StrictSchema
from service.schemas.fields import LABEL_KEY_PATTERN, SLUG_PATTERN, MoneyField, UtcDateTime, signed_money
from service.services.documents import format_money
from service.services.focus import FOCUS_GRANULARITIES, FOCUS_VERSION, FOCUS_VERSIONS
from service.services.reports import COMMITTED_MONEY

CSV_PARTS = ("rows", "totals")

REPORT_GRANULARITIES = ("day", "week", "month", "none")
REPORT_MEASURES = ("planned", "actual", "both")
REPORT_FORMATS = ("json", "csv", "focus")
REPORT_GROUPS = ("organization", "budget", "hardware", "status")
MAX_REPORT_GROUPS = 3
_GROUP = "(organization|budget|hardware|status|label:" + LABEL_KEY_PATTERN.strip("^$") + ")"


class GroupByField(DelimitedList):
    """One to three of organization, budget, hardware, status and label:<key>, each once: comma-separated in
    a query (an array, style form, in the description)."""

    def __init__(self, **kwargs):
        limits = {"minItems": 1, "maxItems": MAX_REPORT_GROUPS, "uniqueItems": True}
        group = ma.fields.String(metadata={"pattern": f"^{_GROUP}$"})
        super().__init__(group, metadata={**limits, **kwargs.pop("metadata", {})}, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str):
            raise self.make_error("invalid")
        names = tuple(part.strip() for part in value.split(","))
        for name in names:
            label = name.startswith("label:") and re.fullmatch(LABEL_KEY_PATTERN, name.removeprefix("label:"))
            if name not in REPORT_GROUPS and not label:
                raise ma.ValidationError(
                    f"Unknown group {name!r}: use organization, budget, hardware, status or label:<key>."
                )
        if len(set(names)) != len(names):
            raise ma.ValidationError("Each group once.")
        if len(names) > MAX_REPORT_GROUPS:
            raise ma.ValidationError(f"At most {MAX_REPORT_GROUPS} groups.")
        return names


STATUSES_DESCRIPTION = (
    "Plans in these statuses, comma-separated. Default committed,running,completed,failed: every plan whose "
    "money is committed (reserved on its budget, or spent), the one default of every report, the budget "
    "pages, the console and the CLI."
)


class StatusesField(DelimitedList):
    """The `status` query parameter of reports: plan statuses, each once, comma-separated; loaded as
    `statuses`, by default those whose money is committed."""

    def __init__(self, **metadata):
        status = ma.fields.String(validate=validate.OneOf(PLAN_STATUSES))
        super().__init__(
            status,
            data_key="status",
            attribute="statuses",
            load_default=lambda: COMMITTED_MONEY,
            metadata={"minItems": 1, "uniqueItems": True, "description": STATUSES_DESCRIPTION, **metadata},
        )

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str):
            raise self.make_error("invalid")
        names = tuple(part.strip() for part in value.split(","))
        unknown = [name for name in names if name not in PLAN_STATUSES]
        if unknown:
            raise ma.ValidationError(f"Unknown status {unknown[0]!r}: use {', '.join(PLAN_STATUSES)}.")
        if len(set(names)) != len(names):
            raise ma.ValidationError("Each status once.")
        return names


def focus_version_field() -> ma.fields.String:
    """The FOCUS version whose columns an export has."""
    return ma.fields.String(
        load_default=FOCUS_VERSION,
        validate=validate.OneOf(FOCUS_VERSIONS),
        metadata={
            "description": "The FOCUS version whose columns the export has: 1.2 (the default) or 1.3 "
            "(ServiceProviderName for ProviderName, and HostProviderName)."
        },
    )


class CostReportQuerySchema(StrictSchema):
    from_ = UtcDateTime(
        data_key="from",
        required=True,
        metadata={
            "description": "The window's start (inclusive), ISO 8601 with an offset: the part of each plan's "
            "schedule after it, and UTC days of spend beginning at or after it."
        },
    )
    to = UtcDateTime(
        required=True,
        metadata={
            "description": "The window's end (exclusive): the part of each plan's schedule before it, and "
            "UTC days of spend beginning before it. Equal to `from`: an empty window.",
            NOT_LESS_THAN: "from",
        },
    )
    measure = ma.fields.String(
        load_default="planned",
        validate=validate.OneOf(REPORT_MEASURES),
        metadata={
            "description": "planned (the default): what the plans cost, spread over their schedules. "
            "actual: what runs spent per UTC day of use. both: planned, actual and their variance side by "
            "side, with names beside ids, every period of the window and, in CSV, a totals row."
        },
    )
    granularity = ma.fields.String(
        validate=validate.OneOf(REPORT_GRANULARITIES),
        metadata={
            "description": "Rows per UTC day, ISO week (from Monday) or month; none (the default): one per "
            "group. With measure actual or both, and in every CSV, every period of the window is a row (for "
            "each group seen in it): a report of more than 100 000 rows is refused."
        },
    )
    group_by = GroupByField(
        load_default=tuple,  # a callable: the description shows no default (none is no query value)
        metadata={
            "description": "Up to 3 of organization, budget, hardware, status, label:<key>; comma-separated. "
            "Plans without the label, or with an empty value, group under null.",
            "example": ["budget", "label:team"],
        },
    )
    organization = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))
    budget_id = ma.fields.UUID()
    hardware = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))
    status = StatusesField(example=["committed", "running"])
    format = ma.fields.String(
        validate=validate.OneOf(REPORT_FORMATS),
        metadata={
            "description": "csv for text/csv (as with Accept: text/csv); json by default. focus: what runs "
            "spent as FOCUS usage charges, CSV, as GET /v1/reports/focus gives them: with no group_by, "
            "measure actual if given, and a granularity of day (the default) or month."
        },
    )
    focus_version = focus_version_field()
    part = ma.fields.String(
        load_default="rows",
        validate=validate.OneOf(CSV_PARTS),
        metadata={
            "description": "Of a CSV: rows (the default), the report's rows alone, so that no sum of a "
            "column counts twice; or totals, one row per currency, as a file of its own. The JSON has both."
        },
    )


class FocusQuerySchema(StrictSchema):
    from_ = UtcDateTime(
        data_key="from",
        required=True,
        metadata={
            "description": "UTC days of spend beginning at or after (inclusive), ISO 8601 with an offset."
        },
    )
    to = UtcDateTime(
        required=True,
        metadata={"description": "UTC days of spend beginning before (exclusive).", NOT_LESS_THAN: "from"},
    )
    granularity = ma.fields.String(
        load_default="day",
        validate=validate.OneOf(FOCUS_GRANULARITIES),
        metadata={"description": "The charge period: a UTC day or a calendar month."},
    )
    organization = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))
    budget_id = ma.fields.UUID()
    hardware = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))
    status = StatusesField()
    focus_version = focus_version_field()


class CostRowSchema(ma.Schema):
    """One group in one period. Group columns (organization, budget, hardware, status, label:<key>) appear
    when grouped by, period_start and period_end with a granularity."""

    class Meta:
        ordered = True
        unknown = ma.INCLUDE  # a label group is a member of its own, label:<key>

    period_start = ma.fields.String(metadata={"description": "First day of the period (UTC), ISO date."})
    period_end = ma.fields.String(metadata={"description": "Day after its last (exclusive)."})
    organization = ma.fields.String(allow_none=True)
    organization_name = ma.fields.String(
        allow_none=True, metadata={"description": "Beside organization, with measure actual or both."}
    )
    budget = ma.fields.String(allow_none=True, metadata={"description": "Budget id; null for plans without."})
    budget_name = ma.fields.String(
        allow_none=True, metadata={"description": "Beside budget, with measure actual or both."}
    )
    hardware = ma.fields.String(allow_none=True, metadata={"description": "Slug; null for inline hardware."})
    status = ma.fields.String(
        allow_none=True,
        metadata={"description": "Null only in the rows of zeros of a window with nothing in it."},
    )
    currency = ma.fields.String(
        allow_none=True,
        metadata={
            "description": "Null for plans with no price, and in the rows of zeros of an empty window."
        },
    )
    plans = ma.fields.Integer(metadata={"description": "Measure planned."})
    accelerator_hours = ma.fields.Float(metadata={"description": "Measure planned."})
    flops = ma.fields.Float(metadata={"description": "Measure planned."})
    cost = MoneyField(dump_only=True, allow_none=True, metadata={"description": "Measure planned."})
    estimated = ma.fields.Constant(
        True, metadata={"description": "Measure planned; always true: plans, not invoices."}
    )
    energy_kwh = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "Measure planned: the facility energy of the plans' runs (each plan's estimate's "
            "energy, spread like its hours); null when no plan in the row has one (plans_without_energy)."
        },
    )
    emissions_kg_co2e = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "Measure planned: their location-based emissions; null when no plan in the row "
            "has them. Plans made without a site (or on hardware without a TDP) have none: "
            "plans_without_emissions."
        },
    )
    plans_without_energy = ma.fields.Integer(
        metadata={
            "description": "Measure planned: plans counted that add no energy (hardware without a TDP)."
        }
    )
    plans_without_emissions = ma.fields.Integer(
        metadata={"description": "Measure planned: plans counted that add no emissions (no site, or no TDP)."}
    )
    planned_plans = ma.fields.Integer(
        metadata={"description": "Measure both: plans starting in the period (of the status asked for)."}
    )
    planned_accelerator_hours = ma.fields.Float()
    planned_cost = MoneyField(
        dump_only=True, allow_none=True, metadata={"description": "Null for plans with no price."}
    )
    planned_energy_kwh = ma.fields.Float(allow_none=True, metadata={"description": "As energy_kwh."})
    planned_emissions_kg_co2e = ma.fields.Float(
        allow_none=True, metadata={"description": "As emissions_kg_co2e."}
    )
    planned_plans_without_energy = ma.fields.Integer(allow_none=True)
    planned_plans_without_emissions = ma.fields.Integer(allow_none=True)
    actual_plans = ma.fields.Integer(
        metadata={
            "description": "Measures actual and both: plans whose runs used accelerators in the period."
        }
    )
    actual_accelerator_hours = ma.fields.Float()
    actual_cost = MoneyField(dump_only=True)
    off_schedule_accelerator_hours = ma.fields.Float(
        metadata={
            "description": "Of actual_accelerator_hours, what usage records beginning before their plan's "
            "start_at or ending after its end_at reported (accepted, and flagged)."
        }
    )
    off_schedule_cost = MoneyField(
        dump_only=True, metadata={"description": "Of actual_cost, what those records spent."}
    )
    variance_cost = signed_money(
        "Measure both: actual_cost - planned_cost (negative: under plan).", example="-8.15", allow_none=True
    )
    variance_percent = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "variance_cost / planned_cost x 100, to 2 decimals; null when nothing is planned."
        },
    )


class CostTotalsSchema(ma.Schema):
    """The metrics of the report's rows (see CostRow), summed per currency."""

    class Meta:
        ordered = True

    currency = ma.fields.String(allow_none=True)
    plans = ma.fields.Integer()
    accelerator_hours = ma.fields.Float()
    flops = ma.fields.Float()
    cost = MoneyField(dump_only=True, allow_none=True)
    estimated = ma.fields.Constant(True)
    energy_kwh = ma.fields.Float(allow_none=True)
    emissions_kg_co2e = ma.fields.Float(allow_none=True)
    plans_without_energy = ma.fields.Integer()
    plans_without_emissions = ma.fields.Integer()
    planned_plans = ma.fields.Integer()
    planned_accelerator_hours = ma.fields.Float()
    planned_cost = MoneyField(dump_only=True, allow_none=True)
    planned_energy_kwh = ma.fields.Float(allow_none=True)
    planned_emissions_kg_co2e = ma.fields.Float(allow_none=True)
    planned_plans_without_energy = ma.fields.Integer(allow_none=True)
    planned_plans_without_emissions = ma.fields.Integer(allow_none=True)
    actual_plans = ma.fields.Integer()
    actual_accelerator_hours = ma.fields.Float()
    actual_cost = MoneyField(dump_only=True)
    off_schedule_accelerator_hours = ma.fields.Float()
    off_schedule_cost = MoneyField(dump_only=True)
    variance_cost = signed_money("actual_cost - planned_cost.", example="-8.15", allow_none=True)
    variance_percent = ma.fields.Float(allow_none=True)


def _report_value(name: str, value):
    if name == "estimated":
        return True
    return format_money(value) if isinstance(value, Decimal) else value


class CostReportSchema(ma.Schema):
    start = ma.fields.AwareDateTime(attribute="query.start", data_key="from")
    to = ma.fields.AwareDateTime(attribute="query.end")
    granularity = ma.fields.String(attribute="query.granularity")
    group_by = ma.fields.List(ma.fields.String(), attribute="query.group_by")
    measure = ma.fields.String(attribute="query.measure")
    statuses = ma.fields.List(
        ma.fields.String(),
        attribute="query.statuses",
        metadata={"description": "The statuses of the plans counted."},
    )
    rows = ma.fields.Function(
        lambda report: [
            {name: _report_value(name, row.get(name)) for name in report.columns} for row in report.rows
        ],
        metadata={
            "type": "array",
            "items": {"$ref": "#/components/schemas/CostRow"},
            "description": "A label group is a member named label:<key> (null for plans without the label).",
        },
    )
    totals = ma.fields.Function(
        lambda report: [
            {name: _report_value(name, total.get(name)) for name in ["currency", *report.metrics]}
            for total in report.total_rows
        ],
        metadata={
            "type": "array",
            "items": {"$ref": "#/components/schemas/CostTotals"},
            "description": "Per currency.",
        },
    )


class MonthUseSchema(ma.Schema):
    month = ma.fields.String(metadata={"example": "2026-03"})
    plans = ma.fields.Integer(metadata={"description": "Plans whose schedule falls (partly) in the month."})
    committed = MoneyField(
        dump_only=True,
        metadata={
            "description": "The money the budget's ledger holds for its plans (their cost until their run "
            "finishes, then what it spent of it), each plan's spread over its schedule pro rata to time: the "
            "months add up to the budget's committed."
        },
    )
    cumulative = MoneyField(dump_only=True, metadata={"description": "Committed up to the end of the month."})


class UtilizationSchema(ma.Schema):
    """Every month of the period is listed (those without plans at zero) when the period spans at most
    1 200 months; beyond, only months with plans."""

    budget_id = ma.fields.UUID(attribute="budget.id")
    currency = ma.fields.String(attribute="budget.currency")
    amount = MoneyField(dump_only=True, attribute="budget.amount")
    committed = MoneyField(dump_only=True, attribute="budget.committed")
    remaining = MoneyField(dump_only=True, attribute="budget.remaining")
    utilization = ma.fields.Float(
        attribute="budget.utilization", metadata={"description": "committed / amount"}
    )
    period_start = ma.fields.AwareDateTime(attribute="budget.period_start")
    period_end = ma.fields.AwareDateTime(attribute="budget.period_end")
    as_of = ma.fields.AwareDateTime()
    months = ma.fields.List(ma.fields.Nested(MonthUseSchema))
    burn_rate_per_day = MoneyField(
        dump_only=True,
        allow_none=True,
        metadata={"description": "Committed per day of the period elapsed so far; null before it starts."},
    )
    runs_out_at = ma.fields.AwareDateTime(
        allow_none=True,
        metadata={"description": "When the amount is spent at the burn rate; null if it never is."},
    )
    runs_out_before_period_end = ma.fields.Function(
        lambda use: use.runs_out_at is not None and use.runs_out_at < use.budget.period_end,
        metadata={"type": "boolean"},
    )

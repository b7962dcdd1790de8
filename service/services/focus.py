"""The FOCUS export: what runs spent, as usage charges of the FinOps Open Cost and Usage Specification (FOCUS
1.2, or 1.3's column names with focus_version=1.3), for the FinOps tools that gather an organisation's cloud
and on-premises costs in one place, and the finance teams who read them there (GET /v1/reports/focus, and
format=focus on GET /v1/reports/costs).

A row is one plan's spend in one UTC day or calendar month of the window, read from its usage days summed per
plan (reports.usage_per_plan): actual spend only, since FOCUS describes billed charges and a plan is a
forecast. Amounts keep every digit, to the millionth, for the tools that sum them again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import SQLColumnExpression, select
from sqlalchemy.orm import Session

from service.data.models import Budget, HardwareProfile, Organization, Plan, UsageDay
from service.services.reports import (
    CostQuery,
    period_bounds,
    period_column,
    plan_filters,
    streamed,
    summed_columns,
    summed_cost,
    usage_per_plan,
)

# FinOps Open Cost and Usage Specification 1.2 (https://focus.finops.org/focus-specification/v1-2/): the
# columns it names for a usage charge, in the order a reader meets them, then one of ours (x_, as FOCUS asks
# of columns it does not define). 1.3 (December 2025) names the provider twice: the service's
# (ServiceProviderName, which was ProviderName) and the infrastructure's (HostProviderName).
FOCUS_VERSIONS = ("1.2", "1.3")
FOCUS_VERSION = FOCUS_VERSIONS[0]
FOCUS_COLUMNS = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeFrequency",
    "ChargeDescription",
    "BillingAccountId",
    "BillingAccountName",
    "SubAccountId",
    "SubAccountName",
    "ProviderName",
    "PublisherName",
    "InvoiceIssuerName",
    "InvoiceId",
    "ServiceName",
    "ServiceCategory",
    "ServiceSubcategory",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "SkuId",
    "SkuPriceId",
    "ConsumedQuantity",
    "ConsumedUnit",
    "PricingQuantity",
    "PricingUnit",
    "PricingCategory",
    "Tags",
    "x_PlanStatus",
    "x_OffScheduleCost",
    "x_EnergyKwh",
    "x_EmissionsKgCO2e",
)
FOCUS_GRANULARITIES = ("day", "month")


def focus_columns(version: str = FOCUS_VERSION) -> tuple[str, ...]:
    """The export's columns in a FOCUS version: 1.3 renames ProviderName and adds HostProviderName."""
    if version == "1.3":
        at = FOCUS_COLUMNS.index("ProviderName")
        return (*FOCUS_COLUMNS[:at], "ServiceProviderName", "HostProviderName", *FOCUS_COLUMNS[at + 1 :])
    return FOCUS_COLUMNS


PROVIDER = "Compute Planner"
ACCELERATOR_HOURS_UNIT = "Accelerator-Hours"
# Tags the service sets itself carry its prefix, so that they never collide with a plan's own labels.
TAG_PREFIX = "planner/"


def focus_rows(
    session: Session, query: CostQuery, *, scope: uuid.UUID | None, stream: bool = False
) -> Iterator[dict[str, Any]]:
    """What runs spent, one FOCUS usage charge per plan per UTC day (or month) of the window: billed charges,
    so actual spend only (plans are forecasts, which FOCUS does not describe).

    The service knows one price per run, the one charged: list, contracted, billed and effective cost are
    that amount alike (no discount or commitment to amortise). The billing account is the organisation, the
    sub-account the budget the plan is charged to; the SKU is the hardware profile; the tags are the plan's
    labels and its budget.

    The charges come as they are read, in order of period and plan, however many: with `stream`, from a
    server-side cursor on PostgreSQL (the session in a transaction: infra.db.export_session), so that memory
    holds a batch of them, not the export. What the query names (an organisation, hardware) is looked up
    when this is called, before the first charge.
    """
    if query.granularity not in FOCUS_GRANULARITIES or query.group_by:
        raise ValueError("FOCUS charges are one plan's in a day or a month")  # the schema keeps them so
    dialect = session.get_bind().dialect.name
    period = period_column(query.granularity, dialect, UsageDay.day)
    assert period is not None  # a day or a month
    keys: list[SQLColumnExpression[Any]] = [period, UsageDay.plan_id, UsageDay.currency]
    per_plan = usage_per_plan(keys, query, scope, dialect)
    sums = summed_columns(per_plan, dialect)
    off_schedule = summed_columns(per_plan, dialect, "off_schedule_cost")
    stmt = (
        select(
            per_plan.c.period,
            per_plan.c.currency,
            per_plan.c.accelerator_hours,
            *sums,
            *off_schedule,
            Plan.id,
            Plan.name,
            Plan.labels,
            Plan.status,
            Organization.slug,
            Organization.name,
            Budget.id,
            Budget.name,
            HardwareProfile.slug,
            Plan.accelerator_hours,
            Plan.energy_kwh,
            Plan.emissions_kg_co2e,
        )
        .join_from(per_plan, Plan, Plan.id == per_plan.c.plan_id)
        .join(Organization, Organization.id == Plan.organization_id)
        .outerjoin(Budget, Budget.id == Plan.budget_id)
        .outerjoin(HardwareProfile, HardwareProfile.id == Plan.hardware_id)
        .order_by(per_plan.c.period, Plan.id)
    )
    stmt = plan_filters(stmt.where(Plan.status.in_(query.statuses)), query)
    return _charges(session, streamed(stmt, stream), query.granularity, len(sums))


def _charges(session: Session, stmt: Any, granularity: str, cost_columns: int) -> Iterator[dict[str, Any]]:
    result = session.execute(stmt)
    try:  # closed however the stream ends: a server-side cursor is not left to the garbage collector
        for record in result:
            yield _focus_row(record, granularity, cost_columns=cost_columns)
    finally:
        result.close()


def _focus_row(record: Sequence[Any], granularity: str, *, cost_columns: int) -> dict[str, Any]:
    values = list(record)
    period, currency, hours = values[:3]
    cost = summed_cost(values[3 : 3 + cost_columns]) or Decimal(0)
    off_schedule = summed_cost(values[3 + cost_columns : 3 + 2 * cost_columns]) or Decimal(0)
    plan_id, plan_name, labels, status, org_slug, org_name, budget_id, budget_name, hardware, *energy = (
        values[3 + 2 * cost_columns :]
    )
    planned_hours, planned_kwh, planned_emissions = energy
    charge = period_bounds(period, granularity)
    billing = period_bounds(charge["period_start"][:7], "month")  # the calendar month of the charge
    tags = dict(labels or {})
    if budget_id is not None:
        tags[f"{TAG_PREFIX}budget_id"] = str(budget_id)
        tags[f"{TAG_PREFIX}budget"] = budget_name
    sku = hardware or "custom"  # hardware given inline with the plan has no profile
    return {
        "BilledCost": cost,
        "EffectiveCost": cost,
        "ListCost": cost,
        "ContractedCost": cost,
        "BillingCurrency": currency,
        "BillingPeriodStart": _focus_time(billing["period_start"]),
        "BillingPeriodEnd": _focus_time(billing["period_end"]),
        "ChargePeriodStart": _focus_time(charge["period_start"]),
        "ChargePeriodEnd": _focus_time(charge["period_end"]),
        "ChargeCategory": "Usage",
        "ChargeClass": None,  # not a correction of an earlier period's charge
        "ChargeFrequency": "Usage-Based",
        "ChargeDescription": f"{hours:.2f} accelerator-hours on {sku} for plan {plan_name or plan_id}",
        "BillingAccountId": org_slug,
        "BillingAccountName": org_name,
        "SubAccountId": None if budget_id is None else str(budget_id),
        "SubAccountName": budget_name,
        "ProviderName": PROVIDER,
        # FOCUS 1.3's names for the provider: the service's, and the infrastructure's (the same here).
        "ServiceProviderName": PROVIDER,
        "HostProviderName": PROVIDER,
        "PublisherName": PROVIDER,
        "InvoiceIssuerName": PROVIDER,
        "InvoiceId": None,  # what runs spent is not invoiced by the service: no invoice to name
        "ServiceName": "Model training",
        "ServiceCategory": "AI and Machine Learning",
        "ServiceSubcategory": "Machine Learning",
        "ResourceId": str(plan_id),
        "ResourceName": plan_name,
        "ResourceType": "Training run",
        "SkuId": sku,
        "SkuPriceId": None,
        "ConsumedQuantity": hours,
        "ConsumedUnit": ACCELERATOR_HOURS_UNIT,
        "PricingQuantity": hours,
        "PricingUnit": ACCELERATOR_HOURS_UNIT,
        "PricingCategory": "Standard",
        "Tags": json.dumps(tags, ensure_ascii=False, sort_keys=True, separators=(",", ":")),
        "x_PlanStatus": status,
        # Of BilledCost, what usage before the plan's start_at or after its end_at spent.
        "x_OffScheduleCost": off_schedule,
        # The charge's accelerator-hours at its plan's energy (and location-based emissions) per
        # accelerator-hour: estimates, as the plan's are, not metered; empty where the plan has none.
        "x_EnergyKwh": per_hour_of(hours, planned_kwh, planned_hours),
        "x_EmissionsKgCO2e": per_hour_of(hours, planned_emissions, planned_hours),
    }


def per_hour_of(hours: float, planned: float | None, planned_hours: float) -> float | None:
    """`hours` at the rate of a plan's `planned` figure over its `planned_hours` (None: the plan has none)."""
    if planned is None or not planned_hours:
        return None
    return hours * planned / planned_hours


def _focus_time(day: str) -> str:
    return f"{day}T00:00:00Z"

"""Cost reports for finance: JSON or CSV, exact money, never summed across currencies."""

from __future__ import annotations

import flask

from service.api.base import Blueprint
from service.auth import READERS, requires, scope
from service.csv_files import CSV_TYPE, csv_response
from service.db import get_session
from service.schemas.reports import CostReportQuerySchema, CostReportSchema
from service.services import reports

blp = Blueprint("reports", __name__, url_prefix="/v1/reports", description="Cost reports")


@blp.get("/costs")
@requires(*READERS)
@blp.arguments(CostReportQuerySchema, location="query", as_kwargs=True)
@blp.response(200, CostReportSchema)
@blp.doc(
    responses={
        "200": {
            "description": "The report: JSON, or CSV with format=csv or Accept: text/csv.",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/CostReport"}},
                CSV_TYPE: {
                    "schema": {"type": "string"},
                    "example": "period_start,period_end,budget,currency,plans,accelerator_hours,flops,cost,"
                    "estimated\r\n2026-01-01,2026-02-01,5c0e…,USD,3,1200.5,2.1e+22,3001.25,true\r\n",
                },
            },
        }
    }
)
def cost_report(*, from_, to, granularity, group_by, status, format=None, **filters):
    """What plans cost: plans starting in [from, to), grouped by period and by up to three of
    organization, budget, hardware, status and label:<key>, with plans, accelerator_hours, flops and cost
    per row and totals per currency. Amounts are exact decimal strings (two decimals in CSV); different
    currencies are never added together; every figure is an estimate (plans, not invoices)."""
    query = reports.CostQuery(
        start=from_, end=to, granularity=granularity, group_by=group_by, status=status, **filters
    )
    report = reports.cost_report(get_session(), query, scope=scope())

    @flask.after_this_request
    def _vary(response):  # Accept chooses the format: caches must keep the two apart
        response.vary.add("Accept")
        return response

    if _wants_csv(format):
        filename = f"costs_{from_:%Y%m%dT%H%M%SZ}_{to:%Y%m%dT%H%M%SZ}.csv"
        return csv_response(report.columns, report.rows, filename)
    return report


def _wants_csv(format: str | None) -> bool:
    if format is not None:
        return format == "csv"
    return flask.request.accept_mimetypes.best_match(["application/json", CSV_TYPE]) == CSV_TYPE

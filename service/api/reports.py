"""Cost reports for finance: JSON or CSV, exact money, never summed across currencies."""

from __future__ import annotations

import flask

from service.api.base import Blueprint
from service.infra.db import export_session, get_session
from service.schemas.reports import CostReportQuerySchema, CostReportSchema, FocusQuerySchema
from service.services import focus, reports, spend
from service.services.errors import InvalidParameterError
from service.web.auth import READERS, requires, scope
from service.web.csv_files import CSV_TYPE, csv_stream, finance_csv

blp = Blueprint("reports", __name__, url_prefix="/v1/reports", description="Cost reports")


@blp.get("/costs", operation_id="getCostReport")
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
def cost_report(
    *, from_, to, measure, granularity=None, group_by, statuses, format=None, part, focus_version, **filters
):
    """What plans cost and what their runs spent, in [from, to), grouped by period and by up to three of
    organization, budget, hardware, status and label:<key>, with totals per currency. Amounts are exact
    decimal strings; different currencies are never added together.

    The plans counted are those whose money is committed (committed, running, completed and failed) unless
    `status` names others. Planned figures are spread over each plan's schedule [start_at, end_at) pro rata
    to time (a three-month run plans a third in each month; money split to the cent, a plan's pieces adding
    up to its cost); actual ones count on the UTC day of use. measure=planned (the default): every figure an
    estimate. measure=both sets planned beside actual and their variance (actual - planned: positive is over
    plan), with organisation and budget names beside their ids and every period of the window present
    (zeros where nothing was planned or spent). measure=actual gives the actual side alone.

    The CSV is a finance file whatever the measure: the same columns (planned, actual and variance; a side
    not measured is blank), names beside ids, money in its currency's minor unit, hours and percentages to
    the hundredth, every period of the window, and the rows alone, so that no sum of a column counts twice
    (part=totals gives the totals per currency as a file of their own; the JSON has both). GET
    /v1/reports/focus gives the same spend as FOCUS usage charges.

    The JSON holds at most 100 000 rows (more is a 422 at granularity); the CSV streams every row, however
    many. A failure after its first byte drops the connection without the last chunk: the file is visibly
    cut short, never complete-looking."""
    if format == "focus":
        granularity = _focus_granularity(granularity, group_by)
        return _focus(from_, to, granularity, focus_version, **filters, statuses=statuses)
    query = reports.CostQuery(
        start=from_,
        end=to,
        granularity=granularity or "none",
        group_by=group_by,
        statuses=statuses,
        measure=measure,
        **filters,
    )
    session = get_session()

    @flask.after_this_request
    def _vary(response):  # Accept chooses the format: caches must keep the two apart
        response.vary.add("Accept")
        return response

    if _wants_csv(format):  # a finance file, whatever the measure: the spend report's rows
        return finance_csv(query, f"costs_{from_:%Y%m%dT%H%M%SZ}_{to:%Y%m%dT%H%M%SZ}", part, scope=scope())
    if measure == "planned":
        return reports.cost_report(session, query, scope=scope())
    return spend.spend_report(session, query, scope=scope())


def _wants_csv(format: str | None) -> bool:
    if format is not None:
        return format == "csv"
    return flask.request.accept_mimetypes.best_match(["application/json", CSV_TYPE]) == CSV_TYPE


@blp.get("/focus", operation_id="getFocusExport")
@requires(*READERS)
@blp.arguments(FocusQuerySchema, location="query", as_kwargs=True)
@blp.response(200)
@blp.doc(
    responses={
        "200": {
            "description": "FOCUS usage charges, CSV (UTF-8, one header row).",
            "content": {
                CSV_TYPE: {
                    "schema": {"type": "string"},
                    "example": ",".join(focus.FOCUS_COLUMNS) + "\r\n",
                }
            },
        }
    }
)
def focus_export(*, from_, to, granularity, focus_version, **filters):
    """What runs spent in [from, to) as the FinOps Open Cost and Usage Specification (FOCUS 1.2; 1.3's
    columns with focus_version=1.3) describes
    billed charges, for FinOps tools: one usage charge per plan per UTC day (or calendar month), with billed,
    effective, list and contracted cost (all the amount charged, to the millionth), the charge and billing
    periods, the organisation as billing account, the budget as sub-account, the hardware profile as SKU,
    accelerator-hours as the quantity, and the plan's labels and budget as tags; ServiceSubcategory Machine
    Learning, InvoiceId empty (the service invoices nothing). Streamed, however many rows: a failure after
    the first byte drops the connection without the last chunk."""
    return _focus(from_, to, granularity, focus_version, **filters)


def _focus(from_, to, granularity: str, focus_version: str, **filters):
    query = reports.CostQuery(start=from_, end=to, granularity=granularity, measure="actual", **filters)
    filename = f"focus_{from_:%Y%m%dT%H%M%SZ}_{to:%Y%m%dT%H%M%SZ}.csv"
    columns = list(focus.focus_columns(focus_version))
    session, close = export_session()
    try:
        rows = focus.focus_rows(session, query, scope=scope(), stream=True)
        return csv_stream(columns, rows, filename, exact_money=True, on_close=close)
    except BaseException:
        close()
        raise


def _focus_granularity(granularity: str | None, group_by: tuple[str, ...]) -> str:
    """format=focus on /costs: the FOCUS export's charge period, refusing what it cannot honour (a FOCUS row
    is one plan's usage in one period: it is neither grouped, planned, nor weekly)."""
    if group_by:
        raise InvalidParameterError("group_by", "A FOCUS export has a row per plan and period: no group_by.")
    if flask.request.args.get("measure", "actual") != "actual":
        raise InvalidParameterError("measure", "A FOCUS export is what runs spent: measure actual.")
    if granularity in (None, "none"):
        return "day"
    if granularity not in focus.FOCUS_GRANULARITIES:
        raise InvalidParameterError("granularity", "A FOCUS charge period is a day or a month.")
    return granularity

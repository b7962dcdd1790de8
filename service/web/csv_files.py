"""CSV files the API and the console send: exact money (two decimals), and no cell a spreadsheet would
evaluate. Apart from both, so that the console never imports the API."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import flask

from service.core.units import CENT
from service.services.documents import format_money
from service.services.spend import SpendReport

CSV_TYPE = "text/csv"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet would evaluate such a cell (OWASP)


def _csv_value(name: str, value: Any, decimals: Mapping[str, int], exact_money: bool) -> str:
    if name == "estimated":
        return "true"
    if value is None:
        return ""
    if isinstance(value, Decimal):
        if exact_money:
            return format_money(value)
        return f"{value.quantize(CENT, ROUND_HALF_UP):f}"  # as every amount the service rounds
    if isinstance(value, float | int) and not isinstance(value, bool):
        return _rounded(value, decimals[name]) if name in decimals else repr(value)
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _rounded(value: float, places: int) -> str:
    """Half up from the shortest decimal that is the float (12.345 is 12.35, as a person rounds it)."""
    return f"{Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP):f}"


def csv_response(
    columns: list[str],
    rows: Iterable[dict[str, Any]],
    filename: str,
    *,
    decimals: Mapping[str, int] | None = None,
    exact_money: bool = False,
) -> flask.Response:
    """`decimals` rounds the named number columns (half up, as a person rounds) to that many places;
    `exact_money` writes every digit of an amount rather than the cents (for files that tools sum again)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_value(name, row.get(name), decimals or {}, exact_money) for name in columns])
    return flask.Response(
        out.getvalue().encode("utf-8"),
        mimetype=CSV_TYPE,
        headers={
            "Content-Type": f"{CSV_TYPE}; charset=utf-8",
            "Content-Disposition": f'attachment; filename="{filename}"',
        },
    )


# What a person reads in a planned-against-actual CSV: hours and percentages to the hundredth.
SPEND_DECIMALS = {
    "planned_accelerator_hours": 2,
    "actual_accelerator_hours": 2,
    "variance_percent": 2,
}


def spend_csv(report: SpendReport, filename: str) -> flask.Response:
    """A planned-against-actual report as finance reads it: its rows, then a row per currency whose first
    cell says `total` (when rows have a period or groups; without either, the rows are the totals)."""
    rows: list[dict[str, Any]] = list(report.rows)
    first = report.columns[0]
    if first != "currency":
        rows += [{**totals, first: "total"} for totals in report.totals]
    return csv_response(report.columns, rows, filename, decimals=SPEND_DECIMALS)

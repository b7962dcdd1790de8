"""CSV files the API and the console send: exact money (in its currency's minor unit for people, every digit
for tools that sum again), and no cell a spreadsheet would evaluate. Apart from both, so that the console
never imports the API."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import flask

from service.core.units import minor_unit
from service.services.documents import format_money
from service.services.spend import FINANCE_METRICS, SpendReport

CSV_TYPE = "text/csv"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet would evaluate such a cell (OWASP)


def _csv_value(name: str, value: Any, decimals: Mapping[str, int], exact_money: bool) -> str:
    if name == "estimated":
        return "true"
    if value is None:
        return ""
    if isinstance(value, Decimal):
        # Every digit that is not a trailing zero, or the amount as the caller rounded it (finance_csv).
        return format_money(value) if exact_money else f"{value:f}"
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
    `exact_money` writes every digit of an amount that is not a trailing zero (for files that tools sum
    again); otherwise an amount is written as the caller rounded it."""
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


# What a person reads in a finance CSV: hours and percentages to the hundredth.
FINANCE_DECIMALS = {
    "planned_accelerator_hours": 2,
    "actual_accelerator_hours": 2,
    "off_schedule_accelerator_hours": 2,
    "variance_percent": 2,
}


def finance_csv(report: SpendReport, stem: str, part: str = "rows") -> flask.Response:
    """A report as a finance tool opens it, whatever its measure: the same columns (planned, actual and
    their variance; a side not measured is blank), names beside ids, money in its currency's minor unit,
    hours and percentages to the hundredth, every period of the window. `part` rows: the rows alone, so that
    a column's sum is the window's (per currency), in `stem`.csv; totals: one row per currency, in a file of
    its own, `stem`_totals.csv."""
    filename = f"{stem}_totals.csv" if part == "totals" else f"{stem}.csv"
    money = [name for name in FINANCE_METRICS if name.endswith("_cost")]
    if part == "totals":
        columns, rows = ["currency", *FINANCE_METRICS], report.totals
    else:
        columns, rows = [*report.key_columns, *FINANCE_METRICS], report.rows
    in_minor_units = [
        {**row, **{name: _in_minor_units(row[name], row["currency"]) for name in money}} for row in rows
    ]
    return csv_response(columns, in_minor_units, filename, decimals=FINANCE_DECIMALS)


def _in_minor_units(amount: Decimal | None, currency: str | None) -> Decimal | None:
    """An amount to its currency's minor unit (0.01 USD, 1 JPY), half up, as every amount the service
    rounds."""
    return None if amount is None else amount.quantize(minor_unit(currency), ROUND_HALF_UP)

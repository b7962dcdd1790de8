"""CSV files the API and the console send: exact money (two decimals), and no cell a spreadsheet would
evaluate. Apart from both, so that the console never imports the API."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import flask

from service.core.units import CENT

CSV_TYPE = "text/csv"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet would evaluate such a cell (OWASP)


def _csv_value(name: str, value: Any) -> str:
    if name == "estimated":
        return "true"
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return f"{value.quantize(CENT, ROUND_HALF_UP):f}"  # as every amount the service rounds
    if isinstance(value, float | int):
        return repr(value)
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_response(columns: list[str], rows: Iterable[dict[str, Any]], filename: str) -> flask.Response:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_value(name, row.get(name)) for name in columns])
    return flask.Response(
        out.getvalue().encode("utf-8"),
        mimetype=CSV_TYPE,
        headers={
            "Content-Type": f"{CSV_TYPE}; charset=utf-8",
            "Content-Disposition": f'attachment; filename="{filename}"',
        },
    )

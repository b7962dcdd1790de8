"""CSV files the API and the console send: exact money (in its currency's minor unit for people, every digit
for tools that sum again), and no cell a spreadsheet would evaluate. Apart from both, so that the console
never imports the API."""

from __future__ import annotations

import csv
import io
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import flask

from service.core.units import minor_unit
from service.infra.db import export_session
from service.services import spend
from service.services.documents import format_money
from service.services.reports import CostQuery
from service.services.spend import FINANCE_METRICS

log = logging.getLogger(__name__)

CSV_TYPE = "text/csv"
CHUNK_BYTES = 64 * 1024  # what a streamed CSV writes at a time
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
    body = b"".join(_csv_chunks(columns, rows, decimals or {}, exact_money))
    return flask.Response(body, mimetype=CSV_TYPE, headers=_csv_headers(filename))


def csv_stream(
    columns: list[str],
    rows: Iterator[dict[str, Any]],
    filename: str,
    *,
    decimals: Mapping[str, int] | None = None,
    exact_money: bool = False,
    on_close: Callable[[], None] | None = None,
) -> flask.Response:
    """As csv_response, the rows written as they come (CHUNK_BYTES at a time, chunked transfer encoding), for
    files of any length: memory holds a chunk, not the file.

    The first row is read before the response begins, so that what is wrong with the query, and a database
    that does not answer, is still a problem with its status (the caller's setup has run by then, and its
    queries have begun). Once the first bytes are sent no status can change: a failure after them is logged
    and raised again, and the server drops the connection without the chunked body's last chunk, so that a
    client sees a broken transfer (curl: "transfer closed with outstanding read data remaining", exit 18),
    never a file that looks complete. `on_close` runs when the stream ends, however it ends."""
    try:
        first = next(rows, None)
    except BaseException:
        if on_close is not None:
            on_close()
        raise
    head = [] if first is None else [first]
    chunks = _csv_chunks(columns, itertools.chain(head, rows), decimals or {}, exact_money)

    def body() -> Iterator[bytes]:
        written = 0
        try:
            for chunk in chunks:
                yield chunk
                written += len(chunk)
        except GeneratorExit:  # the client went away: nothing to tell it
            raise
        except Exception as error:
            log.error(
                "export cut short: the response had begun, its connection is dropped",
                extra={"error_type": type(error).__name__, "bytes_sent": written},
            )
            raise
        finally:
            if on_close is not None:
                on_close()

    response = flask.Response(
        flask.stream_with_context(body()), mimetype=CSV_TYPE, headers=_csv_headers(filename)
    )
    if on_close is not None:
        response.call_on_close(on_close)  # also when the body is never read
    return response


def _csv_headers(filename: str) -> dict[str, str]:
    return {
        "Content-Type": f"{CSV_TYPE}; charset=utf-8",
        "Content-Disposition": f'attachment; filename="{filename}"',
    }


def _csv_chunks(
    columns: list[str], rows: Iterable[dict[str, Any]], decimals: Mapping[str, int], exact_money: bool
) -> Iterator[bytes]:
    """The header and the rows as UTF-8, about CHUNK_BYTES at a time."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_value(name, row.get(name), decimals, exact_money) for name in columns])
        if out.tell() >= CHUNK_BYTES:
            yield out.getvalue().encode("utf-8")
            out.seek(0)
            out.truncate()
    yield out.getvalue().encode("utf-8")


# What a person reads in a finance CSV: hours and percentages to the hundredth.
FINANCE_DECIMALS = {
    "planned_accelerator_hours": 2,
    "planned_energy_kwh": 2,
    "planned_emissions_kg_co2e": 2,
    "actual_accelerator_hours": 2,
    "off_schedule_accelerator_hours": 2,
    "variance_percent": 2,
}


def finance_csv(query: CostQuery, stem: str, part: str, *, scope: uuid.UUID | None) -> flask.Response:
    """A cost report as a finance tool opens it, whatever its measure, streamed however long: the same
    columns (planned, actual and their variance; a side not measured is blank), names beside ids, money in
    its currency's minor unit, hours and percentages to the hundredth, every period of the window. `part`
    rows: the rows alone, so that a column's sum is the window's (per currency), in `stem`.csv; totals: one
    row per currency, in a file of its own, `stem`_totals.csv (read from every row, holding none). The API's
    and the console's downloads are this one file."""
    session, close = export_session()
    try:
        found = spend.spend_stream(session, query, scope=scope, stream=True)
        if part == "totals":
            try:
                return finance_totals_csv(found.totals(found.rows), stem)
            finally:
                close()
        return finance_csv_stream(spend.key_columns(query), found.rows, stem, on_close=close)
    except BaseException:
        close()
        raise


def finance_totals_csv(totals: Iterable[dict[str, Any]], stem: str) -> flask.Response:
    """The totals of a finance CSV, one row per currency, in `stem`_totals.csv."""
    columns = ["currency", *FINANCE_METRICS]
    return csv_response(columns, finance_rows(totals), f"{stem}_totals.csv", decimals=FINANCE_DECIMALS)


def finance_csv_stream(
    key_columns: list[str], rows: Iterator[dict[str, Any]], stem: str, *, on_close: Callable[[], None]
) -> flask.Response:
    """finance_csv's rows as they are read (csv_stream), in `stem`.csv."""
    columns = [*key_columns, *FINANCE_METRICS]
    return csv_stream(
        columns, finance_rows(rows), f"{stem}.csv", decimals=FINANCE_DECIMALS, on_close=on_close
    )


_MONEY = [name for name in FINANCE_METRICS if name.endswith("_cost")]


def finance_rows(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows with their money in its currency's minor unit, as they come."""
    for row in rows:
        yield {**row, **{name: _in_minor_units(row[name], row["currency"]) for name in _MONEY}}


def _in_minor_units(amount: Decimal | None, currency: str | None) -> Decimal | None:
    """An amount to its currency's minor unit (0.01 USD, 1 JPY), half up, as every amount the service
    rounds."""
    return None if amount is None else amount.quantize(minor_unit(currency), ROUND_HALF_UP)

"""How the console writes figures for people: compact numbers, exact money, UTC times, sizes in bytes."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal, InvalidOperation

from service.console.charts import format_number


def number(value: float | None) -> str:
    """70B, 1.4T, 5.8e23; an em dash for a figure that is not there."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format_number(value)


def money(amount: Decimal | str | None, currency: str | None = None) -> str:
    """Exact amounts with thousands separators and cents, e.g. 1,234,567.50 USD."""
    if amount is None or amount == "":
        return "—"
    try:
        value = Decimal(str(amount))
    except InvalidOperation:
        return str(amount)
    text = f"{value:,.2f}"
    return f"{text} {currency}" if currency else text


def percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.1f}%"


def fixed(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def size_in_bytes(value: float | None) -> str:
    """Memory in binary units: 80.0 GiB."""
    if value is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.1f} {unit}" if unit != "B" else f"{value:,.0f} B"
        value /= 1024
    raise AssertionError("unreachable")


def when(value: datetime | str | None) -> str:
    """A moment in UTC to the minute: 2026-03-01 09:30 UTC."""
    if value is None or value == "":
        return "—"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return f"{moment:%Y-%m-%d %H:%M} UTC"


FILTERS = {
    "number": number,
    "money": money,
    "percent": percent,
    "fixed": fixed,
    "bytes": size_in_bytes,
    "when": when,
}

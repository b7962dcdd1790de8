"""How the console writes figures for people: compact numbers, exact money, UTC times, memory in GB."""

from __future__ import annotations

import math
from collections.abc import Callable
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


def money_short(amount: Decimal | str | None, currency: str | None = None) -> str:
    """An amount as a headline figure that fits a card: 4.9M USD, 30M USD, 950 USD (`money` gives it to
    the cent beside it)."""
    if amount is None or amount == "":
        return "—"
    try:
        value = float(Decimal(str(amount)))
    except InvalidOperation:
        return str(amount)
    text = format_number(value)
    return f"{text} {currency}" if currency else text


def percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.1f}%"


def fixed(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def gigabytes(value: float | None) -> str:
    """Memory in decimal gigabytes (1 GB = 10^9 bytes), always: the API's warnings, the command line and
    the README say it so, and one screen must not say GiB beside them. 80.0 GB, 1,216.0 GB."""
    return "—" if value is None else f"{value / 1e9:,.1f} GB"


def duration(seconds: float | None) -> str:
    """A span of time in the unit that reads best: 45 s, 24.6 min, 2.1 h, 3.2 days."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    for unit, size in (("days", 86_400.0), ("h", 3_600.0), ("min", 60.0)):
        if seconds >= 1.5 * size if unit == "days" else seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.0f} s"


def when(value: datetime | str | None) -> str:
    """A moment in UTC to the minute: 2026-03-01 09:30 UTC."""
    if value is None or value == "":
        return "—"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return f"{moment:%Y-%m-%d %H:%M} UTC"


FILTERS: dict[str, Callable[..., str]] = {
    "number": number,
    "money": money,
    "money_short": money_short,
    "percent": percent,
    "fixed": fixed,
    "gigabytes": gigabytes,
    "when": when,
    "duration": duration,
}

"""Argument checks shared by the core: each failure names the argument, so callers can point at it."""

from __future__ import annotations

import math


class InvalidInput(ValueError):
    """An argument is outside what the model can answer for. `argument` names it."""

    def __init__(self, argument: str, message: str):
        super().__init__(f"{argument}: {message}")
        self.argument = argument
        self.message = message

    @property
    def sentence(self) -> str:
        """The message as a sentence of its own, for a reader who sees it beside the argument."""
        return self.message[0].upper() + self.message[1:] + "."


def finite(argument: str, value: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(argument, f"must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InvalidInput(argument, f"must be finite, got {value!r}")
    return number


def positive(
    argument: str, value: float, *, maximum: float | None = None, minimum: float | None = None
) -> float:
    """A finite number > 0 (and >= minimum, <= maximum when given)."""
    number = finite(argument, value)
    if number <= 0:
        raise InvalidInput(argument, f"must be greater than 0, got {value!r}")
    if minimum is not None and number < minimum:
        raise InvalidInput(argument, f"must be at least {minimum:g}, got {value!r}")
    if maximum is not None and number > maximum:
        raise InvalidInput(argument, f"must be at most {maximum:g}, got {value!r}")
    return number


def in_range(
    argument: str,
    value: float,
    low: float,
    high: float,
    *,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    number = finite(argument, value)
    above = number >= low if low_inclusive else number > low
    below = number <= high if high_inclusive else number < high
    if not (above and below):
        left = "[" if low_inclusive else "("
        right = "]" if high_inclusive else ")"
        raise InvalidInput(argument, f"must be in {left}{low:g}, {high:g}{right}, got {value!r}")
    return number


def whole(argument: str, value: int, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(argument, f"must be a whole number, got {value!r}")
    if value < minimum:
        raise InvalidInput(argument, f"must be at least {minimum}, got {value!r}")
    return value


def whole_at_most(argument: str, value: int, maximum: int, *, minimum: int = 1) -> int:
    """A whole number in [minimum, maximum]."""
    number = whole(argument, value, minimum=minimum)
    if number > maximum:
        raise InvalidInput(argument, f"must be at most {maximum}, got {value!r}")
    return number


def choice(argument: str, value: str, allowed: tuple[str, ...]) -> str:
    """One of the `allowed` strings."""
    if value not in allowed:
        raise InvalidInput(argument, f"must be one of {', '.join(allowed)}; got {value!r}")
    return value

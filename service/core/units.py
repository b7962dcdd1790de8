"""Units of compute, time and money.

A petaFLOP/s-day (PF-day) is 1e15 FLOP/s sustained for 86 400 s = 8.64e19 FLOPs (Brown et al. 2020, the
GPT-3 paper, Table D.1 uses it). Accelerator throughput is the dense peak at the training precision times
the model FLOPs utilisation (MFU, Chowdhery et al. 2022, PaLM, App. B).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from service.core import validation as v

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0
PF_DAY_FLOPS = 1e15 * SECONDS_PER_DAY  # 8.64e19

# Bounds that keep every figure far from float overflow and flag obvious unit mistakes (1e35 FLOPs is
# ~1e11 times the largest training run published so far).
MAX_FLOPS = 1e35
# A million FLOPs trains a model of about a hundred parameters: anything smaller is a unit mistake, and the
# floor keeps model sizes and token counts well above zero.
MIN_FLOPS = 1e6
MAX_PARAMS = 1e16
MAX_TOKENS = 1e18
# A corpus holds at least one token: fewer is a unit mistake, and tiny counts underflow the
# data-constrained law's logarithms.
MIN_TOKENS = 1.0
MAX_PEAK_FLOPS_PER_SECOND = 1e19
MAX_ACCELERATORS = 10_000_000
MAX_DAYS = 36_500.0
CENT = Decimal("0.01")
# ISO 4217's minor units where they are not 2 (the list SIX Group maintains for ISO, "Minor unit" column):
# the smallest amount a finance file shows in each currency.
_MINOR_UNITS = {
    **dict.fromkeys(
        (
            *("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND"),
            *("VUV", "XAF", "XOF", "XPF"),
        ),
        0,
    ),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
    **dict.fromkeys(("CLF", "UYW"), 4),
}
# Amounts of money have at most 12 integer digits (the database stores NUMERIC(18, 6)): a trillion in any
# currency is beyond any training run.
MAX_MONEY = Decimal(10) ** 12


def minor_unit(currency: str | None) -> Decimal:
    """The smallest amount of `currency` (ISO 4217): 0.01 for most, 1 for JPY, 0.001 for KWD."""
    return Decimal(1).scaleb(-_MINOR_UNITS.get(currency or "", 2))


def flops_to_pf_days(flops: float) -> float:
    return v.positive("flops", flops, maximum=MAX_FLOPS) / PF_DAY_FLOPS


def pf_days_to_flops(pf_days: float) -> float:
    bounds = {"minimum": MIN_FLOPS / PF_DAY_FLOPS, "maximum": MAX_FLOPS / PF_DAY_FLOPS}
    return v.positive("pf_days", pf_days, **bounds) * PF_DAY_FLOPS


def budget_flops(argument: str, flops: float) -> float:
    """A training budget: between MIN_FLOPS and MAX_FLOPS."""
    return v.positive(argument, flops, minimum=MIN_FLOPS, maximum=MAX_FLOPS)


def effective_flops_per_second(peak_flops_per_second: float, mfu: float) -> float:
    """Useful model FLOP/s of one accelerator: its dense peak times the model FLOPs utilisation."""
    peak = v.positive("peak_flops_per_second", peak_flops_per_second, maximum=MAX_PEAK_FLOPS_PER_SECOND)
    return peak * v.in_range("mfu", mfu, 0.0, 1.0, low_inclusive=False)


def accelerator_hours_for_flops(flops: float, peak_flops_per_second: float, mfu: float) -> float:
    rate = effective_flops_per_second(peak_flops_per_second, mfu)
    return v.positive("flops", flops, maximum=MAX_FLOPS) / rate / SECONDS_PER_HOUR


def flops_for_accelerator_hours(accelerator_hours: float, peak_flops_per_second: float, mfu: float) -> float:
    rate = effective_flops_per_second(peak_flops_per_second, mfu)
    return v.positive("accelerator_hours", accelerator_hours) * SECONDS_PER_HOUR * rate


def accelerator_hours_for_cost(cost: Decimal, price_per_hour: Decimal) -> float:
    """How many accelerator-hours an amount of money buys at a price per accelerator-hour."""
    amount = _money("cost", cost, allow_zero=False)
    price = _money("price_per_hour", price_per_hour, allow_zero=False)
    return float(amount / price)


def cost_of_accelerator_hours(accelerator_hours: float, price_per_hour: Decimal) -> Decimal:
    """Hours times price, in exact decimal arithmetic, rounded half-up to the cent."""
    hours = Decimal(repr(v.finite("accelerator_hours", accelerator_hours)))
    if hours < 0:
        raise v.InvalidInput("accelerator_hours", "must not be negative")
    cost = hours * _money("price_per_hour", price_per_hour, allow_zero=True)
    # Checked before rounding (quantize overflows on huge amounts) and after (999999999999.996 rounds up).
    if cost >= MAX_MONEY or (cost := cost.quantize(CENT, ROUND_HALF_UP)) >= MAX_MONEY:
        raise v.InvalidInput(
            "run", f"would cost {cost:.3e}, beyond the {MAX_MONEY:.0e} any amount of money may reach"
        )
    return cost


def flops_for_deadline(days: float, accelerators: int, peak_flops_per_second: float, mfu: float) -> float:
    """FLOPs a cluster delivers in `days` of wall-clock time."""
    seconds = v.positive("days", days, maximum=MAX_DAYS) * SECONDS_PER_DAY
    count = v.whole("accelerators", accelerators)
    if count > MAX_ACCELERATORS:
        raise v.InvalidInput("accelerators", f"must be at most {MAX_ACCELERATORS}")
    return seconds * count * effective_flops_per_second(peak_flops_per_second, mfu)


def _money(argument: str, value: Decimal, *, allow_zero: bool) -> Decimal:
    if not isinstance(value, Decimal):
        raise v.InvalidInput(argument, f"must be a Decimal, got {type(value).__name__}")
    if not value.is_finite():
        raise v.InvalidInput(argument, "must be finite")
    if value < 0:
        raise v.InvalidInput(argument, "must not be negative")
    if value == 0 and not allow_zero:
        raise v.InvalidInput(argument, "must be greater than 0")
    return value

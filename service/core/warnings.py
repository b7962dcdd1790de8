"""Caveats attached to an answer. Codes are stable: clients may switch on them; messages are for people."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from service.core.laws import FittedRange

EXTRAPOLATION = "extrapolation"
REPEATED_DATA = "repeated_data"
REPETITION_WITHOUT_GAIN = "repetition_without_gain"
REPETITION_CONSTANTS_FROM_C4 = "repetition_constants_from_c4"
DOES_NOT_FIT_MEMORY = "does_not_fit_memory"
BINDING_LIMIT = "binding_limit"
UNUSUAL_MFU = "unusual_mfu"
NOT_CONVERGED = "not_converged"  # of a fitted law
UNSTABLE_BOOTSTRAP = "unstable_bootstrap"  # of a fitted law

# Muennighoff et al. 2023: up to about 4 epochs, repeated tokens are worth nearly as much as fresh ones.
MAX_WORTHWHILE_EPOCHS = 4.0
# Large runs report MFU of roughly 0.3-0.55 (hardware.md "Utilisation"); outside 0.2-0.6 is suspicious.
USUAL_MFU = (0.2, 0.6)


@dataclass(frozen=True)
class Caveat:
    code: str
    message: str
    details: dict[str, object] = field(default_factory=dict)


def extrapolation(fitted: FittedRange, params: float, tokens: float, flops: float, law: str) -> list[Caveat]:
    """One caveat per quantity outside the range the law was fitted on, saying how far out."""
    caveats = []
    for quantity, value, low, high in (
        ("params", params, fitted.min_params, fitted.max_params),
        ("tokens", tokens, fitted.min_tokens, fitted.max_tokens),
        ("flops", flops, fitted.min_flops, fitted.max_flops),
    ):
        if high is not None and value > high:
            side, bound_name, bound, factor = "above", "max", high, value / high
        elif low is not None and value < low:
            side, bound_name, bound, factor = "below", "min", low, low / value
        else:
            continue
        orders = math.log10(factor)
        caveats.append(
            Caveat(
                EXTRAPOLATION,
                f"{quantity} = {value:.3g} is {_distance(factor, side)} {side} the range {law} was "
                f"fitted on ({bound_name} {bound:.3g}); the prediction is an extrapolation.",
                {"quantity": quantity, "orders_of_magnitude": float(f"{orders:.3g}"), "bound": bound},
            )
        )
    return caveats


def _distance(factor: float, side: str) -> str:
    """How far past a bound (`factor` ≥ 1 times), readably: within a factor of two in percent ("6.2%",
    where orders of magnitude would round to 0.0), then as the factor up to ten, then in orders of
    magnitude."""
    if factor >= 10:
        return f"{math.log10(factor):.1f} orders of magnitude"
    if factor >= 2:
        return f"a factor of {factor:.2g}"
    percent = 100 * (factor - 1 if side == "above" else 1 - 1 / factor)
    return f"{percent:.0f}%" if percent >= 10 else f"{percent:.2g}%"


def unusual_mfu(mfu: float) -> list[Caveat]:
    low, high = USUAL_MFU
    if low <= mfu <= high:
        return []
    return [
        Caveat(
            UNUSUAL_MFU,
            f"MFU {mfu:g} is outside {low:g}-{high:g}, the range large training runs achieve "
            "(most land at 0.35-0.45); the time and cost estimates depend on it directly.",
            {"mfu": mfu},
        )
    ]

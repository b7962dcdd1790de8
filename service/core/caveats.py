"""Caveats attached to an answer. Codes are stable: clients may switch on them; messages are for people."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from service.core.fit import LawFit
from service.core.isoflop_fit import BUDGET_TOLERANCE_DECADES, IsoflopFit, IsoflopUnavailable
from service.core.laws import FittedRange
from service.core.performance import Machine
from service.core.shape import ModelShape
from service.core.wall_clock import LONGEST_RUN_DAYS, SECONDS_PER_DAY, within_reach

EXTRAPOLATION = "extrapolation"
REPEATED_DATA = "repeated_data"
REPETITION_WITHOUT_GAIN = "repetition_without_gain"
REPETITION_CONSTANTS_FROM_C4 = "repetition_constants_from_c4"
DOES_NOT_FIT_MEMORY = "does_not_fit_memory"
BINDING_LIMIT = "binding_limit"
UNUSUAL_MFU = "unusual_mfu"
NOT_CONVERGED = "not_converged"  # of a fitted law
UNSTABLE_BOOTSTRAP = "unstable_bootstrap"  # of a fitted law
INFLUENTIAL_RUNS = "influential_runs"  # of a fitted law
NOT_AN_ISOFLOP_SWEEP = "not_an_isoflop_sweep"  # of a fitted law's IsoFLOP fit (Approach 2)
MFU_GIVEN = "mfu_given"  # the request's MFU set the pace, not the cluster model
ASSUMED_SHAPE = "assumed_shape"  # the cluster model ran on a shape the request did not give
ASSUMED_NETWORK = "assumed_network"  # the hardware profile gives no network figures
UNCALIBRATED_HARDWARE = (
    "uncalibrated_hardware"  # no run calibrates the hardware's efficiency at the precision
)
SHAPE_SCALED = "shape_scaled"  # the shape given was scaled to the run's parameter count
DEPRECATED_FIELD = "deprecated_field"  # a request field that still works but has a new place
CALIBRATED = "calibrated"  # the cluster model ran with the organisation's own efficiency for the hardware
IMPLAUSIBLY_LONG_RUN = "implausibly_long_run"  # longer than any pre-training run published, by far
UNPRICED_HARDWARE = "unpriced_hardware"  # no price per hour: the answer has no cost

# Muennighoff et al. 2023: up to about 4 epochs, repeated tokens are worth nearly as much as fresh ones.
MAX_WORTHWHILE_EPOCHS = 4.0
# Large runs report MFU of roughly 0.3-0.55 (hardware.md "Utilisation"); outside 0.2-0.6 is suspicious.
USUAL_MFU = (0.2, 0.6)
# Runs far off a fitted law are worth a warning when the law fitted without them moves the compute-optimal
# model size (and the tokens, the other way) by more than this at a budget the fit reports; leaving out the
# worst runs of a sweep with 0.5% noise moves it 2-3%.
INFLUENTIAL_SHIFT = 0.10
RUNS_NAMED = 5  # in an influential_runs message; its details list every run


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


def influential_runs(fitted: LawFit) -> list[Caveat]:
    """The runs far off a fitted law, when the law fitted without them allocates a budget differently."""
    influence = fitted.influence
    if influence is None:
        return []
    with_them, without = influence.tokens_per_param_with, influence.tokens_per_param_without
    # At a budget C with D/N = r, N = sqrt(C / (6·r)): the model size moves by the root of r's move. Whether
    # it moves is judged between the two refits (alike but for the runs); what is shown is against the law
    # as fitted, which the refit of every run matches unless the fit stopped short of its optimum.
    # Runs of magnitudes no training has (a law of 1e-56 parameters) can leave a refit whose ratio a float
    # does not hold (0 or infinite): no shift can be said there, so those budgets are not compared.
    comparable = [
        budget
        for budget in with_them
        if all(
            0 < ratio < math.inf
            for ratio in (with_them[budget], without[budget], fitted.tokens_per_param[budget])
        )
        and 0 < without[budget] / with_them[budget] < math.inf
    ]
    if not comparable:
        return []
    flops = max(comparable, key=lambda budget: abs(math.log(without[budget] / with_them[budget])))
    if abs(math.log(without[flops] / with_them[flops])) <= 2 * math.log1p(INFLUENTIAL_SHIFT):
        return []
    smaller = math.sqrt(without[flops] / fitted.tokens_per_param[flops])  # N with them / N without
    runs, law, law_without = influence.runs, fitted.law, influence.law_without
    named = ", ".join(
        f"run {run.index} (params {run.params:.3g}, tokens {run.tokens:.3g}, loss {run.loss:.4g}, "
        f"log residual {run.log_residual:+.3f})"
        for run in runs[:RUNS_NAMED]
    )
    if len(runs) > RUNS_NAMED:
        named += f" and {len(runs) - RUNS_NAMED} more"
    model = f"{smaller:.2g} times smaller" if smaller > 1 else f"{1 / smaller:.2g} times larger"
    message = (
        f"{len(runs)} run{'s are' if len(runs) > 1 else ' is'} far off the fitted law (the typical log "
        f"residual is {influence.typical_log_residual:.2g}) and sway it: {named}. Fitted without them, the "
        f"law calls for {without[flops]:.3g} tokens per parameter at {flops:.0e} FLOPs instead of "
        f"{fitted.tokens_per_param[flops]:.3g}, a compute-optimal model {model} "
        f"(alpha {law_without.alpha:.3g} and beta {law_without.beta:.3g} instead of {law.alpha:.3g} and "
        f"{law.beta:.3g}). Check those runs (stopped early, diverged, logged wrong?) and fit again without "
        "them if they do not belong."
    )
    return [
        Caveat(
            INFLUENTIAL_RUNS,
            message,
            {
                "runs": [vars(run).copy() for run in runs],
                "typical_log_residual": influence.typical_log_residual,
                "without": {name: getattr(law_without, name) for name in ("E", "A", "B", "alpha", "beta")},
                "tokens_per_param": [
                    {"flops": budget, "with": ratio, "without": without[budget]}
                    for budget, ratio in fitted.tokens_per_param.items()
                ],
            },
        )
    ]


def not_an_isoflop_sweep(isoflop: IsoflopFit | IsoflopUnavailable) -> list[Caveat]:
    """Budgets of an IsoFLOP fit that are cuts through runs of scattered compute (isoflop_fit.set_apart)."""
    if isinstance(isoflop, IsoflopUnavailable) or not isoflop.scattered:
        return []
    percent = 100 * (10**BUDGET_TOLERANCE_DECADES - 1)
    return [
        Caveat(
            NOT_AN_ISOFLOP_SWEEP,
            "The IsoFLOP fit (Approach 2) grouped runs that are not an IsoFLOP sweep: "
            f"{len(isoflop.scattered)} of the {len(isoflop.budgets)} budgets it used come within "
            f"{percent:.0f}% in compute of runs of the budgets beside them. Those are cuts through scattered "
            f"runs, not budgets the runs were trained at, and each profile mixes runs up to {percent:.0f}% "
            "apart in compute, so the exponent and optima are rougher than they look. The parametric fit "
            "takes every run as it is; Approach 2 wants several model sizes trained at each of a few budgets "
            "far apart.",
            {
                "budgets": list(isoflop.scattered),
                "budgets_used": len(isoflop.budgets),
                "tolerance_decades": BUDGET_TOLERANCE_DECADES,
            },
        )
    ]


def mfu_given(mfu: float) -> Caveat:
    return Caveat(
        MFU_GIVEN,
        f"The time and cost assume the MFU given ({mfu:g}) rather than the cluster model's prediction for a "
        "layout; leave mfu out to have the model choose the layout and predict the pace.",
        {"mfu": mfu},
    )


def implausibly_long_run(seconds: float, accelerators: int) -> list[Caveat]:
    """A run past LONGEST_RUN_DAYS (core/wall_clock.py, where the published runs it is measured against are
    cited): the planner chooses no such run while one within reach fits, so this is a run on the accelerators
    given, or the fastest when none is within reach."""
    if within_reach(seconds, None):
        return []
    days = seconds / SECONDS_PER_DAY
    return [
        Caveat(
            IMPLAUSIBLY_LONG_RUN,
            f"The run takes {days:.0f} days on {accelerators} accelerators, more than a year "
            f"({LONGEST_RUN_DAYS:.0f} days): the longest published pre-training runs took a few months "
            "(BLOOM 176B about 3.5, DeepSeek-V3 under 2), and the hardware would be a generation old before "
            "it ended. More accelerators (max_accelerators, when the planner chooses them) or less compute "
            "would bring it within reach.",
            {"days": days, "accelerators": accelerators, "longest_days": LONGEST_RUN_DAYS},
        )
    ]


def deprecated_layout_fields(names: list[str]) -> list[Caveat]:
    if not names:
        return []
    listed = ", ".join(names)
    return [
        Caveat(
            DEPRECATED_FIELD,
            f"{listed} now belong in layout (layout.{names[0]}); the top-level names still work and are "
            "taken as fixed layout fields.",
            {"fields": names, "use": [f"layout.{name}" for name in names]},
        )
    ]


def assumed_shape(shape: ModelShape) -> Caveat:
    return Caveat(
        ASSUMED_SHAPE,
        f"No shape was given, so the run is modelled on an assumed one: {shape.layers} layers of width "
        f"{shape.d_model} ({shape.heads} heads), a {shape.sequence_length}-token context and a "
        f"{shape.vocabulary}-token vocabulary"
        + (
            f", each of its MLPs {shape.experts} experts of width {shape.expert_ffn} of which a token goes "
            f"to {shape.experts_per_token}"
            if shape.mixture_of_experts
            else ""
        )
        + "; give shape for a closer estimate.",
        {
            "layers": shape.layers,
            "d_model": shape.d_model,
            "heads": shape.heads,
            "sequence_length": shape.sequence_length,
            "vocabulary": shape.vocabulary,
            **(
                {
                    "experts": shape.experts,
                    "experts_per_token": shape.experts_per_token,
                    "expert_ffn": shape.expert_ffn,
                }
                if shape.mixture_of_experts
                else {}
            ),
        },
    )


def assumed_network(hardware: str, machine: Machine) -> Caveat:
    return Caveat(
        ASSUMED_NETWORK,
        f"{hardware} does not give all of how it is installed, so the run assumes "
        f"{machine.accelerators_per_node} accelerators per node, "
        f"{machine.scale_up_bytes_per_second / 1e9:g} GB/s scale-up and "
        f"{machine.scale_out_bytes_per_second / 1e9:g} GB/s scale-out per accelerator and "
        f"{machine.memory_bandwidth_bytes_per_second / 1e12:.3g} TB/s of memory bandwidth where it does not "
        "say; set them on the hardware profile.",
        {
            "memory_bandwidth_bytes_per_second": machine.memory_bandwidth_bytes_per_second,
            "accelerators_per_node": machine.accelerators_per_node,
            "scale_up_bandwidth_bytes_per_second": machine.scale_up_bytes_per_second,
            "scale_out_bandwidth_bytes_per_second": machine.scale_out_bytes_per_second,
        },
    )


def uncalibrated_hardware(hardware: str, precision: str, gemm: float) -> Caveat:
    """No published or measured run calibrates what this hardware achieves of its peak at the precision:
    the model runs it at `gemm` (what its profile guesses, or the fraction of hardware nobody calibrated),
    and its interval is wider."""
    return Caveat(
        UNCALIBRATED_HARDWARE,
        f"No run calibrates {hardware} at {precision}: the cluster model assumes large GEMMs reach "
        f"{gemm:.3g} of its peak, as on hardware nobody calibrated; its figures are less certain. Calibrate "
        "on your own runs (POST /v1/calibrations) or set the profile's efficiency.",
        {"precision": precision, "matmul_efficiency": gemm},
    )


def unpriced_hardware(hardware: str) -> Caveat:
    """The hardware has no price per hour and the request gave none: time and hours, but no cost."""
    return Caveat(
        UNPRICED_HARDWARE,
        f"{hardware} has no price per hour: the answer has no cost, and a budget cannot be charged for it. "
        "Give price_per_hour and currency in the request, or set the profile's price.",
    )


def shape_scaled(given: ModelShape, used: ModelShape, params: float) -> Caveat:
    return Caveat(
        SHAPE_SCALED,
        f"The shape given has {given.params:.3g} parameters, not the run's {params:.3g}: the run is "
        f"modelled on it scaled to {used.layers} layers of width {used.d_model} ({used.heads} heads, "
        f"{used.params:.3g} parameters), its proportions kept.",
        {"layers": used.layers, "d_model": used.d_model, "heads": used.heads, "params": used.params},
    )


def calibrated(
    hardware: str, efficiency: float, default: float | None, runs: int, calibration_id: str
) -> Caveat:
    """The cluster model's large-GEMM efficiency for this hardware is the organisation's own, fitted to the
    measured throughput of its runs (core/calibrate.py), not the one its profile states (`default`; None in
    plans from before profiles stated one)."""
    stated = "" if default is None else f" (its profile: {default:.3g})"
    return Caveat(
        CALIBRATED,
        f"The cluster model ran at your own large-GEMM efficiency on {hardware}, {efficiency:.3g} of the "
        f"peak{stated}, calibrated on {runs} of your runs (calibration {calibration_id}).",
        {
            "calibration_id": calibration_id,
            "hardware": hardware,
            "matmul_efficiency": efficiency,
            "default_matmul_efficiency": default,
            "runs": runs,
        },
    )

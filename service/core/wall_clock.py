"""How long a whole run takes on a cluster, and how big a cluster a run needs.

Composes the step-time model (`performance`) and goodput (`goodput`): the best layout's step time times the
steps, divided by the useful fraction, is the wall-clock time; accelerator-hours and cost follow from it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from service.core import goodput as goodput_model
from service.core import performance
from service.core import validation as v
from service.core.frameworks import GENERIC, Framework
from service.core.performance import CALIBRATION, Calibration, Machine, Search
from service.core.shape import ModelShape

# A shape assumed for a model given only by its parameter count: width = 128 · layers (GPT-3 175B: 12288 =
# 128 · 96; Llama 3 405B: 16384 ≈ 130 · 126; Kaplan et al. 2020 §3.1 find the loss flat over a wide band of
# aspect ratios), heads of 128 dimensions, GELU MLP of 4·width, a 4 096-token context and a 128 000-token
# vocabulary: of the widths (heads a multiple of 8 past 8), the one whose whole layer count closest to the
# parameters (12·L·h² + 2·V·h) keeps width/layers nearest 128 (engine 2.5; `_score`).
ASSUMED_ASPECT_RATIO = 128
ASSUMED_HEAD_DIMENSION = 128
ASSUMED_SEQUENCE_LENGTH = 4096
ASSUMED_VOCABULARY = 128_000
SMALL_MODEL_PARAMS = 1e9
# Deepest shape a scaled one may have: ten times the deepest published transformers' (~1 000 layers).
MOST_LAYERS = 10_000
# Widest shape a scaled one may have: eight times the widest published dense model's (Megatron's 1T: 25 600).
LARGEST_WIDTH = 204_800
# Accelerator counts tried when the request leaves it to the planner: whole nodes, in steps of 2^(1/4).
COUNT_STEPS_PER_DOUBLING = 4
DEFAULT_MAX_ACCELERATORS = 32_768
# The longest run the planner chooses when no deadline is given, and past which any run is implausibly long
# (caveats.implausibly_long_run). The longest published LLM pre-training runs took a few months: BLOOM 176B
# about 3.5 on 384 A100s (BigScience 2022, arXiv:2211.05100: March to July 2022), DeepSeek-V3 under two on
# 2 048 H800s (DeepSeek-AI 2024, arXiv:2412.19437 §1). A year is three times the longest, and outlasts what
# it plans with: data-centre accelerators have come a generation every two years (A100 2020, H100 2022, B200
# 2024). Shorter would warn of runs a small cluster plausibly takes, and move what the planner has chosen for
# a model already chosen since engine 2.0, within a year.
LONGEST_RUN_DAYS = 365.0
SECONDS_PER_DAY = 86_400.0


# Shapes remembered per process, as searches are (performance.SEARCHES_REMEMBERED): a plan asks for the
# same size again with every estimate, revision and retry of it.
SHAPES_REMEMBERED = 4096


@functools.lru_cache(maxsize=SHAPES_REMEMBERED)
def assumed_shape(
    params: float, *, sequence_length: int = ASSUMED_SEQUENCE_LENGTH, heads_multiple: int = 1
) -> ModelShape:
    """A plausible decoder shape of about `params` parameters (see ASSUMED_ASPECT_RATIO), whose heads are a
    multiple of 8 and of `heads_multiple` (a tensor-parallel degree the request fixes)."""
    N = v.positive("params", params)
    # Below a billion parameters a 128 000-token vocabulary would be most of the model (and a floor under its
    # size), and heads in eights too coarse: such models are assumed without embeddings, in single heads.
    small = N < SMALL_MODEL_PARAMS
    template = ModelShape(
        layers=1,
        d_model=ASSUMED_HEAD_DIMENSION,
        heads=1,
        sequence_length=sequence_length,
        vocabulary=None if small else ASSUMED_VOCABULARY,
    )
    return _sized(template, N, ASSUMED_ASPECT_RATIO, heads_multiple if small else math.lcm(8, heads_multiple))


# A mixture of experts given only by its total and active parameters is assumed fine-grained, as DeepSeek-V3
# and Qwen3's are: each token goes to ASSUMED_EXPERTS_PER_TOKEN experts of 1/ASSUMED_EXPERTS_PER_TOKEN of the
# dense MLP's width each (granularity 8, Krajewski et al. 2024), so that the active parameters are a dense
# shape's.
ASSUMED_EXPERTS_PER_TOKEN = 8
# Most experts an assumed shape has: eight times DeepSeek-V3's 256 routed ones a layer.
MOST_EXPERTS = 2048


def assumed_moe_shape(params: float, active_params: float, *, heads_multiple: int = 1) -> ModelShape:
    """A plausible mixture-of-experts shape of about `params` parameters of which `active_params` are
    active: the assumed dense shape of `active_params`, its MLP in every layer split into fine-grained
    experts (ASSUMED_EXPERTS_PER_TOKEN), as many as make up the total."""
    total = v.positive("params", params)
    active = v.positive("active_params", active_params)
    if active > total:
        raise v.InvalidInput("active_params", f"cannot exceed params ({total:.4g}), got {active:.4g}")
    k = ASSUMED_EXPERTS_PER_TOKEN
    # Only the top-k active at first; then as many more experts as the rest of the parameters make.
    shape = designed_moe_shape(active, k, k, counts_embeddings=True, heads_multiple=heads_multiple)
    experts = max(k, round(k + (total - active) / (shape.layers * shape.expert_params)))
    if experts > MOST_EXPERTS:
        raise v.InvalidInput(
            "active_params",
            f"{active:.4g} active of {total:.4g} parameters would take {experts} experts a layer; the most "
            f"assumed is {MOST_EXPERTS} (give a shape)",
        )
    return dataclasses.replace(shape, experts=experts)


def assumed_shape_without_embeddings(params: float, *, heads_multiple: int = 1) -> ModelShape:
    """The assumed shape whose layers hold about `params` parameters, its embeddings on top: for a law whose
    N leaves the embeddings out (Kaplan et al. 2020; Krajewski et al. 2024)."""
    shape = assumed_shape(params, heads_multiple=heads_multiple)
    if shape.embedding_params == 0:
        return shape
    return assumed_shape(params + shape.embedding_params, heads_multiple=heads_multiple)


def designed_moe_shape(
    active_params: float,
    experts: int,
    experts_per_token: int,
    *,
    counts_embeddings: bool,
    heads_multiple: int = 1,
) -> ModelShape:
    """The fine-grained mixture of experts an MoE law sizes (Krajewski et al. 2024, §4): the assumed dense
    shape of `active_params` (with or without its embeddings, as the law counts them), its MLP in every
    layer split into `experts` of 1/`experts_per_token` of its width, `experts_per_token` of them a token."""
    dense = (
        assumed_shape(active_params, heads_multiple=heads_multiple)
        if counts_embeddings
        else assumed_shape_without_embeddings(active_params, heads_multiple=heads_multiple)
    )
    width = max(1, round(dense.ffn_width / experts_per_token))
    return dataclasses.replace(dense, experts=experts, experts_per_token=experts_per_token, expert_ffn=width)


def scaled_shape(shape: ModelShape, params: float, *, heads_multiple: int = 1) -> ModelShape:
    """`shape` grown or shrunk to about `params` parameters: its head size, key/value grouping, MLP ratio,
    activation, vocabulary, context and width-to-depth ratio kept, the key/value heads a multiple of
    `heads_multiple` (a tensor-parallel degree the request fixes)."""
    group = shape.heads // shape.key_value_heads
    return _sized(shape, params, shape.d_model / shape.layers, group * heads_multiple)


Candidate = tuple[bool, float, float, ModelShape]  # (aspect off by more than 2, |log params/N|, skew, shape)


def _score(candidate: Candidate) -> tuple[bool, float, float]:
    """What a sizing minimises: of the shapes within a factor of 2 of the aspect ratio, the aspect nearest
    (the parameters nearest on a tie); of those past it (when none is within), the parameters nearest.

    Nearest proportions first, not nearest parameters, because the nearest parameters switch between head
    counts every few tenths of a percent of N (each head count's whole layer count comes closest in turn),
    between shapes whose step times differ by up to 15%: two nearly equal models were laid out as different
    ones, and a budget's sizing could not converge on a shape (docs/decisions/0004). Nearest proportions
    keep a width over a whole stretch of N and add a layer at a time; the parameters stay within half a
    layer's worth of N (1% at 50 layers)."""
    off, error, skew, _ = candidate
    return (off, error, skew) if off else (off, skew, error)


def _sized(template: ModelShape, params: float, aspect: float, heads_step: int) -> ModelShape:
    """The shape of `template`'s proportions of about `params` parameters: for each head count (a multiple
    of `heads_step`), the layer count that comes closest; of those within a factor of 2 of the aspect ratio
    width/layers, the one whose width/layers is nearest it (`_score`). Layers are free, so the parameters
    come within half a layer's worth (the steps of a fixed aspect ratio, N ∝ L³, are 40% apart at 40 layers).

    Wider shapes have fewer (or as many) layers, so width/layers grows with the head count and the shapes
    within a factor of 2 of the aspect are a run of consecutive head counts: a bisection finds where it
    starts and only the run is scored, the same shape a scan of every head count chooses (`_sized_by_scan`,
    taken when no shape is within the factor)."""
    N = v.positive("params", params)
    heads_counts = _heads_counts(template, aspect, heads_step)
    scored: dict[int, Candidate | None] = {}  # the run's first head count is often the bisection's last

    def candidate_of(heads: int) -> Candidate | None:
        if heads not in scored:
            scored[heads] = _candidate(template, N, aspect, heads)
        return scored[heads]

    low, high = 0, len(heads_counts)
    while low < high:  # the first head count not too narrow for the aspect
        middle = (low + high) // 2
        candidate = candidate_of(heads_counts[middle])
        if candidate is None or (candidate[0] and candidate[3].d_model / candidate[3].layers < aspect):
            low = middle + 1
        else:
            high = middle
    best: Candidate | None = None
    for heads in heads_counts[low:]:
        candidate = candidate_of(heads)
        if candidate is None or candidate[0]:
            break  # past the run within the aspect
        if best is None or _score(candidate) < _score(best):
            best = candidate
    return _checked(best[3]) if best is not None else _sized_by_scan(template, N, aspect, heads_step)


def _sized_by_scan(template: ModelShape, params: float, aspect: float, heads_step: int) -> ModelShape:
    """`_sized` by scoring every head count: what it chooses, when no shape is within the aspect's factor."""
    N = v.positive("params", params)
    best: Candidate | None = None
    for heads in _heads_counts(template, aspect, heads_step):
        candidate = _candidate(template, N, aspect, heads)
        if candidate is not None and (best is None or _score(candidate) < _score(best)):
            best = candidate
    if best is None:
        raise v.InvalidInput("shape", f"has no proportions that scale to {N:.3g} parameters")
    return _checked(best[3])


def _heads_counts(template: ModelShape, aspect: float, heads_step: int) -> range:
    """The head counts a shape of `template`'s kind may have: multiples of `heads_step`, up to twice the
    width of a 1 024-layer model of the aspect (or the widest there is)."""
    per_head = template.d_model / template.heads  # width per head (a head's own width under latent attention)
    widest = min(2 * 1024 * aspect, LARGEST_WIDTH)
    # As many steps as fit, the quotient's rounding corrected: the last count is the last within the width.
    steps = int(widest / (heads_step * per_head))
    while (steps + 1) * heads_step * per_head <= widest:
        steps += 1
    while steps > 0 and steps * heads_step * per_head > widest:
        steps -= 1
    return range(heads_step, heads_step * steps + 1, heads_step)


def _candidate(template: ModelShape, N: float, aspect: float, heads: int) -> Candidate | None:
    """The shape of `heads` heads of `template`'s kind closest to N parameters, scored; None when it would
    take more than MOST_LAYERS layers (too narrow to be this size)."""
    unit, embedding_params, layer_params = _layer_of(template, heads)
    layers = max(1, round((N - embedding_params) / layer_params))
    if layers > MOST_LAYERS:
        return None
    dense = None if template.dense_layers is None else min(template.dense_layers, layers - 1)
    shape = _replaced(unit, layers=layers, dense_layers=dense if template.mixture_of_experts else None)
    skew = abs(math.log(unit.d_model / layers / aspect))
    return (skew > math.log(2), abs(math.log(shape.params / N)), skew, shape)


@functools.lru_cache(maxsize=SHAPES_REMEMBERED)
def _layer_of(template: ModelShape, heads: int) -> tuple[ModelShape, float, float]:
    """One layer of `template`'s kind with `heads` heads, and its embedding and layer parameters: what every
    size of that width shares (a sizing scores a dozen widths, and a budget's sizing the same ones for
    every size it tries). A mixture-of-experts template's experts, MLP and latent widths scale with the
    width, its head width stays; its dense first layers are put back by `_candidate`."""
    per_head = template.d_model / template.heads
    group = template.heads // template.key_value_heads

    def scaled(width_of_template: int | None, width: int) -> int | None:
        return (
            None if width_of_template is None else max(1, round(width_of_template / template.d_model * width))
        )

    width = round(heads * per_head)
    unit = _replaced(
        template,
        layers=1,
        d_model=width,
        heads=heads,
        kv_heads=None if template.kv_heads is None else heads // group,
        ffn=max(1, round(template.ffn_width / template.d_model * width)),
        expert_ffn=scaled(template.expert_ffn, width),
        kv_lora_rank=scaled(template.kv_lora_rank, width),
        q_lora_rank=scaled(template.q_lora_rank, width),
        dense_layers=None,
        micro_batch=1,
    )
    return unit, unit.embedding_params, unit.layer_params


def _replaced(shape: ModelShape, **changes: Any) -> ModelShape:
    """A candidate of a sizing: `shape` with `changes`, built without ModelShape's checks of each field (a
    sizing builds two shapes for each of a dozen head counts, and the checks were half of its time). The
    shape a sizing chooses is checked: `_checked`."""
    candidate = object.__new__(ModelShape)
    # Every field of a ModelShape is an init field and its only attribute, so this is the instance
    # ModelShape(**fields) would be, but for its __post_init__.
    candidate.__dict__.update(vars(shape), **changes)
    return candidate


def _checked(shape: ModelShape) -> ModelShape:
    """The candidate a sizing chose, as ModelShape checks it: an error names the field as it would have."""
    return ModelShape(**vars(shape))


@dataclass(frozen=True)
class ClusterRun:
    """A run of `tokens` on `accelerators`: the layout chosen, its steps and the wall-clock time."""

    accelerators: int
    search: Search
    steps: int
    tokens_per_step: int
    training_seconds: float
    goodput: goodput_model.Goodput

    @property
    def seconds(self) -> float:
        return self.goodput.wall_clock_seconds

    @property
    def accelerator_hours(self) -> float:
        return self.accelerators * self.seconds / 3600.0


@dataclass(frozen=True)
class Reliability:
    """What goodput needs besides the run: failure rate, checkpoint storage, restart time."""

    failures_per_accelerator_hour: float = goodput_model.LLAMA3_FAILURES_PER_ACCELERATOR_HOUR
    checkpoint_write_bytes_per_second: float = goodput_model.DEFAULT_CHECKPOINT_WRITE_BYTES_PER_SECOND
    restart_seconds: float = goodput_model.DEFAULT_RESTART_SECONDS
    run_overhead: float = goodput_model.DEFAULT_RUN_OVERHEAD
    # A spot offer's: the provider's preemptions, and how long each waits for capacity (core/goodput.py).
    preemptions_per_accelerator_hour: float = 0.0
    requeue_seconds: float = 0.0


def run_on_cluster(
    params: float,
    tokens: float,
    shape: ModelShape,
    machine: Machine,
    accelerators: int,
    *,
    global_batch: int,
    layout: Mapping[str, Any] | None = None,
    reliability: Reliability = Reliability(),
    precision: str = "bf16",
    optimizer: str = "adam",
    calibration: Calibration = CALIBRATION,
    framework: Framework = GENERIC,
) -> ClusterRun:
    """The best layout of `accelerators` for the fields `layout` leaves out, and the run's wall-clock time:
    ceil(tokens / tokens per step) steps of the best layout's step time, over goodput's useful fraction."""
    D = v.positive("tokens", tokens)
    found = performance.search(
        shape,
        machine,
        accelerators,
        global_batch=global_batch,
        fixed=dict(layout or {}),
        precision=precision,
        optimizer=optimizer,
        calibration=calibration,
        framework=framework,
    )
    tokens_per_step = found.best.layout.global_batch * shape.sequence_length
    steps = max(1, math.ceil(D / tokens_per_step))
    training = steps * found.best.seconds
    useful = goodput_of(training, accelerators, params, reliability)
    return ClusterRun(accelerators, found, steps, tokens_per_step, training, useful)


def goodput_of(
    training_seconds: float, accelerators: int, params: float, reliability: Reliability
) -> goodput_model.Goodput:
    """The goodput of `training_seconds` of steps on `accelerators` as `reliability` says it goes."""
    return goodput_model.goodput(
        training_seconds,
        accelerators,
        params,
        failures_per_accelerator_hour=reliability.failures_per_accelerator_hour,
        checkpoint_write_bytes_per_second=reliability.checkpoint_write_bytes_per_second,
        restart_seconds=reliability.restart_seconds,
        run_overhead=reliability.run_overhead,
        preemptions_per_accelerator_hour=reliability.preemptions_per_accelerator_hour,
        requeue_seconds=reliability.requeue_seconds,
    )


Tried = TypeVar("Tried")


def within_reach(seconds: float, days: float | None) -> bool:
    """Whether a run of `seconds` is one the planner may choose: within the deadline `days`, or without
    one within LONGEST_RUN_DAYS."""
    return seconds <= (LONGEST_RUN_DAYS if days is None else days) * SECONDS_PER_DAY


def chosen(
    tried: Sequence[Tried],
    seconds: Callable[[Tried], float],
    best: Callable[[Sequence[Tried]], Tried],
    *,
    days: float | None,
) -> Tried:
    """The accelerator-count policy, the same for a model already chosen (`choose_accelerators`) and for a
    budget (engine.sizing): of the runs `tried` (on `candidate_counts` that fit, fewest accelerators first),
    those within reach (`within_reach`: the deadline, or LONGEST_RUN_DAYS) compete and `best` picks among
    them, by what the request wants most (the fewest accelerators by a deadline, the fewest
    accelerator-hours, the most compute a budget buys); when none is within reach, the fastest."""
    within = [run for run in tried if within_reach(seconds(run), days)]
    return best(within) if within else min(tried, key=seconds)


def candidate_counts(accelerators_per_node: int, most: int, multiple: int = 1) -> list[int]:
    """Accelerator counts to try: 1, 2, 4 … up to a node, then whole nodes growing by about 2^(1/4); of
    those, only multiples of `multiple` (an offer's instance: the accelerators rented together), and in
    steps of whole instances where an instance is larger than a node."""
    node = accelerators_per_node
    unit = math.lcm(node, multiple)
    small = (c for c in (1, 2, 4, 8, 16, 32, 64) if c <= min(node, most) and node % c == 0)
    counts = {c for c in small if c % multiple == 0}
    units, limit = 1, max(1, most // unit)
    while units <= limit:
        counts.add(units * unit)
        units = max(units + 1, round(units * 2 ** (1 / COUNT_STEPS_PER_DOUBLING)))
    return sorted(counts)


@dataclass(frozen=True)
class Sizing:
    """The cluster size the planner chose, and why."""

    run: ClusterRun
    chosen_by: str  # days (the fewest that finish in time) or cost (the cheapest)
    max_accelerators: int
    tried: int


def choose_accelerators(
    run_at: Callable[[int], ClusterRun],
    accelerators_per_node: int,
    *,
    days: float | None,
    max_accelerators: int = DEFAULT_MAX_ACCELERATORS,
    count_multiple: int = 1,
) -> Sizing:
    """The count `chosen` for a model already chosen, up to `max_accelerators` (of `candidate_counts`, in
    multiples of `count_multiple`): the fewest accelerators whose run finishes within `days`, or, without a
    deadline, the fewest accelerator-hours (the cheapest at one price) among runs within LONGEST_RUN_DAYS.
    `run_at(count)` runs the search at a count and raises InvalidInput where no layout fits; such counts are
    skipped."""
    most = v.whole("max_accelerators", max_accelerators)
    runs: list[ClusterRun] = []
    for count in candidate_counts(accelerators_per_node, most, count_multiple):
        try:
            runs.append(run_at(count))
        except v.InvalidInput:
            continue
        if days is not None and within_reach(runs[-1].seconds, days):
            break  # the fewest that finish in time: more accelerators cannot be chosen
    if not runs:
        raise v.InvalidInput(
            "max_accelerators",
            f"no layout of up to {most} accelerators fits the model in memory; allow more accelerators",
        )
    if days is None:
        # The cheapest run is usually the smallest cluster, which may take years.
        cheapest = chosen(runs, _seconds, lambda within: min(within, key=_hours_then_seconds), days=None)
        return Sizing(cheapest, "cost", most, len(runs))
    fewest = chosen(runs, _seconds, lambda within: within[0], days=days)
    if not within_reach(fewest.seconds, days):  # the fastest, then
        raise v.InvalidInput(
            "days",
            f"no cluster of up to {most} accelerators finishes within {days:g} days: the fastest, "
            f"{fewest.accelerators} accelerators, takes {fewest.seconds / SECONDS_PER_DAY:.1f} days; allow "
            "more accelerators (max_accelerators) or more days",
        )
    return Sizing(fewest, "days", most, len(runs))


def _seconds(run: ClusterRun) -> float:
    return run.seconds


def _hours_then_seconds(run: ClusterRun) -> tuple[float, float]:
    return run.accelerator_hours, run.seconds

"""The layouts a search looks at, and how it ranks them: the part of `performance.search` that needs no
step model.

`performance.search` checks the fields a request fixes, takes every layout of the accelerators that honours
them (`candidates`), evaluates them all (`in_blocks`), and returns the fastest that fits with the fastest of
a few other splits of the model (`ranked`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from service.core import validation as v
from service.core.frameworks import GENERIC, Framework
from service.core.memory import RECOMPUTATION_MODES, ZERO_STAGES
from service.core.shape import ModelShape

Array = npt.NDArray[np.float64]
Columns = dict[str, Any]  # one array per layout field, as `performance.evaluate` takes them

# What the search tries for the fields a request leaves out.
MICRO_BATCHES = (1, 2, 4, 8, 16)
INTERLEAVES = (1, 2, 4, 8)
# Layouts returned beside the best: the fastest of each other tensor/pipeline split.
ALTERNATIVES = 4
# Layouts evaluated at once. Past about 2 800 (arrays of 23 KB) an evaluation took three times as long per
# layout on a 2-core AMD EPYC with 1 MB of L2 a core (a glibc heap; 0.46 ms at 2 800 layouts, 1.4 ms at
# 2 900): its temporaries no longer stay in cache. A search of more is evaluated in blocks, which changes no
# value (every formula is element by element).
EVALUATE_BLOCK = 2048


def candidates(
    shape: ModelShape,
    accelerators_per_node: int,
    count: int,
    fixed: dict[str, Any],
    global_batch: int,
    *,
    framework: Framework = GENERIC,
) -> Columns:
    """Every layout of `count` accelerators that honours `fixed` (already checked) and that `framework` can
    run, as columns: the splits (`splits`), each with every expert-parallel degree, recomputation mode and
    ZeRO stage left open, in that order (the search breaks ties by it). Sequence parallelism and
    FlashAttention are on and context parallelism 1 unless fixed; expert_overlap is -1 (whichever is faster)
    where the framework implements it and the request leaves it open. Raises InvalidInput on `layout` when
    no split honours `fixed`."""
    fixed = framework.fixed(fixed)
    c = int(fixed.get("context_parallel", 1))
    rows = splits(shape, accelerators_per_node, count, fixed, int(fixed.get("global_batch", global_batch)))
    if not rows:
        raise v.InvalidInput("layout", no_layout_text(shape, accelerators_per_node, count, fixed))

    def options(name: str, default: list[Any]) -> list[Any]:
        return [fixed[name]] if name in fixed else default

    # Expert parallelism over the divisors of the data-parallel degree that divide the experts: 1 for a
    # dense shape, the only degree it may have (check_model_fields).
    if shape.mixture_of_experts:
        degrees: dict[int, list[int]] = {}  # by data-parallel degree
        for row in rows:
            if row[2] not in degrees:
                degrees[row[2]] = options("expert_parallel", expert_degrees(shape, row[2]))
        rows = [(*row, e) for row in rows for e in degrees[row[2]] if row[2] % e == 0]
        if not rows:
            raise v.InvalidInput("layout", no_layout_text(shape, accelerators_per_node, count, fixed))
    else:
        rows = [(*row, 1) for row in rows]
    base = np.array(rows, dtype=np.int64)
    modes = options("recomputation", list(RECOMPUTATION_MODES))
    stages = options("zero_stage", [stage for stage in ZERO_STAGES if stage in framework.zero_stages])
    overlap = int(fixed["expert_overlap"]) if "expert_overlap" in fixed else -1  # -1: the faster
    extra = np.array(
        [(RECOMPUTATION_MODES.index(mode), stage) for mode in modes for stage in stages], dtype=np.int64
    )
    grid = np.repeat(base, len(extra), axis=0)
    extras = np.tile(extra, (len(base), 1))
    return {
        "tensor_parallel": grid[:, 0],
        "pipeline_parallel": grid[:, 1],
        "data_parallel": grid[:, 2],
        "micro_batch": grid[:, 3],
        "global_batch": grid[:, 4],
        "interleave": grid[:, 5],
        "expert_parallel": grid[:, 6],
        "context_parallel": np.full(len(grid), c),
        "sequence_parallel": np.full(len(grid), bool(fixed.get("sequence_parallel", True))),
        "recomputation": extras[:, 0],
        "zero_stage": extras[:, 1],
        "flash_attention": np.full(len(grid), bool(fixed.get("flash_attention", True))),
        "expert_overlap": np.full(len(grid), overlap),
        "tensor_parallel_overlap": np.full(len(grid), bool(fixed["tensor_parallel_overlap"])),
    }


def in_blocks(evaluate: Callable[[Columns], dict[str, Array]], columns: Columns) -> dict[str, Array]:
    """`evaluate` over `columns`, in blocks of at most EVALUATE_BLOCK layouts."""
    size = len(columns["tensor_parallel"])
    if size <= EVALUATE_BLOCK:
        return evaluate(columns)
    blocks = -(-size // EVALUATE_BLOCK)
    bounds = [size * i // blocks for i in range(blocks + 1)]  # equal blocks
    parts = [
        evaluate({name: column[start:end] for name, column in columns.items()})
        for start, end in itertools.pairwise(bounds)
    ]
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def ranked(columns: Columns, result: dict[str, Array]) -> tuple[int, list[int]]:
    """The best layout that fits (the fastest; ties: less memory) and the alternatives: the fastest of each
    other tensor/pipeline/expert split, at most ALTERNATIVES, fastest first. Some layout must fit."""
    fits = np.flatnonzero(result["fits"])
    order = fits[np.lexsort((result["memory_bytes"][fits], result["seconds"][fits]))]
    best = int(order[0])
    alternatives: list[int] = []
    seen = {_family(columns, best)}
    for index in order[1:]:
        family = _family(columns, int(index))
        if family not in seen:
            seen.add(family)
            alternatives.append(int(index))
        if len(alternatives) == ALTERNATIVES:
            break
    return best, alternatives


def splits(
    shape: ModelShape, accelerators_per_node: int, count: int, fixed: dict[str, Any], target_batch: int
) -> list[tuple[int, ...]]:
    """(t, p, d, micro-batch, global batch, interleave) of every split of `count` that honours `fixed`, in
    the order tensor, pipeline, micro-batch, interleave (the search breaks ties by it)."""
    v.whole("layout.global_batch", target_batch)
    c = int(fixed.get("context_parallel", 1))
    layers = shape.layers
    fixed_p = fixed.get("pipeline_parallel")
    fixed_d = fixed.get("data_parallel")
    fixed_vi = fixed.get("interleave")
    micro_batches = [fixed["micro_batch"]] if "micro_batch" in fixed else MICRO_BATCHES
    batch_fixed = "global_batch" in fixed
    tensor = (
        [fixed["tensor_parallel"]]
        if "tensor_parallel" in fixed
        else tensor_degrees(shape, accelerators_per_node)
    )

    rows: list[tuple[int, ...]] = []
    for t in tensor:
        if count % (t * c):
            continue
        rest = count // (t * c)
        for p in [fixed_p] if fixed_p is not None else divisors(rest, layers):
            d = rest // p
            if rest % p or (fixed_d is not None and fixed_d != d):
                continue
            batch = target_batch if batch_fixed else -(-target_batch // d) * d
            if batch % d:  # a fixed batch the replicas cannot share
                continue
            replica = batch // d
            chunks = -(-layers // p)
            for b in micro_batches:
                if replica % b:
                    continue
                # An interleaved schedule needs a pipeline, micro-batches in multiples of its stages and
                # no more chunks than layers per stage.
                interleaved = p > 1 and (replica // b) % p == 0
                if fixed_vi is None:
                    interleaves = [x for x in INTERLEAVES if x <= chunks] if interleaved else [1]
                elif fixed_vi == 1 or (interleaved and fixed_vi <= chunks):
                    interleaves = [fixed_vi]
                else:
                    continue
                rows += [(t, p, d, b, batch, vi) for vi in interleaves]
    return rows


def splits_heads(shape: ModelShape, tensor_parallel: int) -> bool:
    """Whether Megatron can split the attention `tensor_parallel` ways: the degree divides the heads, and
    divides the key/value heads or is a multiple of them (each rank then holds one K/V head, replicated;
    latent attention's latents are not split by heads)."""
    t, kv = tensor_parallel, shape.key_value_heads
    if shape.heads % t:
        return False
    return shape.latent_attention or kv % t == 0 or t % kv == 0


def tensor_degrees(shape: ModelShape, accelerators_per_node: int) -> list[int]:
    """Tensor-parallel degrees Megatron can use: divisors of the node that split the heads."""
    node = accelerators_per_node
    return [t for t in range(1, node + 1) if node % t == 0 and splits_heads(shape, t)]


def divisors(n: int, most: int) -> list[int]:
    """The divisors of n up to `most`, ascending (by trial up to √n rather than up to `most`)."""
    small, large = [], []
    k = 1
    while k * k <= n:
        if n % k == 0:
            small.append(k)
            if k * k != n:
                large.append(n // k)
        k += 1
    return [k for k in small + large[::-1] if k <= most]


def expert_degrees(shape: ModelShape, data_parallel: int) -> list[int]:
    """Expert-parallel degrees the search tries: the powers of two that divide the data-parallel degree
    and the experts (1 if dense). Others that divide both can be given."""
    experts = shape.experts or 1
    degrees, e = [], 1
    while e <= min(experts, data_parallel) and experts % e == 0 and data_parallel % e == 0:
        degrees.append(e)
        e *= 2
    return degrees


def no_layout_text(shape: ModelShape, accelerators_per_node: int, count: int, fixed: dict[str, Any]) -> str:
    given = ", ".join(f"{name} {value}" for name, value in sorted(fixed.items())) or "no fields"
    degrees = ", ".join(str(t) for t in tensor_degrees(shape, accelerators_per_node))
    return (
        f"no layout of {count} accelerators has {given}: tensor parallelism must divide a node of "
        f"{accelerators_per_node} and the heads ({degrees} would), the degrees must multiply to "
        f"{count}, and the micro-batch must divide each replica's batch"
    )


def _family(columns: Columns, i: int) -> tuple[int, int, int]:
    """Alternatives split the model another way (tensor, pipeline and expert degrees), the fastest of each."""
    return (
        int(columns["tensor_parallel"][i]),
        int(columns["pipeline_parallel"][i]),
        int(columns["expert_parallel"][i]),
    )

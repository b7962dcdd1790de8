"""The documents a plan keeps, as JSON: its `inputs` (the request it evaluated), a `snapshot` of what the
evaluation used (the hardware's figures and the price in force, the law's coefficients, the engine version)
and its `result` (the allocation document, which POST /v1/allocations answers with too).

Plans are immutable and are evaluated again from their inputs and snapshot (`flask plans verify`): these
shapes are kept by every plan ever stored, so a change here is a change to what old plans mean. The API
describes them (service/schemas/planning_documents.py) and shows them as they are made here.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from decimal import Decimal
from typing import Any

from service.core import allocate, caveats, engine, frameworks, performance
from service.core.hyper import Hyperparameters
from service.core.laws import FittedRange, MoEDesign, ScalingLaw
from service.core.memory import MemoryEstimate
from service.core.shape import SERVING_BYTES_PER_PARAM, ModelShape
from service.data.catalog import PRECISIONS
from service.services import energy, planning
from service.services.documents import JsonObject, format_optional_money, from_document, to_document
from service.services.planning import PlanInputs

HYPERPARAMETERS_NOTE = "A starting point fitted on small budgets, not a prescription."
INFERENCE_MINIMISES = "lifetime_flops"  # what an inference-aware allocation minimises
LAW_COEFFICIENTS = tuple(field.name for field in dataclasses.fields(ScalingLaw))  # E, A, B, alpha, beta
# How the hardware is installed in a cluster (engine.Hardware's fields of the same names); None: not given.
CLUSTER_FIGURES = (
    "accelerators_per_node",
    "scale_up_bandwidth_bytes_per_second",
    "scale_out_bandwidth_bytes_per_second",
    "failures_per_accelerator_hour",
    "run_overhead",
)


# --- Inputs -------------------------------------------------------------------------------------------------


def inputs_document(inputs: PlanInputs) -> dict[str, Any]:
    document: dict[str, Any] = to_document(inputs)
    return document


def plan_inputs(document: JsonObject) -> PlanInputs:
    return from_document(PlanInputs, document)


# --- Snapshot -----------------------------------------------------------------------------------------------


def snapshot_document(
    hardware: engine.Hardware,
    price_effective_at: datetime | None,
    law: engine.NamedLaw | None,
    serving: tuple[engine.Hardware, datetime | None] | None = None,
    *,
    own_calibration: dict[str, Any] | None = None,
    energy_setting: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What an evaluation depends on besides its inputs. `serving`: the inference hardware and when its
    price took effect, when the plan serves on hardware of its own. `hardware` with the organisation's own
    efficiency when it has calibrated one and the model set the pace; `own_calibration` then says which
    (`own_calibration_document`). `energy_setting`: what the run's energy rests on (the hardware's power,
    the site's PUE and grid: services/energy.py), kept under `energy`."""
    return {
        **({} if energy_setting is None else {"energy": energy_setting}),
        "engine_version": engine.ENGINE_VERSION,
        "cluster_model": {
            "version": performance.MODEL_VERSION,
            "calibration": performance.CALIBRATION.as_dict(),
            "organization_calibration": own_calibration,
        },
        "hardware": _hardware_snapshot(hardware, price_effective_at),
        "inference_hardware": None if serving is None else _hardware_snapshot(*serving),
        "law": None
        if law is None
        else {
            "slug": law.slug,
            "name": law.name,
            "source": law.source,
            "note": law.note,
            **{name: getattr(law.law, name) for name in LAW_COEFFICIENTS},
            "fitted_range": None if law.fitted_range is None else vars(law.fitted_range).copy(),
            "counts_embeddings": law.counts_embeddings,
            "moe": None if law.moe is None else dataclasses.asdict(law.moe),
        },
    }


def _hardware_snapshot(hardware: engine.Hardware, price_effective_at: datetime | None) -> dict[str, Any]:
    return {
        "slug": hardware.slug,
        "name": hardware.name,
        "peak_flops": dict(hardware.peak_flops),
        "memory_bytes": hardware.memory_bytes,
        "memory_bandwidth_bytes_per_second": hardware.memory_bandwidth_bytes_per_second,
        **{name: getattr(hardware, name) for name in CLUSTER_FIGURES},
        "run_overhead_source": hardware.run_overhead_source,
        "efficiency": None if hardware.efficiency is None else hardware.efficiency.as_dict(),
        "price_per_hour": format_optional_money(hardware.price_per_hour),
        "currency": hardware.currency,
        "price_effective_at": None if price_effective_at is None else price_effective_at.isoformat(),
    }


def snapshot_hardware(snapshot: JsonObject, role: str = "hardware") -> engine.Hardware | None:
    """The hardware a snapshot holds for `role` (hardware or inference_hardware). Snapshots of engines
    before 1.3.0 hold no inference hardware and no memory bandwidth: those plans served nothing. Snapshots
    from before the cluster figures hold none of them: not given, as for hardware that does not say.
    Snapshots from before efficiencies were the hardware's (issue 48) ran at the efficiency their constants
    gave the slug's prefix (`_legacy_efficiency`)."""
    hardware = snapshot.get(role)
    if hardware is None:
        return None
    if "efficiency" in hardware:
        stated = hardware["efficiency"]
        efficiency = None if stated is None else performance.Efficiency(**stated)
    else:
        efficiency = _legacy_efficiency(snapshot, hardware)
    price = hardware["price_per_hour"]
    return engine.Hardware(
        name=hardware["name"],
        slug=hardware["slug"],
        peak_flops=hardware["peak_flops"],
        memory_bytes=hardware["memory_bytes"],
        price_per_hour=None if price is None else Decimal(price),
        currency=hardware["currency"],
        memory_bandwidth_bytes_per_second=hardware.get("memory_bandwidth_bytes_per_second"),
        **{name: hardware.get(name) for name in CLUSTER_FIGURES},
        run_overhead_source=hardware.get("run_overhead_source"),
        efficiency=efficiency,
    )


def _legacy_efficiency(snapshot: JsonObject, hardware: JsonObject) -> performance.Efficiency | None:
    """What a snapshot from before issue 48 ran the hardware at: its constants' efficiency for the first
    slug prefix its slug starts with (the organisation's own first), at every precision; None where no
    prefix matched (it ran at the constants' default, as uncalibrated hardware does now)."""
    model = snapshot.get("cluster_model") or {}
    by_prefix = (model.get("calibration") or {}).get("matmul_efficiency_by_hardware") or {}
    slug = hardware.get("slug")
    for prefix, value in by_prefix.items():
        if slug is not None and slug.startswith(prefix):
            return performance.Efficiency(
                gemm=dict.fromkeys(hardware["peak_flops"], value),
                provenance="calibrated",
                basis=f"cluster model {model.get('version')}'s constants for {prefix}",
            )
    return None


def snapshot_calibration(snapshot: JsonObject) -> performance.Calibration:
    """The cluster model's constants a plan was evaluated with (the current ones for snapshots before 2.0,
    which never used them: they replay at their MFU). Before issue 48 the constants also held efficiencies
    by slug prefix: those are the hardware's now (`snapshot_hardware`)."""
    model = snapshot.get("cluster_model")
    if model is None:
        return performance.CALIBRATION
    constants = dict(model["calibration"])
    constants.pop("matmul_efficiency_by_hardware", None)
    return performance.Calibration(**constants)


def own_calibration_document(
    calibration_id: str,
    hardware: str,
    efficiency: float,
    *,
    default: float | None,
    runs: int,
    created_at: datetime,
    run_overhead: float | None = None,
) -> dict[str, Any]:
    """The organisation's calibration a plan used, as its snapshot names it (its efficiency is already the
    snapshot's hardware's: this says where it came from, and what the profile states, `default`)."""
    return {
        "id": calibration_id,
        "hardware": hardware,
        "matmul_efficiency": efficiency,
        "default_matmul_efficiency": default,
        "runs": runs,
        "run_overhead": run_overhead,
        "created_at": created_at.isoformat(),
    }


def snapshot_own_calibration(snapshot: JsonObject) -> dict[str, Any] | None:
    """The organisation's calibration a plan used; None for plans at the published constants (and every
    plan from before calibrations)."""
    model = snapshot.get("cluster_model") or {}
    own: dict[str, Any] | None = model.get("organization_calibration")
    return own


def replay(inputs: JsonObject, snapshot: JsonObject, samples: tuple[ScalingLaw, ...] = ()) -> engine.Plan:
    """The engine's plan of `inputs` (as stored) evaluated against `snapshot` and the bootstrap fits of its
    law (`samples`): pure."""
    request = plan_inputs(inputs)
    if replays_at_default_mfu(snapshot) and request.mfu is None:
        request = dataclasses.replace(request, mfu=engine.DEFAULT_MFU)
    return planning.allocate_on(
        request,
        snapshot_hardware(snapshot),
        snapshot_law(snapshot, samples),
        snapshot_hardware(snapshot, "inference_hardware"),
        snapshot_calibration(snapshot),
    )


def result_document(plan: engine.Plan, snapshot: JsonObject) -> dict[str, Any]:
    """A plan's result: the allocation document, and a caveat when the cluster model ran at the
    organisation's own calibration (which the snapshot names). Its estimate's energy is the snapshot's
    (plans made before energy was modelled have none, and show none)."""
    document = allocation_document(energy.plan_with_energy(plan, snapshot.get("energy")))
    own = snapshot_own_calibration(snapshot)
    if own is not None:
        default = own.get("default_matmul_efficiency")
        note = caveats.calibrated(own["hardware"], own["matmul_efficiency"], default, own["runs"], own["id"])
        document["warnings"].append(_caveats([note])[0])
    return document


def replays_at_default_mfu(snapshot: JsonObject) -> bool:
    """Plans of engines before 2.0 that gave no MFU ran at the default one: they replay so."""
    return int(str(snapshot.get("engine_version", "1.0.0")).split(".")[0]) < 2


def snapshot_law(snapshot: JsonObject, samples: tuple[ScalingLaw, ...]) -> engine.NamedLaw | None:
    """The law a snapshot holds, with the bootstrap fits of the fitted law it came from (`samples`)."""
    law = snapshot["law"]
    if law is None:
        return None
    fitted = law["fitted_range"]
    moe = law.get("moe")  # snapshots from before mixture-of-experts laws hold neither: dense, all counted
    return engine.NamedLaw(
        ScalingLaw(**{name: law[name] for name in LAW_COEFFICIENTS}),
        slug=law["slug"],
        name=law["name"],
        source=law["source"],
        fitted_range=None if fitted is None else FittedRange(**fitted),
        note=law["note"],
        samples=samples,
        counts_embeddings=law.get("counts_embeddings", True),
        moe=None if moe is None else MoEDesign(**moe),
    )


# --- Result: the allocation document ------------------------------------------------------------------------
# Numbers as JSON numbers (float() and int() also turn numpy's into Python's), money as decimal strings.


def allocation_document(plan: engine.Plan) -> dict[str, Any]:
    allocation = plan.allocation
    return {
        "method": plan.method,
        "params": float(allocation.params),
        "tokens": float(allocation.tokens),
        "tokens_per_param": float(allocation.tokens_per_param),
        "flops": float(allocation.flops),
        "pf_days": float(plan.pf_days),
        "predicted_loss": _number(allocation.predicted_loss),
        "unique_tokens": _number(allocation.unique_tokens),
        "epochs": _number(allocation.epochs),
        "active_params": _number(allocation.active_params),
        "experts": allocation.experts,
        "experts_per_token": allocation.experts_per_token,
        "limits": [
            {
                "kind": limit.kind,
                "flops": float(limit.flops),
                "binding": limit.binding,
                "unspent": _number(limit.unspent),
            }
            for limit in plan.limits
        ],
        "law": None if plan.law is None else law_document(plan.law),
        "inference": None if plan.inference is None else _inference(plan.inference),
        "estimate": None if plan.estimate is None else estimate_document(plan.estimate),
        "hyperparameters": _hyperparameters(plan.hyperparameters),
        "warnings": _caveats(plan.caveats),
        "intervals": None if plan.intervals is None else _intervals(plan.intervals),
        "engine_version": engine.ENGINE_VERSION,
    }


def _limit(limit: engine.Limit) -> dict[str, Any]:
    return {"kind": limit.kind, "flops": float(limit.flops), "binding": limit.binding}


def law_document(law: engine.NamedLaw) -> dict[str, Any]:
    coefficients = law.law  # with the allocation constants a, b and G it implies
    return {
        "slug": law.slug,
        "name": law.name,
        "source": law.source,
        "note": law.note,
        **{
            name: float(getattr(coefficients, name))
            for name in ("E", "A", "B", "alpha", "beta", "a", "b", "G")
        },
        "fitted_range": None if law.fitted_range is None else _fitted_range(law.fitted_range),
        "counts_embeddings": law.counts_embeddings,
    }


def _fitted_range(fitted: FittedRange) -> dict[str, float | None]:
    return {name: _number(value) for name, value in vars(fitted).items()}


def estimate_document(estimate: engine.Estimate) -> dict[str, Any]:
    """Time, cost and memory of a run: POST /v1/estimates, and the `estimate` of an allocation on hardware."""
    runtime, on = estimate.runtime, estimate.cluster
    return {
        "params": float(estimate.params),
        "tokens": float(estimate.tokens),
        "flops": float(runtime.flops),
        "hardware_flops": float(estimate.hardware_flops),
        "pf_days": float(runtime.pf_days),
        "seconds": float(runtime.seconds),
        "days": float(runtime.days),
        "accelerator_hours": float(runtime.accelerator_hours),
        "hardware": {
            "slug": on.hardware.slug,
            "name": on.hardware.name,
            "peak_flops": {
                precision: float(on.hardware.peak_flops[precision])
                for precision in PRECISIONS
                if precision in on.hardware.peak_flops
            },
            "memory_bytes": float(on.hardware.memory_bytes),
        },
        "accelerators": int(estimate.accelerators),
        "mfu": float(estimate.mfu),
        "precision": on.precision,
        "peak_flops_per_second": float(on.peak_flops_per_second),
        "price_per_hour": format_optional_money(estimate.price_per_hour),
        "cost": format_optional_money(estimate.cost),
        "currency": estimate.currency,
        "memory": _memory(estimate.memory),
        "performance": None if estimate.run is None else _performance(estimate),
        "predicted_loss": _number(estimate.predicted_loss),
        "intervals": _run_intervals(estimate.intervals),
        "warnings": _caveats(estimate.caveats),
        # Left out, rather than null, in plans made before energy was modelled: they show what they showed.
        **({} if estimate.energy is None else {"energy": energy.energy_document(estimate.energy)}),
    }


def _run_intervals(intervals: engine.RunIntervals | None) -> dict[str, Any] | None:
    if intervals is None:
        return None
    return {
        "confidence": float(intervals.confidence),
        "categories": list(intervals.categories),
        "step_seconds": _pair(intervals.step_seconds),
        "days": _pair(intervals.days),
        "accelerator_hours": _pair(intervals.accelerator_hours),
        "cost": None
        if intervals.cost is None
        else [format_optional_money(value) for value in intervals.cost],
    }


def _performance(estimate: engine.Estimate) -> dict[str, Any]:
    """The cluster model's answer: the step of the chosen layout, its alternatives, goodput and sizing."""
    run = estimate.run
    assert run is not None
    best = run.search.best
    useful = run.goodput
    shape = estimate.shape
    assert shape is not None, "a modelled run has its shape"
    return {
        "model_version": performance.MODEL_VERSION,
        "framework": frameworks.framework_named(estimate.cluster.framework).name,
        "hardware_efficiency": _efficiency_used(estimate.cluster),
        "step_seconds": float(best.seconds),
        "steps": int(run.steps),
        "tokens_per_step": int(run.tokens_per_step),
        "training_seconds": float(run.training_seconds),
        "tokens_per_second_per_accelerator": float(
            best.tokens_per_second_per_accelerator(shape.sequence_length)
        ),
        "mfu": float(best.mfu),
        "hfu": float(best.hfu),
        "breakdown": {part: float(seconds) for part, seconds in best.breakdown.items()},
        "layout": layout_document(best.layout),
        "memory_bytes": float(best.memory_bytes),
        "alternatives": [
            {
                "layout": layout_document(other.layout),
                "step_seconds": float(other.seconds),
                "mfu": float(other.mfu),
                "memory_bytes": float(other.memory_bytes),
            }
            for other in run.search.alternatives
        ],
        "layouts_evaluated": int(run.search.evaluated),
        "layouts_fitting": int(run.search.fitting),
        "goodput": {
            "failures_per_hour": float(useful.failures_per_hour),
            "interruptions": float(useful.interruptions),
            "checkpoint_seconds": float(useful.checkpoint_seconds),
            # None when the hardware never fails: no interval is needed.
            "checkpoint_interval_seconds": _finite(useful.checkpoint_interval_seconds),
            "restart_seconds": float(useful.restart_seconds),
            "useful_fraction": float(useful.useful_fraction),
            "run_overhead": float(useful.run_overhead),
            "run_overhead_source": engine.run_overhead_of(estimate.cluster)[1],
        },
        "sizing": None
        if estimate.sizing is None
        else {
            "chosen_by": estimate.sizing.chosen_by,
            "max_accelerators": int(estimate.sizing.max_accelerators),
            "counts_tried": int(estimate.sizing.tried),
        },
        "shape": {
            "layers": shape.layers,
            "d_model": shape.d_model,
            "heads": shape.heads,
            "kv_heads": shape.key_value_heads,
            "ffn": shape.ffn_width,
            "activation": shape.activation or "gelu",
            "vocabulary": shape.vocabulary,
            "sequence_length": shape.sequence_length,
            "params": float(shape.params),
            **moe_document(shape),
        },
    }


def moe_document(shape: ModelShape) -> dict[str, Any]:
    """What a shape's parameters are made of: active ones, embeddings, the experts and latent attention."""
    return {
        "active_params": float(shape.active_params),
        "embedding_params": float(shape.embedding_params),
        "mtp_params": float(shape.mtp_params),
        "head_dim": shape.head_width,
        "experts": shape.experts,
        "experts_per_token": shape.experts_per_token,
        "shared_experts": (shape.shared_experts or 0) if shape.mixture_of_experts else None,
        "expert_ffn": shape.expert_width if shape.mixture_of_experts else None,
        "moe_layers": shape.moe_layers,
        "capacity_factor": (shape.capacity_factor or 1.0) if shape.mixture_of_experts else None,
        "kv_lora_rank": shape.kv_lora_rank,
        "q_lora_rank": shape.q_lora_rank,
        "rope_head_dim": shape.rope_width or None,
        "mtp_depth": shape.mtp_depth or 0,
        "kv_cache_bytes_per_token": float(shape.kv_cache_bytes_per_token),
    }


def _efficiency_used(on: engine.Cluster) -> dict[str, Any]:
    """What the model ran the hardware at, and how that is known: the profile's figures at the precision,
    or the default of uncalibrated hardware."""
    hardware = on.hardware
    stated = hardware.efficiency if hardware.calibrated_at(on.precision) else None
    return {
        "gemm": float(hardware.matmul_efficiency_at(on.precision, on.calibration)),
        "attention": hardware.attention_efficiency_at(
            on.calibration,
            transformer_engine=frameworks.framework_named(on.framework).transformer_engine_attention,
        ),
        "provenance": "uncalibrated" if stated is None else stated.provenance,
        "basis": "the default of uncalibrated hardware" if stated is None else stated.basis,
    }


def layout_document(layout: performance.Layout) -> dict[str, Any]:
    return {name: getattr(layout, name) for name in performance.LAYOUT_FIELDS}


def _memory(memory: MemoryEstimate) -> dict[str, Any]:
    return {
        "zero_stage": int(memory.zero_stage),
        "data_parallel": int(memory.data_parallel),
        "tensor_parallel": int(memory.tensor_parallel),
        "sequence_parallel": memory.sequence_parallel,
        "bytes_per_param": float(memory.bytes_per_param),
        "model_states_bytes": float(memory.model_states_bytes),
        "activations_bytes": float(memory.activations_bytes),
        "total_bytes": float(memory.total_bytes),
        "capacity_bytes": float(memory.capacity_bytes),
        "fits": memory.fits,
        "min_accelerators": None if memory.min_accelerators is None else int(memory.min_accelerators),
    }


def _inference(inference: engine.InferenceSummary) -> dict[str, Any]:
    return {
        "minimised": INFERENCE_MINIMISES,
        "constraint": inference.constraint,
        "inference_tokens": float(inference.inference_tokens),
        "inference_flops": float(inference.inference_flops),
        "lifetime_flops": float(inference.lifetime_flops),
        "compute_optimal": allocation_point(inference.compute_optimal),
        "compute_optimal_lifetime_flops": float(inference.compute_optimal_lifetime_flops),
        "fraction_saved": float(inference.fraction_saved),
        "compute_optimal_at_budget": None
        if inference.compute_optimal_at_budget is None
        else allocation_point(inference.compute_optimal_at_budget),
        "serving": None if inference.serving is None else _serving(inference.serving),
    }


def allocation_point(allocation: allocate.Allocation) -> dict[str, Any]:
    return {
        "params": float(allocation.params),
        "tokens": float(allocation.tokens),
        "flops": float(allocation.flops),
        "tokens_per_param": float(allocation.tokens_per_param),
        "predicted_loss": _number(allocation.predicted_loss),
    }


def _serving(serving: engine.Serving) -> dict[str, Any]:
    decoding = serving.decoding
    return {
        "hardware": {
            "slug": serving.hardware.slug,
            "name": serving.hardware.name,
            "memory_bandwidth_bytes_per_second": _number(serving.hardware.memory_bandwidth_bytes_per_second),
        },
        "batch": int(decoding.batch),
        "bytes_per_param": SERVING_BYTES_PER_PARAM,
        "tokens_per_second": float(decoding.tokens_per_second),
        "bound": decoding.bound,
        "accelerator_hours": float(decoding.accelerator_hours),
        "price_per_hour": format_optional_money(serving.price_per_hour),
        "cost": format_optional_money(serving.cost),
        "currency": serving.currency,
    }


def _hyperparameters(hyperparameters: Hyperparameters) -> dict[str, Any]:
    return {
        "batch_tokens": float(hyperparameters.batch_tokens),
        "learning_rate": float(hyperparameters.learning_rate),
        "source": hyperparameters.source,
        "flops": float(hyperparameters.flops),
        "flops_definition": hyperparameters.flops_definition,
        "note": HYPERPARAMETERS_NOTE,
    }


def _intervals(intervals: engine.Intervals) -> dict[str, Any]:
    return {
        "confidence": float(intervals.confidence),
        "samples": int(intervals.samples),
        "params": _pair(intervals.params),
        "tokens": _pair(intervals.tokens),
        "predicted_loss": _pair(intervals.predicted_loss),
    }


def _caveats(found: list[caveats.Caveat]) -> list[dict[str, Any]]:
    return [
        {"code": caveat.code, "message": caveat.message, "details": dict(caveat.details)} for caveat in found
    ]


def _pair(pair: tuple[float, float] | None) -> list[float] | None:
    return None if pair is None else [float(bound) for bound in pair]


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None

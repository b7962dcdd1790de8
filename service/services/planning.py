"""Use cases of the planning engine: resolve what the request names (hardware, laws), then ask the core."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from service.core import allocate, caveats, engine, performance, wall_clock
from service.core.laws import PUBLISHED_LAWS, ScalingLaw
from service.core.shape import ModelShape
from service.core.validation import InvalidInput
from service.data.models import FittedLaw, HardwareProfile
from service.services import energy, laws
from service.services.energy import SiteRequest
from service.services.errors import FieldPath, InvalidFieldError, InvalidParameterError, NotFoundError
from service.services.hardware import get_hardware

# --- Requests ---------------------------------------------------------------------------------------------
# What the request schemas load (service/schemas/planning.py and cluster.py), fields in the order they
# document them. None: not given, and the engine's default applies.


# Layout fields that were top-level cluster options before `layout`, and still work there: taken as fixed
# layout fields (`layout`'s own win over them), reported with a deprecated_field warning, and refused where
# the request gave them. Here rather than in the schema: a plan stores its request as given, and is evaluated
# again from it without the schema (plan_documents.replay).
DEPRECATED_LAYOUT_FIELDS = ("tensor_parallel", "zero_stage", "recomputation", "sequence_parallel")


@dataclass(frozen=True, kw_only=True)
class ClusterRequest:
    """Where and how a run is trained."""

    hardware: str | engine.Hardware | None = None  # a profile's slug, or inline
    accelerators: int | None = None
    mfu: float | None = None
    precision: str | None = None
    price_per_hour: Decimal | None = None  # overrides the hardware's
    currency: str | None = None
    zero_stage: int | None = None  # deprecated: layout.zero_stage
    optimizer: str | None = None
    framework: str | None = None  # the training framework the layout search stays inside
    memory_headroom: float | None = None  # the share of memory a searched layout leaves free
    recomputation: str | None = None  # deprecated: layout.recomputation
    tensor_parallel: int | None = None  # deprecated: layout.tensor_parallel
    sequence_parallel: bool | None = None  # deprecated: layout.sequence_parallel
    shape: ModelShape | None = None
    layout: Mapping[str, Any] | None = None  # the layout fields fixed; the others are searched
    # checkpoint_write_bytes_per_second, restart_seconds, run_overhead; on spot capacity,
    # preemptions_per_accelerator_hour and requeue_seconds
    reliability: Mapping[str, float] | None = None
    max_accelerators: int | None = None  # when accelerators is left to the planner (not in plans)
    site: SiteRequest | None = None  # where its power comes from: energy's PUE, emissions' grid
    power_basis: str | None = None  # how its power is counted (core.energy.POWER_BASES); None: modeled

    @property
    def deprecated_fields(self) -> list[str]:
        """The layout fields the request gives at the top level."""
        return [name for name in DEPRECATED_LAYOUT_FIELDS if getattr(self, name) is not None]

    @property
    def fixed_layout(self) -> dict[str, Any]:
        """The layout fields the request fixes: the top-level ones, and `layout`'s over them."""
        return {**{name: getattr(self, name) for name in self.deprecated_fields}, **(self.layout or {})}


@dataclass(frozen=True, kw_only=True)
class AllocationRequest(ClusterRequest):
    """A budget (or several limits), and the rule that allocates it."""

    flops: float | None = None
    pf_days: float | None = None
    target_loss: float | None = None
    cost: Decimal | None = None
    accelerator_hours: float | None = None
    days: float | None = None
    tokens_per_param: float | None = None
    law: str | ScalingLaw | None = None  # a published or fitted law's slug, or inline coefficients
    unique_tokens: float | None = None
    inference_tokens: float | None = None
    inference_hardware: str | engine.Hardware | None = None
    inference_batch: int | None = None


@dataclass(frozen=True, kw_only=True)
class PlanInputs(AllocationRequest):
    """What a plan evaluates: an allocation request, or the `params` and `tokens` of a model already chosen,
    on a cluster it names. Stored with the plan (service/services/plan_documents.py)."""

    params: float | None = None
    tokens: float | None = None
    active_params: float | None = None  # of a mixture of experts given without a shape


@dataclass(frozen=True, kw_only=True)
class EstimateRequest(ClusterRequest):
    """A model already chosen, on a cluster: how long, at what cost, in how much memory."""

    hardware: str | engine.Hardware
    params: float | None = None  # None: the shape's (the schema requires one or the other)
    tokens: float
    law: str | ScalingLaw | None = None  # to predict the model's loss
    days: float | None = None  # a deadline: the fewest accelerators that finish by it, when none are given
    active_params: float | None = None  # of a mixture of experts given without its shape


def _names(request: type) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(request))


# Core arguments that are not request fields, and the request field responsible for them.
_ARGUMENT_FIELDS: dict[str, FieldPath] = {
    "peak_flops_per_second": ("hardware",),
    "memory_bytes": ("hardware",),
    "memory_bandwidth_bytes_per_second": ("hardware",),
    "scale_up_bandwidth_bytes_per_second": ("hardware",),
    "scale_out_bandwidth_bytes_per_second": ("hardware",),
    "failures_per_accelerator_hour": ("hardware",),
    "training_seconds": ("tokens",),
    "data_parallel": ("accelerators",),
    **{field.name: ("shape", field.name) for field in dataclasses.fields(ModelShape)},
    **{field.name: ("law", field.name) for field in dataclasses.fields(ScalingLaw)},
}


def _field_error(error: InvalidInput, request: type) -> InvalidFieldError:
    """Point a core refusal at the field of `request` (a request class) it is about, or at the whole
    request when none is."""
    field = _ARGUMENT_FIELDS.get(error.argument, tuple(error.argument.split(".")))
    if field[0] not in _names(request):
        return InvalidFieldError((), f"{error.argument}: {error.message}.")
    return InvalidFieldError(field, error.sentence)


def resolve_law(session: Session, reference: str | ScalingLaw, *, scope: uuid.UUID | None) -> engine.NamedLaw:
    """The law a request names: published, fitted by the organisation `scope` (None: any), or inline."""
    return named_law(find_fitted_law(session, reference, scope=scope), reference)


def find_fitted_law(
    session: Session, reference: str | ScalingLaw, *, scope: uuid.UUID | None
) -> FittedLaw | None:
    """The stored law a slug names (None for published and inline laws)."""
    if not isinstance(reference, str) or reference in PUBLISHED_LAWS:
        return None
    found = laws.find_fitted_law(session, reference, scope=scope)
    if found is None:
        known = ", ".join(sorted(PUBLISHED_LAWS))
        raise InvalidFieldError(
            "law", f"No scaling law {reference!r}: neither published ({known}) nor fitted by you."
        )
    return found


def named_law(fitted: FittedLaw | None, reference: str | ScalingLaw) -> engine.NamedLaw:
    """The engine's view of a fitted law (with its bootstrap fits), a published one, or an inline one."""
    if fitted is not None:
        return laws.named_law(fitted)
    if isinstance(reference, str):
        return engine.published(reference)
    return engine.NamedLaw(reference, name="inline law")


def resolve_hardware(session: Session, reference: str | engine.Hardware) -> engine.Hardware:
    return hardware_of(find_hardware_profile(session, reference), reference)


def find_hardware_profile(
    session: Session, reference: str | engine.Hardware, *, field: str = "hardware"
) -> HardwareProfile | None:
    """The stored profile a slug names (None for inline hardware); `field` is the request's for it."""
    if not isinstance(reference, str):
        return None
    try:
        return get_hardware(session, reference)
    except NotFoundError:
        raise InvalidFieldError(field, f"No hardware profile {reference!r} (see GET /v1/hardware).") from None


def hardware_of(profile: HardwareProfile | None, reference: str | engine.Hardware) -> engine.Hardware:
    """The engine's view of a stored profile (with the price in force now), or the inline hardware itself."""
    if profile is None:
        assert isinstance(reference, engine.Hardware), "a slug names a profile"
        return reference
    price = profile.current_price
    return engine.Hardware(
        name=profile.name,
        slug=profile.slug,
        peak_flops=profile.peak_flops,
        memory_bytes=float(profile.memory_bytes),
        price_per_hour=price.price_per_hour if price else None,
        currency=price.currency if price else None,
        memory_bandwidth_bytes_per_second=float(profile.memory_bandwidth_bytes_per_second),
        accelerators_per_node=profile.accelerators_per_node,
        scale_up_bandwidth_bytes_per_second=_float(profile.scale_up_bandwidth_bytes_per_second),
        scale_out_bandwidth_bytes_per_second=_float(profile.scale_out_bandwidth_bytes_per_second),
        failures_per_accelerator_hour=profile.failures_per_accelerator_hour,
        run_overhead=profile.run_overhead,
        efficiency=None if profile.efficiency is None else performance.Efficiency(**profile.efficiency),
    )


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _cluster(
    request: ClusterRequest,
    hardware: engine.Hardware,
    *,
    deadline_days: float | None = None,
    calibration: performance.Calibration = performance.CALIBRATION,
) -> engine.Cluster:
    """The engine's cluster of a request: each field it takes, named here."""
    reliability = request.reliability or {}
    return engine.Cluster(
        hardware=hardware,
        accelerators=request.accelerators,
        mfu=request.mfu,
        precision=request.precision or engine.DEFAULT_PRECISION,
        optimizer=request.optimizer or engine.DEFAULT_OPTIMIZER,
        framework=request.framework,
        memory_headroom=request.memory_headroom,
        shape=request.shape,
        layout=request.fixed_layout,
        max_accelerators=request.max_accelerators,
        deadline_days=deadline_days,
        checkpoint_write_bytes_per_second=reliability.get("checkpoint_write_bytes_per_second"),
        restart_seconds=reliability.get("restart_seconds"),
        run_overhead=reliability.get("run_overhead"),
        preemptions_per_accelerator_hour=reliability.get("preemptions_per_accelerator_hour", 0.0),
        requeue_seconds=reliability.get("requeue_seconds", 0.0),
        calibration=calibration,
        active_params=getattr(request, "active_params", None),
    )


def _budget(request: AllocationRequest) -> engine.Budget:
    """The engine's limits of a request: each field it takes, named here."""
    return engine.Budget(
        flops=request.flops,
        pf_days=request.pf_days,
        target_loss=request.target_loss,
        cost=request.cost,
        currency=request.currency,
        accelerator_hours=request.accelerator_hours,
        days=request.days,
        price_per_hour=request.price_per_hour,
    )


def make_allocation(session: Session, request: AllocationRequest, *, scope: uuid.UUID | None) -> engine.Plan:
    """Allocate the request's budget, with the energy of its run on hardware; nothing is stored."""
    hardware, setting = None, None
    if request.hardware is not None:
        profile = find_hardware_profile(session, request.hardware)
        hardware = hardware_of(profile, request.hardware)
        setting = energy_setting(profile, request, AllocationRequest)
    law = resolve_law(session, request.law, scope=scope) if request.law is not None else None
    plan = allocate_on(request, hardware, law, resolve_serving_hardware(session, request))
    return energy.plan_with_energy(plan, setting)


def energy_setting(
    profile: HardwareProfile | None, request: ClusterRequest, kind: type[ClusterRequest]
) -> dict[str, Any]:
    """What the energy of the request's run rests on (services/energy.py): its profile's TDP (inline hardware
    states none) and the request's site; a refusal names the field of `kind` (a request class)."""
    try:
        return energy.setting_document(
            None if profile is None else profile.slug,
            None if profile is None else profile.tdp_watts,
            request.site,
            request.power_basis,
        )
    except InvalidInput as error:
        raise _field_error(error, kind) from error


def resolve_serving_hardware(session: Session, request: AllocationRequest) -> engine.Hardware | None:
    """The request's `inference_hardware` (None when it serves on `hardware`, or nothing)."""
    reference = request.inference_hardware
    if reference is None:
        return None
    return hardware_of(find_hardware_profile(session, reference, field="inference_hardware"), reference)


def allocate_on(
    request: AllocationRequest,
    hardware: engine.Hardware | None,
    law: engine.NamedLaw | None,
    inference_hardware: engine.Hardware | None = None,
    calibration: performance.Calibration = performance.CALIBRATION,
) -> engine.Plan:
    """The allocation of a request whose hardware and law are resolved already (from the database, or from
    a stored plan's snapshot, with the cluster model's constants it was made with)."""
    try:
        if isinstance(request, PlanInputs) and request.params is not None:  # a model already chosen
            # The plan schemas require tokens with params, and hardware on every plan.
            assert request.tokens is not None, "a fixed plan's model has its tokens"
            assert hardware is not None, "a fixed plan has its cluster"
            plan = engine.fixed(
                request.params,
                request.tokens,
                _cluster(request, hardware, calibration=calibration),
                law=law,
                price_per_hour=request.price_per_hour,
                currency=request.currency,
            )
        else:
            plan = engine.plan(
                _budget(request),
                tokens_per_param=request.tokens_per_param,
                law=law,
                unique_tokens=request.unique_tokens,
                inference_tokens=request.inference_tokens,
                inference_hardware=inference_hardware,
                inference_batch=request.inference_batch,
                on=_cluster(request, hardware, calibration=calibration) if hardware is not None else None,
            )
    except InvalidInput as error:
        raise _field_error(_where_given(error, request), PlanInputs) from error
    return _plan_warned(plan, request)


def make_estimate(session: Session, request: EstimateRequest, *, scope: uuid.UUID | None) -> engine.Estimate:
    """Time, cost and memory of training `params` on `tokens` on the request's cluster."""
    params = request.params
    if params is None:
        assert request.shape is not None, "EstimateRequestSchema requires params or a shape"
        params = request.shape.params
    profile = find_hardware_profile(session, request.hardware)
    setting = energy_setting(profile, request, EstimateRequest)
    try:
        run = engine.estimate(
            params,
            request.tokens,
            _cluster(request, hardware_of(profile, request.hardware), deadline_days=request.days),
            price_per_hour=request.price_per_hour,
            currency=request.currency,
            law=resolve_law(session, request.law, scope=scope) if request.law is not None else None,
        )
    except InvalidInput as error:
        raise _field_error(_where_given(error, request), EstimateRequest) from error
    return energy.with_energy(_warned(run, request), setting)


def _where_given(error: InvalidInput, request: ClusterRequest) -> InvalidInput:
    """A refusal of a layout field the request gave at the top level only names that field."""
    name = error.argument.removeprefix("layout.")
    if name in request.deprecated_fields and name not in (request.layout or {}):
        return InvalidInput(name, error.message)
    return error


def _warned(run: engine.Estimate, request: ClusterRequest) -> engine.Estimate:
    """The estimate with the deprecated_field warning first when the request gives top-level layout fields
    and the cluster model ran (the layout search, or the choice of the count at a given MFU), as the
    warning always came."""
    notes = caveats.deprecated_layout_fields(request.deprecated_fields)
    if not notes or (run.run is None and run.sizing is None):
        return run
    return dataclasses.replace(run, caveats=[*notes, *run.caveats])


def _plan_warned(plan: engine.Plan, request: ClusterRequest) -> engine.Plan:
    """The plan with its estimate `_warned`: a plan's caveats end with its estimate's, so the warning goes
    where the estimate's begin."""
    run = plan.estimate
    if run is None or (warned := _warned(run, request)) is run:
        return plan
    own = plan.caveats[: len(plan.caveats) - len(run.caveats)]
    assert plan.caveats[len(own) :] == run.caveats, "a plan's caveats end with its estimate's"
    return dataclasses.replace(plan, estimate=warned, caveats=[*own, *warned.caveats])


@dataclass(frozen=True)
class ClusterSize:
    """The run of an estimate on another number of accelerators."""

    accelerators: int
    days: float
    accelerator_hours: float
    cost: Decimal | None
    mfu: float


def cluster_sizes(estimate: engine.Estimate, *, max_accelerators: int | None = None) -> list[ClusterSize]:
    """The estimate's run (the same model, tokens, shape, hardware, price and the layout fields it fixes) on
    each accelerator count the planner tries when it chooses one (`wall_clock.candidate_counts`, up to
    `max_accelerators`, and the estimate's own count), fewest first: where more accelerators stop paying.
    Counts no layout fits are left out; so are all of them for an estimate at a given MFU, whose time
    scales with the count by assumption (an empty list)."""
    if estimate.run is None:
        return []
    on = estimate.cluster
    per_node = on.hardware.accelerators_per_node or engine.ASSUMED_NETWORK[0]
    most = max(max_accelerators or wall_clock.DEFAULT_MAX_ACCELERATORS, estimate.accelerators)
    sizes = {estimate.accelerators: _cluster_size(estimate)}
    # The shape the estimate was modelled with (given, scaled or assumed), so that each count runs it.
    fixed = dataclasses.replace(on, shape=estimate.shape, max_accelerators=None, deadline_days=None)
    for count in wall_clock.candidate_counts(per_node, most):
        if count in sizes:
            continue
        try:
            run = engine.estimate(
                estimate.params,
                estimate.tokens,
                dataclasses.replace(fixed, accelerators=count),
                price_per_hour=estimate.price_per_hour,
                currency=estimate.currency,
            )
        except InvalidInput:  # no layout of this many accelerators fits (or honours the fixed fields)
            continue
        sizes[count] = _cluster_size(run)
    return [sizes[count] for count in sorted(sizes)]


def _cluster_size(estimate: engine.Estimate) -> ClusterSize:
    return ClusterSize(
        accelerators=estimate.accelerators,
        days=estimate.runtime.days,
        accelerator_hours=estimate.runtime.accelerator_hours,
        cost=estimate.cost,
        mfu=estimate.mfu,
    )


def isoflop(law: engine.NamedLaw, flops: float, points: int, span: float) -> dict[str, Any]:
    """The IsoFLOP curve and its optimum, which the curve has at its centre by construction."""
    # Refused when the curve leaves the sizes the engine answers for: the budget (or span) is too large.
    curve = _curve("flops", lambda: allocate.isoflop_curve(law.law, flops, points, span))
    return {"law": law.slug, "flops": flops, "optimal": curve[len(curve) // 2], "points": curve}


def frontier(law: engine.NamedLaw, min_flops: float, max_flops: float, points: int) -> dict[str, Any]:
    curve = _curve("max_flops", lambda: allocate.frontier(law.law, min_flops, max_flops, points))
    return {"law": law.slug, "points": curve}


def _curve(parameter: str, build: Callable[[], list[allocate.Allocation]]) -> list[allocate.Allocation]:
    try:
        return build()
    except InvalidInput as error:
        raise InvalidParameterError(parameter, str(error)) from error

"""Use cases of the planning engine: resolve what the request names (hardware, laws), then ask the core."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy.orm import Session

from service.core import allocate, engine
from service.core.cluster import ModelShape
from service.core.laws import PUBLISHED_LAWS, ScalingLaw
from service.core.validation import InvalidInput
from service.models import FittedLaw, HardwareProfile
from service.services import laws
from service.services.errors import FieldPath, InvalidFieldError, InvalidParameterError, NotFoundError
from service.services.hardware import get_hardware

# Core arguments that are not request fields, and the request field responsible for them.
_ARGUMENT_FIELDS: dict[str, FieldPath] = {
    "peak_flops_per_second": ("hardware",),
    "memory_bytes": ("hardware",),
    "data_parallel": ("accelerators",),
    **{name: ("shape", name) for name in ("layers", "d_model", "heads", "sequence_length", "micro_batch")},
    **{name: ("law", name) for name in ("E", "A", "B", "alpha", "beta")},
}


_CLUSTER_FIELDS = frozenset(
    {"hardware", "accelerators", "mfu", "precision", "price_per_hour", "currency", "zero_stage", "optimizer"}
    | {"recomputation", "tensor_parallel", "sequence_parallel", "shape"}
)
# Request fields that engine.Cluster takes as they are, by the same names (mfu, ..., sequence_parallel); the
# hardware and the shape are resolved first, and accelerators is required.
_CLUSTER_OPTIONS = tuple(
    field.name
    for field in dataclasses.fields(engine.Cluster)
    if field.name not in {"hardware", "accelerators", "shape"}
)
ALLOCATION_FIELDS = (
    _CLUSTER_FIELDS
    | {"flops", "pf_days", "target_loss", "cost", "accelerator_hours", "days"}
    | {
        "tokens_per_param",
        "law",
        "unique_tokens",
        "inference_tokens",
        "inference_hardware",
        "inference_batch",
    }
)
ESTIMATE_FIELDS = _CLUSTER_FIELDS | {"params", "tokens", "law"}


def _field_error(error: InvalidInput, request_fields: frozenset[str]) -> InvalidFieldError:
    """Point a core refusal at the request field it is about (or at the whole body when none is)."""
    field = _ARGUMENT_FIELDS.get(error.argument, (error.argument,))
    if field[0] not in request_fields:
        return InvalidFieldError((), f"{error.argument}: {error.message}.")
    return InvalidFieldError(field, error.message[0].upper() + error.message[1:] + ".")


def resolve_law(
    session: Session, reference: str | Mapping[str, float], *, scope: uuid.UUID | None
) -> engine.NamedLaw:
    """The law a request names: published, fitted by the organisation `scope` (None: any), or inline."""
    return named_law(find_fitted_law(session, reference, scope=scope), reference)


def find_fitted_law(
    session: Session, reference: str | Mapping[str, float], *, scope: uuid.UUID | None
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


def named_law(fitted: FittedLaw | None, reference: str | Mapping[str, float]) -> engine.NamedLaw:
    """The engine's view of a fitted law (with its bootstrap fits), a published one, or an inline one."""
    if fitted is not None:
        return laws.named_law(fitted)
    if isinstance(reference, str):
        return engine.published(reference)
    try:
        return engine.NamedLaw(ScalingLaw(**reference), name="inline law")
    except InvalidInput as error:
        raise _field_error(error, frozenset({"law"})) from error


def resolve_hardware(session: Session, reference: str | Mapping[str, Any]) -> engine.Hardware:
    return hardware_of(find_hardware_profile(session, reference), reference)


def find_hardware_profile(
    session: Session, reference: str | Mapping[str, Any], *, field: str = "hardware"
) -> HardwareProfile | None:
    """The stored profile a slug names (None for inline hardware); `field` is the request's for it."""
    if not isinstance(reference, str):
        return None
    try:
        return get_hardware(session, reference)
    except NotFoundError:
        raise InvalidFieldError(field, f"No hardware profile {reference!r} (see GET /v1/hardware).") from None


def hardware_of(profile: HardwareProfile | None, reference: str | Mapping[str, Any]) -> engine.Hardware:
    """The engine's view of a stored profile (with the price in force now), or of inline hardware."""
    if profile is not None:
        price = profile.current_price
        return engine.Hardware(
            name=profile.name,
            slug=profile.slug,
            peak_flops=profile.peak_flops,
            memory_bytes=float(profile.memory_bytes),
            price_per_hour=price.price_per_hour if price else None,
            currency=price.currency if price else None,
            memory_bandwidth_bytes_per_second=float(profile.memory_bandwidth_bytes_per_second),
        )
    return engine.Hardware(
        name=reference["name"],
        peak_flops=dict(reference["peak_flops"]),
        memory_bytes=reference["memory_bytes"],
        price_per_hour=reference.get("price_per_hour"),
        currency=reference.get("currency"),
        memory_bandwidth_bytes_per_second=reference.get("memory_bandwidth_bytes_per_second"),
    )


def _cluster(request: Mapping[str, Any], hardware: engine.Hardware | None) -> engine.Cluster | None:
    if hardware is None:
        return None
    shape = request.get("shape")
    options = {name: request[name] for name in _CLUSTER_OPTIONS if name in request}
    return engine.Cluster(
        hardware=hardware,
        accelerators=request["accelerators"],
        shape=ModelShape(**shape) if shape else None,
        **options,
    )


def make_allocation(session: Session, request: Mapping[str, Any], *, scope: uuid.UUID | None) -> engine.Plan:
    """Allocate the request's budget (validated by AllocationRequestSchema); nothing is stored."""
    hardware = resolve_hardware(session, request["hardware"]) if request.get("hardware") else None
    law = resolve_law(session, request["law"], scope=scope) if "law" in request else None
    return allocate_on(request, hardware, law, resolve_serving_hardware(session, request))


def resolve_serving_hardware(session: Session, request: Mapping[str, Any]) -> engine.Hardware | None:
    """The request's `inference_hardware` (None when it serves on `hardware`, or nothing)."""
    reference = request.get("inference_hardware")
    if reference is None:
        return None
    return hardware_of(find_hardware_profile(session, reference, field="inference_hardware"), reference)


def allocate_on(
    request: Mapping[str, Any],
    hardware: engine.Hardware | None,
    law: engine.NamedLaw | None,
    inference_hardware: engine.Hardware | None = None,
) -> engine.Plan:
    """The allocation of a request whose hardware and law are resolved already (from the database, or from
    a stored plan's snapshot)."""
    try:
        if "params" in request:  # a plan for a model already chosen
            return engine.fixed(
                request["params"],
                request["tokens"],
                _cluster(request, hardware),
                law=law,
                price_per_hour=request.get("price_per_hour"),
                currency=request.get("currency"),
            )
        budget = engine.Budget(
            **{name: request.get(name) for name in ("flops", "pf_days", "target_loss", "cost", "currency")},
            accelerator_hours=request.get("accelerator_hours"),
            days=request.get("days"),
            price_per_hour=request.get("price_per_hour"),
        )
        return engine.plan(
            budget,
            tokens_per_param=request.get("tokens_per_param"),
            law=law,
            unique_tokens=request.get("unique_tokens"),
            inference_tokens=request.get("inference_tokens"),
            inference_hardware=inference_hardware,
            inference_batch=request.get("inference_batch"),
            on=_cluster(request, hardware),
        )
    except InvalidInput as error:
        raise _field_error(error, ALLOCATION_FIELDS | {"params", "tokens"}) from error


def make_estimate(
    session: Session, request: Mapping[str, Any], *, scope: uuid.UUID | None
) -> engine.Estimate:
    """Time, cost and memory of training `params` on `tokens` on the request's cluster."""
    try:
        return engine.estimate(
            request["params"],
            request["tokens"],
            _cluster(request, resolve_hardware(session, request["hardware"])),
            price_per_hour=request.get("price_per_hour"),
            currency=request.get("currency"),
            law=resolve_law(session, request["law"], scope=scope) if "law" in request else None,
        )
    except InvalidInput as error:
        raise _field_error(error, ESTIMATE_FIELDS) from error


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

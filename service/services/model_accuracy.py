"""Plans meet reality: each plan's measured throughput (from its usage records) against the throughput the
cluster model predicted for its layout, and the prediction error per hardware profile.

Predicted: the training throughput of the plan's stored result, tokens per second for the whole cluster
while it trains (interruptions, checkpoints and restarts left out, as a training loop's meter leaves them
out): `estimate.performance.tokens_per_step / estimate.performance.step_seconds` when the cluster model set
the pace, `estimate.tokens / estimate.seconds` for a plan at a given MFU.

Measured: the mean of its usage records' `tokens_per_second`, each weighted by the length of its period, over
the records that report one and stand: records of kind "usage" that no reversal cancels.

Error: measured / predicted - 1 (positive: the run went faster than planned).
"""

from __future__ import annotations

import math
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from service.core import calibrate
from service.data.models import HardwareProfile, Organization, Plan, UsageRecord, standing_usage
from service.services import plan_documents
from service.services.documents import JsonObject


@dataclass(frozen=True)
class Measurement:
    """What a plan's standing usage records say of its throughput."""

    periods: int
    seconds: float  # wall-clock time the periods cover
    accelerator_hours: float
    tokens_per_second: float  # the time-weighted mean over the periods


def measurements(
    session: Session,
    *,
    plan_ids: Iterable[uuid.UUID] | None = None,
    organization_id: uuid.UUID | None = None,
    hardware_id: uuid.UUID | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> dict[uuid.UUID, Measurement]:
    """Measured throughput by plan, of the plans asked for (by ids, organisation, hardware) whose standing
    records report one; only periods starting in [start, end) when given."""
    stmt = select(
        UsageRecord.plan_id,
        UsageRecord.period_start,
        UsageRecord.period_end,
        UsageRecord.accelerator_hours,
        UsageRecord.tokens_per_second,
    ).where(standing_usage(), UsageRecord.tokens_per_second.is_not(None))
    if plan_ids is not None:
        stmt = stmt.where(UsageRecord.plan_id.in_(list(plan_ids)))
    if organization_id is not None:
        stmt = stmt.where(UsageRecord.organization_id == organization_id)
    if hardware_id is not None:
        stmt = stmt.where(UsageRecord.plan_id.in_(select(Plan.id).where(Plan.hardware_id == hardware_id)))
    if start is not None:
        stmt = stmt.where(UsageRecord.period_start >= start)
    if end is not None:
        stmt = stmt.where(UsageRecord.period_start < end)
    periods: dict[uuid.UUID, list[tuple[float, float, float]]] = defaultdict(list)
    for plan_id, period_start, period_end, hours, rate in session.execute(stmt):
        assert rate is not None, "selected for their throughput"
        periods[plan_id].append(((period_end - period_start).total_seconds(), hours, rate))
    found = {}
    for plan_id, rows in periods.items():
        seconds = math.fsum(length for length, _, _ in rows)
        found[plan_id] = Measurement(
            periods=len(rows),
            seconds=seconds,
            accelerator_hours=math.fsum(hours for _, hours, _ in rows),
            tokens_per_second=math.fsum(length * rate for length, _, rate in rows) / seconds,
        )
    return found


def predicted_tokens_per_second(result: JsonObject) -> float | None:
    """The training throughput a plan's result predicts (see the module's docstring); None for a result
    without a run on a cluster."""
    estimate = result.get("estimate")
    if estimate is None:
        return None
    performance = estimate.get("performance")
    if performance is not None:
        return float(performance["tokens_per_step"]) / float(performance["step_seconds"])
    return float(estimate["tokens"]) / float(estimate["seconds"])


def modelled(plan: Plan) -> bool:
    """Whether the cluster model set the plan's pace (rather than an MFU the request gave)."""
    estimate = plan.result.get("estimate") or {}
    return estimate.get("performance") is not None


def layout_summary(result: JsonObject) -> str:
    """The layout a plan runs, in a line: degrees, micro-batch and batch, or the MFU it was planned at."""
    estimate = result.get("estimate") or {}
    performance = estimate.get("performance")
    if performance is None:
        return f"{estimate.get('accelerators')} accelerators at a given MFU of {estimate.get('mfu'):g}"
    layout = performance["layout"]
    degrees = [
        f"{name} {layout[key]}"
        for name, key in (
            ("tensor", "tensor_parallel"),
            ("pipeline", "pipeline_parallel"),
            ("data", "data_parallel"),
            ("context", "context_parallel"),
            ("expert", "expert_parallel"),
        )
        if key in ("tensor_parallel", "pipeline_parallel", "data_parallel") or layout.get(key, 1) > 1
    ]
    recomputation = "no" if layout["recomputation"] == "none" else layout["recomputation"]
    return (
        f"{' · '.join(degrees)}; micro-batch {layout['micro_batch']}, batch {layout['global_batch']}, "
        f"{recomputation} recomputation, ZeRO {layout['zero_stage']}"
    )


@dataclass(frozen=True)
class RunAccuracy:
    """One plan's prediction against its measurement."""

    plan_id: uuid.UUID
    name: str | None
    organization: str
    status: str
    accelerators: int
    layout: str
    modelled: bool
    calibration_id: str | None  # the organisation's calibration the plan was made with
    predicted_tokens_per_second: float
    measured_tokens_per_second: float
    error: float
    periods: int
    hours: float
    accelerator_hours: float


@dataclass(frozen=True)
class HardwareAccuracy:
    """The prediction error on one hardware profile (None: inline hardware)."""

    hardware: str | None
    runs: int
    periods: int
    hours: float
    accelerator_hours: float
    mean_error: float
    median_error: float
    rms_error: float
    worst_error: float
    worst_plan_id: uuid.UUID
    plans: list[RunAccuracy] | None = None  # with detail


@dataclass(frozen=True)
class AccuracyQuery:
    organization: str | None = None
    hardware: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    detail: bool = False


@dataclass
class AccuracyReport:
    query: AccuracyQuery
    rows: list[HardwareAccuracy] = field(default_factory=list)


def run_accuracy(plan: Plan, measured: Measurement) -> RunAccuracy | None:
    """A plan's prediction against its measurement (None when its result predicts no throughput)."""
    predicted = predicted_tokens_per_second(plan.result)
    if predicted is None:
        return None
    own = plan_documents.snapshot_own_calibration(plan.snapshot)
    return RunAccuracy(
        plan_id=plan.id,
        name=plan.name,
        organization=plan.organization_slug,
        status=plan.status,
        accelerators=plan.accelerators,
        layout=layout_summary(plan.result),
        modelled=modelled(plan),
        calibration_id=None if own is None else own["id"],
        predicted_tokens_per_second=predicted,
        measured_tokens_per_second=measured.tokens_per_second,
        error=calibrate.relative_error(measured.tokens_per_second, predicted),
        periods=measured.periods,
        hours=measured.seconds / 3600.0,
        accelerator_hours=measured.accelerator_hours,
    )


def model_accuracy(session: Session, query: AccuracyQuery, *, scope: uuid.UUID | None) -> AccuracyReport:
    """The prediction error per hardware profile over the plans with measured throughput that the caller
    may see (an admin: every organisation's, or `query.organization`'s); no measurements, no rows."""
    organization_id = scope
    if query.organization is not None:
        named = session.scalar(select(Organization.id).where(Organization.slug == query.organization))
        if named is None or (scope is not None and named != scope):
            return AccuracyReport(query)  # another organisation's reads as one with nothing measured
        organization_id = named
    hardware_id = None
    if query.hardware is not None:
        hardware_id = session.scalar(select(HardwareProfile.id).where(HardwareProfile.slug == query.hardware))
        if hardware_id is None:
            return AccuracyReport(query)
    measured = measurements(
        session,
        organization_id=organization_id,
        hardware_id=hardware_id,
        start=query.start,
        end=query.end,
    )
    if not measured:
        return AccuracyReport(query)
    plans = session.scalars(
        select(Plan)
        .where(Plan.id.in_(list(measured)))
        .options(selectinload(Plan.organization), selectinload(Plan.hardware))
        .order_by(Plan.created_at.desc(), Plan.id.desc())
    )
    by_hardware: dict[str | None, list[RunAccuracy]] = defaultdict(list)
    for plan in plans:
        run = run_accuracy(plan, measured[plan.id])
        if run is not None:
            by_hardware[plan.hardware_slug].append(run)
    rows = [
        _hardware_row(hardware, runs, query.detail)
        for hardware, runs in sorted(by_hardware.items(), key=lambda item: item[0] or "")
    ]
    return AccuracyReport(query, rows)


def _hardware_row(hardware: str | None, runs: list[RunAccuracy], detail: bool) -> HardwareAccuracy:
    summary = calibrate.summarise([run.error for run in runs])
    worst = max(runs, key=lambda run: abs(run.error))
    return HardwareAccuracy(
        hardware=hardware,
        runs=summary.runs,
        periods=sum(run.periods for run in runs),
        hours=math.fsum(run.hours for run in runs),
        accelerator_hours=math.fsum(run.accelerator_hours for run in runs),
        mean_error=summary.mean,
        median_error=summary.median,
        rms_error=summary.rms,
        worst_error=summary.worst,
        worst_plan_id=worst.plan_id,
        plans=runs if detail else None,
    )

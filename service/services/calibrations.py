"""An organisation's own calibration of the cluster model: the large-GEMM efficiency of one hardware profile,
fitted so that the model's throughput for the layouts of its runs matches what they measured
(service/services/model_accuracy.py says what is measured and predicted), and the run overhead their actual
accelerator-hours show beyond that pace, failures and checkpoints.

The latest calibration of an (organisation, hardware) is in force: the organisation's later plans on that
hardware run the cluster model with it, and their snapshot names it (plans.create_plan). A calibration is
kept with the runs it came from, their throughput as measured and as predicted before and after.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ScalarSelect, SQLColumnExpression, bindparam, select
from sqlalchemy.orm import Session, selectinload

from service.core import calibrate, engine, performance
from service.core.goodput import DEFAULT_RUN_OVERHEAD
from service.data.models import Calibration, HardwareProfile, Organization, Plan, id_by_slug
from service.infra import actors
from service.services import organizations, plan_documents, planning
from service.services.errors import InvalidFieldError, NotFoundError
from service.services.model_accuracy import Measurement, measurements, predicted_tokens_per_second
from service.services.pagination import Cursor, Page, paginate

# The most runs one calibration fits (each is replayed once, then its one layout evaluated ~30 times); by
# default the newest plans with measurements.
MAX_RUNS = 100
FIT_METHOD = (
    "bounded 1-D minimisation (Brent) of the mean squared log error of predicted against measured "
    "throughput, each run at the layout it was planned with"
)
OVERHEAD_METHOD = (
    "1 - (sum of the hours each run's tokens take at its measured pace, over goodput's fraction for failures "
    "and checkpoints) / (sum of its actual accelerator-hours), over the runs that reported tokens trained"
)


@dataclass(frozen=True)
class CalibrationRequest:
    organization: str
    hardware: str
    plans: Sequence[uuid.UUID] | None = None  # None: the organisation's measured plans on the hardware


# --- In force ---------------------------------------------------------------------------------------------


def in_force(session: Session, organization_id: uuid.UUID, hardware_id: uuid.UUID) -> Calibration | None:
    """The organisation's latest calibration for the hardware, if it has one."""
    # Its id first: most organisations have none, which one column tells for less than loading an entity.
    latest = session.scalar(_LATEST, {"organization_id": organization_id, "hardware_id": hardware_id})
    return by_id(session, latest)


def latest_id(
    organization_id: SQLColumnExpression[uuid.UUID], hardware_id: SQLColumnExpression[uuid.UUID]
) -> ScalarSelect[uuid.UUID]:
    """The id of the organisation's latest calibration for the hardware as an expression: NULL if it has
    none. For statements that read it with other things (a new plan's)."""
    return (
        select(_CALIBRATIONS.id)
        .where(_CALIBRATIONS.organization_id == organization_id, _CALIBRATIONS.hardware_id == hardware_id)
        .order_by(_CALIBRATIONS.created_at.desc(), _CALIBRATIONS.id.desc())
        .limit(1)
        .scalar_subquery()
    )


def by_id(session: Session, calibration_id: uuid.UUID | None) -> Calibration | None:
    return None if calibration_id is None else session.get(Calibration, calibration_id)


_CALIBRATIONS = Calibration.__table__.c
_LATEST = select(latest_id(bindparam("organization_id"), bindparam("hardware_id")))  # built once


def applied(own: Calibration, hardware: engine.Hardware) -> engine.Hardware:
    """The hardware with the organisation's own large-GEMM efficiency, fitted on its runs, at every
    precision it has a peak at; the profile's other figures (attention, memory, links) stay its own."""
    gemm = dict.fromkeys(hardware.peak_flops, own.matmul_efficiency)
    basis = f"calibration {own.id}: {len(own.runs)} of the organisation's runs"
    stated = hardware.efficiency or performance.Efficiency(gemm=gemm, provenance="calibrated", basis=basis)
    efficiency = dataclasses.replace(stated, gemm=gemm, provenance="calibrated", basis=basis)
    applied = dataclasses.replace(hardware, efficiency=efficiency)
    if own.run_overhead is None:  # no run reported the tokens it trained: the profile's or the default
        return applied
    return dataclasses.replace(applied, run_overhead=own.run_overhead, run_overhead_source="calibration")


def snapshot_of(own: Calibration, stated: float | None) -> dict[str, Any]:
    """`own` as a plan's snapshot names it; `stated`: the profile's own efficiency it replaced."""
    return plan_documents.own_calibration_document(
        str(own.id),
        own.hardware.slug,
        own.matmul_efficiency,
        default=stated,
        runs=len(own.runs),
        created_at=own.created_at,
        run_overhead=own.run_overhead,
    )


# --- Fitting ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    plan: Plan
    measured: Measurement
    run: engine.Estimate  # the plan's estimate, replayed: its shape, machine and chosen layout


def create_calibration(
    session: Session, request: CalibrationRequest, *, scope: uuid.UUID | None
) -> Calibration:
    """Fit the organisation's efficiency for the hardware to its measured runs, and store it (in force from
    now for its plans on that hardware). 422 naming the field: an unknown organisation or hardware, a plan
    that is not the organisation's, not on the hardware, not measured or not paced by the cluster model, or
    no measured run at all."""
    organization = organizations.named_in_body(session, request.organization, scope=scope)
    profile = session.scalars(select(HardwareProfile).where(HardwareProfile.slug == request.hardware)).first()
    if profile is None:
        raise InvalidFieldError(
            "hardware", f"No hardware profile {request.hardware!r} (see GET /v1/hardware)."
        )
    runs = (
        _default_runs(session, organization, profile)
        if request.plans is None
        else _named_runs(session, request.plans, organization, profile)
    )
    measured = [run.measured.tokens_per_second for run in runs]

    def predict(efficiency: float) -> list[float]:
        return [_throughput(run.run, efficiency) for run in runs]

    fitted = calibrate.fit_matmul_efficiency(measured, predict)
    before = [_predicted(run.plan) for run in runs]
    errors_before = [calibrate.relative_error(m, p) for m, p in zip(measured, before, strict=True)]
    errors_after = [calibrate.relative_error(m, p) for m, p in zip(measured, fitted.predicted, strict=True)]
    previous = in_force(session, organization.id, profile.id)
    paced = [_paced_hours(run) for run in runs]
    overhead = _overhead_fit(runs, paced)
    calibration = Calibration(
        organization=organization,
        hardware=profile,
        matmul_efficiency=fitted.efficiency,
        run_overhead=None if overhead is None else overhead.run_overhead,
        runs=[
            {
                "plan_id": str(run.plan.id),
                "name": run.plan.name,
                "periods": run.measured.periods,
                "hours": run.measured.seconds / 3600.0,
                "measured_tokens_per_second": run.measured.tokens_per_second,
                "predicted_tokens_per_second_before": predicted_before,
                "predicted_tokens_per_second_after": predicted_after,
                "error_before": error_before,
                "error_after": error_after,
                "tokens_trained": run.plan.tokens_trained,
                "actual_accelerator_hours": run.plan.actual_accelerator_hours,
                "paced_accelerator_hours": paced_hours,
            }
            for run, predicted_before, predicted_after, error_before, error_after, paced_hours in zip(
                runs, before, fitted.predicted, errors_before, errors_after, paced, strict=True
            )
        ],
        fit={
            "method": FIT_METHOD,
            "model_version": performance.MODEL_VERSION,
            "default_matmul_efficiency": planning.hardware_of(profile, profile.slug).matmul_efficiency_at(
                runs[0].run.cluster.precision, performance.CALIBRATION
            ),
            "previous": None
            if previous is None
            else {"id": str(previous.id), "matmul_efficiency": previous.matmul_efficiency},
            "objective": fitted.objective,
            "at_bound": fitted.at_bound,
            "bounds": list(calibrate.EFFICIENCY_BOUNDS),
            "errors_before": _summary(errors_before),
            "errors_after": _summary(errors_after),
            "run_overhead": None
            if overhead is None
            else {
                "method": OVERHEAD_METHOD,
                "runs": overhead.runs,
                "paced_accelerator_hours": overhead.paced_accelerator_hours,
                "actual_accelerator_hours": overhead.actual_accelerator_hours,
                "clipped": overhead.clipped,
                "default": DEFAULT_RUN_OVERHEAD if profile.run_overhead is None else profile.run_overhead,
            },
        },
        created_by=actors.actor(session),
    )
    session.add(calibration)
    session.flush()
    return calibration


def _default_runs(session: Session, organization: Organization, profile: HardwareProfile) -> list[_Run]:
    """The organisation's newest plans on the hardware that the cluster model paced and that have measured
    throughput (at most MAX_RUNS)."""
    measured = measurements(session, organization_id=organization.id, hardware_id=profile.id)
    plans = [
        plan
        for plan in _plans(session, list(measured))
        if plan.organization_id == organization.id and _modelled(plan)
    ]
    if not plans:
        raise InvalidFieldError(
            "hardware",
            f"{organization.slug} has no run on {profile.slug} with measured throughput (usage records with "
            "tokens_per_second) that the cluster model planned: nothing to calibrate on.",
        )
    return [_replayed(plan, measured[plan.id]) for plan in plans[:MAX_RUNS]]


def _named_runs(
    session: Session, plan_ids: Sequence[uuid.UUID], organization: Organization, profile: HardwareProfile
) -> list[_Run]:
    if not plan_ids:
        raise InvalidFieldError("plans", "Name at least one plan, or leave plans out for all measured ones.")
    if len(plan_ids) > MAX_RUNS:
        raise InvalidFieldError("plans", f"At most {MAX_RUNS} plans, got {len(plan_ids)}.")
    found = {plan.id: plan for plan in _plans(session, list(plan_ids))}
    measured = measurements(session, plan_ids=list(found))
    runs: list[_Run] = []
    for index, plan_id in enumerate(plan_ids):
        where = ("plans", index)
        plan = found.get(plan_id)
        if plan is None or plan.organization_id != organization.id:
            raise InvalidFieldError(where, f"No plan {plan_id} in organization {organization.slug!r}.")
        if plan.hardware_id != profile.id:
            runs_on = plan.hardware_slug or "inline hardware"
            raise InvalidFieldError(where, f"Plan {plan_id} runs on {runs_on}, not {profile.slug}.")
        if plan_id not in measured:
            raise InvalidFieldError(
                where, f"Plan {plan_id} has no measured throughput (usage records with tokens_per_second)."
            )
        if not _modelled(plan):
            raise InvalidFieldError(
                where,
                f"Plan {plan_id} was planned at a given MFU: the cluster model did not predict its pace, so "
                "it says nothing of the model's constants.",
            )
        if any(run.plan.id == plan_id for run in runs):
            raise InvalidFieldError(where, f"Plan {plan_id} is named twice.")
        runs.append(_replayed(plan, measured[plan_id]))
    return runs


def _plans(session: Session, plan_ids: list[uuid.UUID]) -> list[Plan]:
    """The plans with these ids, newest first."""
    return list(
        session.scalars(
            select(Plan)
            .where(Plan.id.in_(plan_ids))
            .options(selectinload(Plan.organization), selectinload(Plan.hardware), selectinload(Plan.law))
            .order_by(Plan.created_at.desc(), Plan.id.desc())
        )
    )


def _modelled(plan: Plan) -> bool:
    return (plan.result.get("estimate") or {}).get("performance") is not None


def _replayed(plan: Plan, measured: Measurement) -> _Run:
    """The plan evaluated again from its inputs and snapshot (its law's bootstrap fits left out: they give
    intervals, not the run), for the shape, machine and layout its prediction came from."""
    try:
        outcome = plan_documents.replay(plan.inputs, plan.snapshot)
    except InvalidFieldError as error:  # a stored plan always replays; say which one did not
        raise InvalidFieldError("plans", f"Plan {plan.id} no longer evaluates: {error.detail}") from error
    assert outcome.estimate is not None, "a plan has its run on a cluster"
    return _Run(plan, measured, outcome.estimate)


def _throughput(run: engine.Estimate, matmul_efficiency: float) -> float:
    """Tokens per second of the whole cluster at the run's layout, its GEMMs at `matmul_efficiency`."""
    step = engine.step_of(run, matmul_efficiency)  # modelled plans only (_modelled), at a layout that ran
    assert run.shape is not None, "a modelled run has its shape"
    return step.layout.global_batch * run.shape.sequence_length / step.seconds


def _paced_hours(run: _Run) -> float | None:
    """The accelerator-hours the run's tokens trained so far take at its measured pace, with goodput's
    failures and checkpoints paid but no run overhead; None when it reported no tokens or no hours."""
    plan, cluster_run = run.plan, run.run.run
    if plan.tokens_trained <= 0 or plan.actual_accelerator_hours <= 0 or cluster_run is None:
        return None
    useful = cluster_run.goodput
    of_failures = useful.useful_fraction / (1.0 - useful.run_overhead)
    seconds = plan.tokens_trained / run.measured.tokens_per_second
    return seconds * cluster_run.accelerators / 3600.0 / of_failures


def _overhead_fit(runs: Sequence[_Run], paced: Sequence[float | None]) -> calibrate.OverheadFit | None:
    """The run overhead of the runs that reported the tokens they trained; None when none did."""
    known = [
        (run.plan.actual_accelerator_hours, hours)
        for run, hours in zip(runs, paced, strict=True)
        if hours is not None
    ]
    if not known:
        return None
    return calibrate.fit_run_overhead([actual for actual, _ in known], [hours for _, hours in known])


def _predicted(plan: Plan) -> float:
    predicted = predicted_tokens_per_second(plan.result)
    assert predicted is not None, "a modelled plan predicts its throughput"
    return predicted


def _summary(errors: list[float]) -> dict[str, float | int]:
    summary = calibrate.summarise(errors)
    return {
        "runs": summary.runs,
        "mean": summary.mean,
        "median": summary.median,
        "rms": summary.rms,
        "worst": summary.worst,
    }


# --- Reading ----------------------------------------------------------------------------------------------


def get_calibration(session: Session, calibration_id: uuid.UUID, *, scope: uuid.UUID | None) -> Calibration:
    stmt = (
        select(Calibration)
        .where(Calibration.id == calibration_id)
        .options(selectinload(Calibration.organization), selectinload(Calibration.hardware))
    )
    if scope is not None:
        stmt = stmt.where(Calibration.organization_id == scope)
    calibration = session.scalars(stmt).first()
    if calibration is None:
        raise NotFoundError(f"No calibration {calibration_id}.")
    return calibration


def list_calibrations(
    session: Session,
    *,
    scope: uuid.UUID | None,
    organization: str | None,
    hardware: str | None,
    limit: int,
    after: Cursor | None,
) -> Page[Calibration]:
    """Newest first; the one in force for an (organisation, hardware) is the first of its pair."""
    stmt = select(Calibration).options(
        selectinload(Calibration.organization), selectinload(Calibration.hardware)
    )
    if scope is not None:
        stmt = stmt.where(Calibration.organization_id == scope)
    if organization is not None:
        stmt = stmt.where(Calibration.organization_id == id_by_slug(Organization, organization))
    if hardware is not None:
        stmt = stmt.where(Calibration.hardware_id == id_by_slug(HardwareProfile, hardware))
    return paginate(session, stmt, Calibration, limit, after)

"""Scaling laws: the published sets, and laws fitted to an organisation's own training runs.

A fit small enough to answer at once is stored in the request's transaction. A larger one (or one the
caller asks to run asynchronously) becomes a FitJob, which a runner (service/workers/jobs.py) claims, fits and
finishes; `fit_columns` is the work both do.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, overload

import numpy as np
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer

from service.core import caveats, engine, fit, isoflop_fit
from service.core.laws import PUBLISHED_LAWS, FittedRange, ScalingLaw
from service.core.validation import InvalidInput
from service.data.models import FitJob, FittedLaw, Organization
from service.infra import metrics
from service.infra.after_commit import on_commit
from service.services import organizations
from service.services.documents import JsonObject, from_document, to_document
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from service.services.pagination import Cursor, Page, paginate
from service.services.preconditions import require_if_match, require_version
from service.services.transactions import commit_or

# Fits answered at once (201) rather than as a job (202): about 5 s at most on two cores.
SYNC_MAX_RUNS = 500
SYNC_MAX_BOOTSTRAP = 200
UNUSABLE_WARNING = 0.05  # warn when more than this share of bootstrap resamples could not be fitted
COEFFICIENTS = ("E", "A", "B", "alpha", "beta")


# --- Requests ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runs:
    """Training runs as columns, as fits read them: each run's parameters, tokens and final loss."""

    params: tuple[float, ...]
    tokens: tuple[float, ...]
    loss: tuple[float, ...]


@dataclass(frozen=True)
class Bootstrap:
    samples: int  # resamples of the runs, each fitted again
    seed: int  # of the resampling: the same seed, the same intervals


@dataclass(frozen=True, kw_only=True)
class Fit:
    """What is fitted: the runs, and whether to bootstrap them."""

    runs: Runs
    bootstrap: Bootstrap | None = None


@dataclass(frozen=True, kw_only=True)
class FitRequest(Fit):
    """A fit, and where its law is stored (what FitRequestSchema loads); a job keeps it as a document."""

    organization: str  # slug
    name: str
    slug: str | None = None  # None: made from the name


def fit_request(document: JsonObject) -> FitRequest:
    """The request a fit job keeps (FitJob.request)."""
    return from_document(FitRequest, document)


# --- Fitting ----------------------------------------------------------------------------------------------


def runs_in_background(request: Fit, *, prefer_async: bool) -> bool:
    samples = 0 if request.bootstrap is None else request.bootstrap.samples
    return prefer_async or len(request.runs.params) > SYNC_MAX_RUNS or samples > SYNC_MAX_BOOTSTRAP


def fit_columns(request: Fit) -> dict[str, Any]:
    """Fit a validated request's runs: the columns of its FittedLaw. InvalidFieldError says why not."""
    runs, bootstrap = request.runs, request.bootstrap
    try:
        result = fit.fit_law(
            runs.params,
            runs.tokens,
            runs.loss,
            bootstrap_samples=bootstrap.samples if bootstrap else 0,
            seed=bootstrap.seed if bootstrap else 0,
        )
    except InvalidInput as error:
        field = "bootstrap" if error.argument == "bootstrap" else "runs"
        raise InvalidFieldError(field, error.sentence) from None
    n, d, loss = (np.asarray(column, dtype=float) for column in (runs.params, runs.tokens, runs.loss))
    isoflop = isoflop_fit.fit_isoflop(n, d, loss)
    return {
        **{name: getattr(result.law, name) for name in COEFFICIENTS},
        "fitted_range": vars(result.fitted_range).copy(),
        "fit": {
            "method": "huber-lbfgs",
            "huber_delta": fit.HUBER_DELTA,
            "starts": len(fit.default_grid()),
            "runs": result.runs,
            "objective": result.objective,
            "converged": result.converged,
            "rmse_log_loss": result.rmse_log_loss,
            "max_abs_log_residual": result.max_abs_log_residual,
            "tokens_per_param": _ratios(result.tokens_per_param),
        },
        "bootstrap": None if result.bootstrap is None else _bootstrap_document(result.bootstrap),
        "bootstrap_laws": []
        if result.bootstrap is None
        else [[getattr(law, name) for name in COEFFICIENTS] for law in result.bootstrap.laws],
        "isoflop": _isoflop_document(isoflop),
        "warnings": [vars(caveat) for caveat in _fit_caveats(result, isoflop)],
        "runs": to_document(runs),
    }


def _ratios(by_budget: Mapping[float, float]) -> list[dict[str, float]]:
    return [{"flops": flops, "tokens_per_param": ratio} for flops, ratio in by_budget.items()]


def _bootstrap_document(bootstrap: fit.Bootstrap) -> dict[str, Any]:
    return {
        "samples": bootstrap.samples,
        "seed": bootstrap.seed,
        "confidence": fit.CONFIDENCE,
        "unusable": bootstrap.unusable,
        "intervals": {name: list(bounds) for name, bounds in bootstrap.intervals.items()},
    }


def _isoflop_document(result: isoflop_fit.IsoflopFit | isoflop_fit.IsoflopUnavailable) -> dict[str, Any]:
    if isinstance(result, isoflop_fit.IsoflopUnavailable):
        return {"available": False, "reason": result.reason}
    return {
        "available": True,
        "a": result.a,
        "b": result.b,
        "params_coefficient": result.params_coefficient,
        "tokens_coefficient": result.tokens_coefficient,
        "budgets": [vars(budget).copy() for budget in result.budgets],
        "skipped": [vars(budget).copy() for budget in result.skipped],
        "tokens_per_param": _ratios(result.tokens_per_param),
    }


def _fit_caveats(
    result: fit.LawFit, isoflop: isoflop_fit.IsoflopFit | isoflop_fit.IsoflopUnavailable
) -> list[caveats.Caveat]:
    found = []
    if not result.converged:
        found.append(
            caveats.Caveat(
                caveats.NOT_CONVERGED,
                "The fit did not converge: no start reached a point where the objective stops falling. Treat "
                "the coefficients as rough; more runs, or runs over a wider range of sizes, usually help.",
                {"objective": result.objective},
            )
        )
    bootstrap = result.bootstrap
    if bootstrap is not None and bootstrap.unusable > UNUSABLE_WARNING * bootstrap.samples:
        found.append(
            caveats.Caveat(
                caveats.UNSTABLE_BOOTSTRAP,
                f"{bootstrap.unusable} of {bootstrap.samples} bootstrap resamples could not be fitted; the "
                "intervals come from the others and may be too narrow.",
                {"unusable": bootstrap.unusable, "samples": bootstrap.samples},
            )
        )
    return found + caveats.influential_runs(result) + caveats.not_an_isoflop_sweep(isoflop)


# --- Creating -------------------------------------------------------------------------------------------


def slug_for(request: FitRequest) -> str:
    """The request's slug, or one made from its name."""
    slug = request.slug or _slug_of(request.name)
    if len(slug) < 2:
        raise InvalidFieldError("slug", "The name makes no slug; give one (lowercase letters and digits).")
    if slug in PUBLISHED_LAWS:
        raise InvalidFieldError("slug", f"{slug!r} is a published law's slug; choose another.")
    return slug


def _slug_of(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:63].strip("-")


def fit_target(session: Session, request: FitRequest, *, scope: uuid.UUID | None) -> tuple[Organization, str]:
    """The organisation and slug a fit request's law is to be stored under; refused if either is not
    available to the caller."""
    slug = slug_for(request)
    organization = organizations.named_in_body(session, request.organization, scope=scope)
    _check_slug_free(session, organization, slug)
    return organization, slug


def create_law(
    session: Session,
    request: FitRequest,
    columns: JsonObject,
    *,
    scope: uuid.UUID | None,
    actor: str,
) -> FittedLaw:
    """Store the law fitted (`columns`, from fit_columns) to a validated request; flushed, not committed."""
    organization, slug = fit_target(session, request, scope=scope)
    law = store_law(session, organization.id, slug, request, columns, actor=actor)
    if law is None:
        raise ConflictError(f"A scaling law with slug {slug!r} already exists.")
    return law


def store_law(
    session: Session,
    organization_id: uuid.UUID,
    slug: str,
    request: FitRequest,
    columns: JsonObject,
    *,
    actor: str,
) -> FittedLaw | None:
    """Insert a fitted law; None when its slug was taken meanwhile (nothing is left in the session)."""
    law = FittedLaw(
        organization_id=organization_id, slug=slug, name=request.name, created_by=actor, **columns
    )
    try:
        with session.begin_nested():
            session.add(law)
    except IntegrityError:
        return None
    return law


def submit_fit(session: Session, request: FitRequest, *, scope: uuid.UUID | None, actor: str) -> FitJob:
    """Queue a validated request as a background fit; flushed, not committed."""
    organization, slug = fit_target(session, request, scope=scope)
    job = FitJob(organization=organization, slug=slug, request=to_document(request), created_by=actor)
    try:
        with session.begin_nested():
            session.add(job)
    except IntegrityError:
        raise ConflictError(f"A fit for a scaling law {slug!r} was just queued.") from None
    on_commit(session, metrics.FIT_JOBS.labels(event="queued").inc)
    return job


def _check_slug_free(session: Session, organization: Organization, slug: str) -> None:
    taken = session.scalar(
        select(FittedLaw.id).where(FittedLaw.organization_id == organization.id, FittedLaw.slug == slug)
    )
    if taken is not None:
        raise ConflictError(f"A scaling law with slug {slug!r} already exists.")
    pending = session.scalar(
        select(FitJob.id).where(
            FitJob.organization_id == organization.id,
            FitJob.slug == slug,
            FitJob.status.in_(("queued", "running")),
        )
    )
    if pending is not None:
        raise ConflictError(f"A fit for a scaling law {slug!r} is already under way (job {pending}).")


# --- Reading --------------------------------------------------------------------------------------------


def find_fitted_law(session: Session, slug: str, *, scope: uuid.UUID | None) -> FittedLaw | None:
    """The fitted law a slug names for a caller who sees `scope` (None: every organisation). A slug used
    by several organisations is ambiguous to a caller who sees them all."""
    stmt = select(FittedLaw).where(FittedLaw.slug == slug)
    if scope is not None:
        stmt = stmt.where(FittedLaw.organization_id == scope)
    found = session.scalars(stmt.limit(2)).all()
    if len(found) > 1:
        raise InvalidFieldError(
            "law",
            f"Several organisations have a scaling law {slug!r}; use an API key of the organisation whose "
            "law you mean.",
        )
    return found[0] if found else None


def get_law(session: Session, slug: str, *, scope: uuid.UUID | None) -> engine.NamedLaw | FittedLaw:
    if slug in PUBLISHED_LAWS:
        return engine.published(slug)
    try:
        law = find_fitted_law(session, slug, scope=scope)
    except InvalidFieldError as error:
        raise ConflictError(error.detail) from None
    if law is None:
        raise NotFoundError(f"No scaling law {slug!r}.")
    return law


def published_laws() -> list[engine.NamedLaw]:
    return [engine.published(slug) for slug in PUBLISHED_LAWS]


def named_law(law: FittedLaw) -> engine.NamedLaw:
    """The engine's view of a fitted law, with its bootstrap fits."""
    return _engine_view(law, samples=bootstrap_laws(law))


def engine_law(session: Session, slug: str, *, scope: uuid.UUID | None) -> engine.NamedLaw:
    """The law a slug names, published or fitted, as the engine takes it."""
    law = get_law(session, slug, scope=scope)
    return named_law(law) if isinstance(law, FittedLaw) else law


def _engine_view(law: FittedLaw, samples: tuple[ScalingLaw, ...]) -> engine.NamedLaw:
    return engine.NamedLaw(
        ScalingLaw(**{name: getattr(law, name) for name in COEFFICIENTS}),
        slug=law.slug,
        name=law.name,
        source=_source(law),
        fitted_range=FittedRange(**law.fitted_range),
        samples=samples,
    )


def bootstrap_laws(law: FittedLaw | None) -> tuple[ScalingLaw, ...]:
    return () if law is None else tuple(ScalingLaw(*coefficients) for coefficients in law.bootstrap_laws)


def describe(law: engine.NamedLaw | FittedLaw) -> dict[str, Any]:
    """What GET /v1/scaling-laws shows of a published or a fitted law (ScalingLawSchema). Lists leave a
    fitted law's bootstrap fits unloaded: they are not shown."""
    if isinstance(law, engine.NamedLaw):
        return {**vars(law), "kind": "published", "warnings": []}
    return {
        **vars(_engine_view(law, samples=())),
        "kind": "fitted",
        "id": law.id,
        "organization": law.organization_slug,
        "fit": law.fit,
        "bootstrap": law.bootstrap,
        "isoflop": law.isoflop,
        "warnings": law.warnings,
        "created_by": law.created_by,
        "created_at": law.created_at,
    }


def _source(law: FittedLaw) -> str:
    return f"Fitted to {law.fit['runs']} runs of {law.organization_slug} on {law.created_at:%Y-%m-%d}"


def list_fitted_laws(
    session: Session,
    *,
    scope: uuid.UUID | None,
    organization: str | None,
    limit: int,
    after: Cursor | None,
) -> Page[FittedLaw]:
    """Newest first; lists leave out the runs and bootstrap fits (up to megabytes a law)."""
    stmt = select(FittedLaw).options(defer(FittedLaw.runs), defer(FittedLaw.bootstrap_laws))
    if scope is not None:
        stmt = stmt.where(FittedLaw.organization_id == scope)
    if organization is not None:
        stmt = stmt.where(
            FittedLaw.organization_id
            == select(Organization.id).where(Organization.slug == organization).scalar_subquery()
        )
    return paginate(session, stmt, FittedLaw, limit, after)


def delete_law(session: Session, slug: str, *, scope: uuid.UUID | None, if_match: str | None) -> None:
    law = get_law(session, slug, scope=scope)
    if not isinstance(law, FittedLaw):
        require_if_match(if_match)  # a delete without If-Match is a 428 first, whatever it would delete
        raise ConflictError(f"{slug!r} is a published law; only fitted laws can be deleted.")
    require_version(if_match, law_version(law))
    session.delete(law)
    commit_or(session, ConflictError(f"Plans were made with the scaling law {slug!r}; it is kept for them."))


@overload
def law_version(law: FittedLaw) -> str: ...
@overload
def law_version(law: engine.NamedLaw | FittedLaw) -> str | None: ...
def law_version(law: engine.NamedLaw | FittedLaw) -> str | None:
    """A fitted law never changes: its id is its version (its ETag). Published laws have none."""
    return law.id.hex if isinstance(law, FittedLaw) else None


def get_fit_job(session: Session, job_id: uuid.UUID, *, scope: uuid.UUID | None) -> FitJob:
    stmt = select(FitJob).where(FitJob.id == job_id).options(defer(FitJob.request))
    if scope is not None:
        stmt = stmt.where(FitJob.organization_id == scope)
    job = session.scalars(stmt).first()
    if job is None:
        raise NotFoundError(f"No fit job {job_id}.")
    return job


def lease_expired(job: FitJob, now: datetime) -> bool:
    return job.status == "running" and job.lease_expires_at is not None and job.lease_expires_at < now

"""Scaling laws: published and fitted ones, the fit requests and jobs, IsoFLOP profiles and frontiers."""

from __future__ import annotations

import secrets

import marshmallow as ma
from marshmallow import validate

from service.core import fit
from service.core.units import MAX_FLOPS, MAX_PARAMS, MAX_TOKENS
from service.schemas.common import (
    GREATER_THAN,
    CaveatSchema,
    ListQuerySchema,
    PageSchema,
    StrictSchema,
    excludes,
    one_at_least,
)
from service.schemas.fields import (
    SLUG_PATTERN,
    BoundedList,
    PairField,
    Text,
    WholeNumber,
    budget_float,
    positive_float,
    slug_field,
)
from service.schemas.planning import AllocationPointSchema, LawSchema
from service.services.laws import Bootstrap, FitRequest, Runs

MAX_FIT_RUNS = fit.MAX_RUNS
MAX_BOOTSTRAP_SAMPLES = 5_000
MAX_BOOTSTRAP_WORK = 20_000_000  # samples x runs: a bootstrap job of a few minutes at most


class FitRunSchema(StrictSchema):
    """One training run: the model's size, its tokens (or its compute), and the loss it reached."""

    params = positive_float(MAX_PARAMS, "Parameters of the model trained.", required=True)
    tokens = positive_float(MAX_TOKENS, "Tokens it was trained on (or give flops).")
    flops = positive_float(MAX_FLOPS, "Its training compute, 6·params·tokens (instead of tokens).")
    loss = positive_float(100, "Final loss (nats per token) on held-out data.", required=True)

    RULES = (
        one_at_least(("tokens", "flops"), "Give either tokens or flops.", at="tokens"),
        excludes("tokens", "flops", "Give either tokens or flops.", at="tokens"),
    )


class BootstrapRequestSchema(StrictSchema):
    samples = WholeNumber(
        required=True,
        validate=validate.Range(10, MAX_BOOTSTRAP_SAMPLES),
        metadata={"description": "Resamples of the runs to fit; 1 000 is usual.", "example": 1000},
    )
    seed = WholeNumber(
        validate=validate.Range(0, 2**32 - 1),
        metadata={"description": "Seed of the resampling (reported back; chosen at random if omitted)."},
    )


class FitRequestSchema(StrictSchema):
    organization = ma.fields.String(
        required=True,
        validate=validate.Regexp(SLUG_PATTERN),
        metadata={"description": "Slug of the (existing) organisation the law is for.", "example": "acme"},
    )
    name = Text(
        required=True, validate=validate.Length(min=1, max=200), metadata={"example": "Acme 2026 sweep"}
    )
    slug = slug_field(metadata={"description": "How plans name the law; made from the name if omitted."})
    runs = BoundedList(
        ma.fields.Nested(FitRunSchema),
        required=True,
        validate=validate.Length(
            min=fit.MIN_RUNS,
            max=MAX_FIT_RUNS,
            error=f"Give at least {fit.MIN_RUNS} runs, at most {MAX_FIT_RUNS}.",
        ),
        metadata={
            "description": f"At least {fit.MIN_RUNS} runs of at least {fit.MIN_MODEL_SIZES} model sizes, "
            f"{fit.MIN_RUNS} of them at distinct (params, tokens), with losses that fall with scale "
            f"(params x tokens); at most {MAX_FIT_RUNS}."
        },
    )
    bootstrap = ma.fields.Nested(BootstrapRequestSchema)

    @ma.validates_schema
    def _bounded_bootstrap(self, data, **kwargs):
        samples = data.get("bootstrap", {}).get("samples", 0)
        if samples * len(data.get("runs", [])) > MAX_BOOTSTRAP_WORK:
            raise ma.ValidationError(
                f"Too much work: samples x runs must be at most {MAX_BOOTSTRAP_WORK:,}.", "bootstrap"
            )

    @ma.post_load
    def _as_request(self, data, **kwargs) -> FitRequest:
        """Runs as columns of params, tokens (from flops where given) and loss, as fits read them; a seed
        drawn for a bootstrap without one, so that the fit can be repeated."""
        runs, bootstrap = data.pop("runs"), data.pop("bootstrap", None)
        columns = Runs(
            params=tuple(run["params"] for run in runs),
            tokens=tuple(
                run["tokens"] if "tokens" in run else run["flops"] / (6 * run["params"]) for run in runs
            ),
            loss=tuple(run["loss"] for run in runs),
        )
        if bootstrap is not None:
            seed = bootstrap["seed"] if "seed" in bootstrap else secrets.randbits(32)
            bootstrap = Bootstrap(samples=bootstrap["samples"], seed=seed)
        return FitRequest(**data, runs=columns, bootstrap=bootstrap)


class CoefficientIntervalsSchema(ma.Schema):
    E = PairField()
    A = PairField()
    B = PairField()
    alpha = PairField()
    beta = PairField()
    a = PairField()
    b = PairField()


class BootstrapSchema(ma.Schema):
    samples = ma.fields.Integer()
    seed = ma.fields.Integer()
    confidence = ma.fields.Float(metadata={"example": 0.95})
    unusable = ma.fields.Integer(metadata={"description": "Resamples whose fit failed; left out."})
    intervals = ma.fields.Nested(
        CoefficientIntervalsSchema, metadata={"description": "Percentile interval [low, high] of each."}
    )


class RatioSchema(ma.Schema):
    flops = ma.fields.Float()
    tokens_per_param = ma.fields.Float()


class FitStatisticsSchema(ma.Schema):
    method = ma.fields.String(metadata={"example": "huber-lbfgs"})
    huber_delta = ma.fields.Float()
    starts = ma.fields.Integer(
        metadata={"description": "L-BFGS starts of the grid; the best end point is kept."}
    )
    runs = ma.fields.Integer()
    objective = ma.fields.Float(metadata={"description": "Summed Huber loss of log-loss residuals."})
    converged = ma.fields.Boolean()
    rmse_log_loss = ma.fields.Float()
    max_abs_log_residual = ma.fields.Float()
    tokens_per_param = ma.fields.List(
        ma.fields.Nested(RatioSchema),
        metadata={"description": "D_opt/N_opt the law implies at a few budgets."},
    )


class IsoflopBudgetSchema(ma.Schema):
    flops = ma.fields.Float()
    optimal_params = ma.fields.Float()
    optimal_tokens = ma.fields.Float()
    optimal_loss = ma.fields.Float()
    runs = ma.fields.Integer()


class SkippedBudgetSchema(ma.Schema):
    flops = ma.fields.Float()
    runs = ma.fields.Integer()
    reason = ma.fields.String()


class IsoflopFitSchema(ma.Schema):
    """Chinchilla's Approach 2 on the same runs: a parabola of loss in ln N per budget, then power laws."""

    available = ma.fields.Boolean()
    reason = ma.fields.String(metadata={"description": "Why the runs do not allow it (when unavailable)."})
    a = ma.fields.Float(metadata={"description": "N_opt ∝ C^a"})
    b = ma.fields.Float(metadata={"description": "D_opt ∝ C^b"})
    params_coefficient = ma.fields.Float(metadata={"description": "N_opt = params_coefficient·C^a"})
    tokens_coefficient = ma.fields.Float(metadata={"description": "D_opt = tokens_coefficient·C^b"})
    budgets = ma.fields.List(ma.fields.Nested(IsoflopBudgetSchema))
    skipped = ma.fields.List(ma.fields.Nested(SkippedBudgetSchema))
    tokens_per_param = ma.fields.List(ma.fields.Nested(RatioSchema))


class MoEDesignSchema(ma.Schema):
    """The fine-grained mixture of experts an MoE law assumes (Krajewski et al. 2024, §4): each feed-forward
    layer split into `experts` experts of 1/`granularity` its width, `experts_per_token` of them per token."""

    expansion_rate = ma.fields.Integer(
        metadata={"description": "Parameters of an MoE layer over those of the dense one it replaces."}
    )
    granularity = ma.fields.Integer(
        metadata={"description": "Dense feed-forward width over an expert's width."}
    )
    experts = ma.fields.Integer(
        metadata={"description": "Experts per MoE layer: expansion_rate x granularity."}
    )
    experts_per_token = ma.fields.Integer()
    total_to_active_params = ma.fields.Float(
        metadata={
            "description": "All non-embedding parameters over those a token uses (43 at expansion rate "
            "64). The law's N (E, A, B, alpha, beta, a, b, G) is active parameters; fitted_range counts all."
        }
    )


class ScalingLawSchema(LawSchema):
    """A published law, or one fitted to an organisation's runs (which adds how it was fitted)."""

    kind = ma.fields.String(metadata={"enum": ["published", "fitted"]})
    counts_embeddings = ma.fields.Boolean(
        metadata={
            "description": "Whether the law's N counts the embedding and output layers (Hoffmann et al. 2022 "
            "do, Kaplan et al. 2020 and Krajewski et al. 2024 do not). Fitted laws: true, as the service "
            "takes the params it is given to count them."
        }
    )
    moe = ma.fields.Nested(
        MoEDesignSchema,
        allow_none=True,
        metadata={"description": "The mixture-of-experts design of an MoE law; null for dense laws."},
    )
    id = ma.fields.UUID(allow_none=True)
    organization = ma.fields.String(allow_none=True)
    fit = ma.fields.Nested(FitStatisticsSchema, allow_none=True)
    bootstrap = ma.fields.Nested(BootstrapSchema, allow_none=True)
    isoflop = ma.fields.Nested(IsoflopFitSchema, allow_none=True)
    warnings = ma.fields.List(ma.fields.Nested(CaveatSchema))
    created_by = ma.fields.String(allow_none=True)
    created_at = ma.fields.AwareDateTime(allow_none=True)


class LawPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(ScalingLawSchema), required=True)


class LawQuerySchema(ListQuerySchema):
    organization = ma.fields.String(
        validate=validate.Regexp(SLUG_PATTERN),
        metadata={"description": "Only this organisation's fitted laws."},
    )
    kind = ma.fields.String(validate=validate.OneOf(["published", "fitted"]))


FIT_JOB_STATUSES = ("queued", "running", "succeeded", "failed")


class FitJobSchema(ma.Schema):
    id = ma.fields.UUID()
    organization = ma.fields.String(attribute="organization_slug")
    slug = ma.fields.String(metadata={"description": "The slug the law will have."})
    status = ma.fields.String(metadata={"enum": list(FIT_JOB_STATUSES)})
    law = ma.fields.Function(
        lambda job: f"/v1/scaling-laws/{job.slug}" if job.status == "succeeded" and job.law_id else None,
        allow_none=True,
        metadata={"type": "string", "description": "Path of the law once the job has succeeded."},
    )
    error = ma.fields.Dict(
        allow_none=True, metadata={"description": "Problem details saying why a failed job failed."}
    )
    attempt = ma.fields.Integer(
        metadata={"description": "Runs so far (a job whose process stopped is resumed)."}
    )
    created_by = ma.fields.String()
    created_at = ma.fields.AwareDateTime()
    started_at = ma.fields.AwareDateTime(allow_none=True)
    finished_at = ma.fields.AwareDateTime(allow_none=True)


class IsoflopQuerySchema(StrictSchema):
    flops = budget_float("The fixed budget.", field=ma.fields.Float, required=True)
    points = ma.fields.Integer(load_default=41, validate=validate.Range(3, 401))
    span = ma.fields.Float(
        load_default=10.0,
        allow_nan=False,
        validate=validate.Range(1, 1e4, min_inclusive=False),
        metadata={"description": "Sizes from N_opt/span to N_opt·span.", "exclusiveMinimum": True},
    )


class IsoflopSchema(ma.Schema):
    law = ma.fields.String()
    flops = ma.fields.Float()
    optimal = ma.fields.Nested(AllocationPointSchema)
    points = ma.fields.List(ma.fields.Nested(AllocationPointSchema))


class FrontierQuerySchema(StrictSchema):
    min_flops = budget_float("Smallest budget.", field=ma.fields.Float, required=True)
    max_flops = budget_float(
        "Largest budget.",
        field=ma.fields.Float,
        required=True,
        metadata={GREATER_THAN: "min_flops"},
    )
    points = ma.fields.Integer(load_default=21, validate=validate.Range(2, 401))


class FrontierSchema(ma.Schema):
    law = ma.fields.String()
    points = ma.fields.List(ma.fields.Nested(AllocationPointSchema))

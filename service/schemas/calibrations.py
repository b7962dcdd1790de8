"""The cluster model against measured runs: the accuracy report, and an organisation's calibrations."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate

from service.schemas.common import NOT_LESS_THAN, ListQuerySchema, PageSchema, StrictSchema
from service.schemas.fields import SLUG_PATTERN, UtcDateTime
from service.services.calibrations import MAX_RUNS, CalibrationRequest

# --- GET /v1/reports/model-accuracy ----------------------------------------------------------------------


class ModelAccuracyQuerySchema(StrictSchema):
    organization = ma.fields.String(
        validate=validate.Regexp(SLUG_PATTERN),
        metadata={"description": "Only this organisation's plans (an admin's choice; others see their own)."},
    )
    hardware = ma.fields.String(
        validate=validate.Regexp(SLUG_PATTERN), metadata={"description": "Only plans on this profile."}
    )
    from_ = UtcDateTime(
        data_key="from",
        metadata={"description": "Only usage periods starting at or after (inclusive), ISO 8601."},
    )
    to = UtcDateTime(
        metadata={"description": "Only usage periods starting before (exclusive).", NOT_LESS_THAN: "from"}
    )
    detail = ma.fields.Boolean(
        load_default=False, metadata={"description": "true: each profile lists its plans (`plans`)."}
    )


class RunAccuracySchema(ma.Schema):
    """One plan: the throughput its result predicted for its layout against the one measured."""

    plan_id = ma.fields.UUID()
    name = ma.fields.String(allow_none=True)
    organization = ma.fields.String()
    status = ma.fields.String()
    accelerators = ma.fields.Integer()
    layout = ma.fields.String(
        metadata={"description": "The layout it was planned with, or the MFU it was planned at."}
    )
    modelled = ma.fields.Boolean(
        metadata={"description": "Whether the cluster model set its pace (false: an MFU given)."}
    )
    calibration_id = ma.fields.String(
        allow_none=True,
        metadata={"description": "The organisation's calibration it was planned with; null: published."},
    )
    predicted_tokens_per_second = ma.fields.Float(
        metadata={"description": "Of the whole cluster while training, as the plan's result predicts."}
    )
    measured_tokens_per_second = ma.fields.Float(
        metadata={"description": "Mean of its usage records' tokens_per_second weighted by their periods."}
    )
    error = ma.fields.Float(metadata={"description": "measured / predicted - 1 (positive: faster)."})
    periods = ma.fields.Integer(metadata={"description": "Usage records with a throughput, not reversed."})
    hours = ma.fields.Float(metadata={"description": "Wall-clock hours those periods cover."})
    accelerator_hours = ma.fields.Float()


class HardwareAccuracySchema(ma.Schema):
    """The prediction error on one hardware profile."""

    hardware = ma.fields.String(allow_none=True, metadata={"description": "Slug; null for inline hardware."})
    runs = ma.fields.Integer(metadata={"description": "Plans with measured throughput."})
    periods = ma.fields.Integer()
    hours = ma.fields.Float()
    accelerator_hours = ma.fields.Float()
    mean_error = ma.fields.Float()
    median_error = ma.fields.Float()
    rms_error = ma.fields.Float()
    worst_error = ma.fields.Float(metadata={"description": "The error of largest magnitude, signed."})
    worst_plan_id = ma.fields.UUID()
    plans = ma.fields.List(
        ma.fields.Nested(RunAccuracySchema),
        allow_none=True,
        metadata={"description": "With detail=true, newest first; null otherwise."},
    )


class ModelAccuracySchema(ma.Schema):
    """Measured throughput against the cluster model's prediction, per hardware profile; no rows when
    nothing is measured."""

    organization = ma.fields.String(attribute="query.organization", allow_none=True)
    hardware = ma.fields.String(attribute="query.hardware", allow_none=True)
    start = ma.fields.AwareDateTime(attribute="query.start", data_key="from", allow_none=True)
    to = ma.fields.AwareDateTime(attribute="query.end", allow_none=True)
    rows = ma.fields.List(ma.fields.Nested(HardwareAccuracySchema))


# --- /v1/calibrations --------------------------------------------------------------------------------------


class CalibrationRequestSchema(StrictSchema):
    """POST /v1/calibrations: fit an organisation's large-GEMM efficiency on one hardware profile."""

    organization = ma.fields.String(
        required=True,
        validate=validate.Regexp(SLUG_PATTERN, error="Must be an organization slug."),
        metadata={"example": "acme"},
    )
    hardware = ma.fields.String(
        required=True,
        validate=validate.Regexp(SLUG_PATTERN, error="Must be a hardware profile's slug."),
        metadata={"example": "h100-sxm"},
    )
    plans = ma.fields.List(
        ma.fields.UUID(),
        validate=validate.Length(min=1, max=MAX_RUNS),
        metadata={
            "description": "The plans to fit on: the organisation's, on the hardware, planned by the cluster "
            f"model, with measured throughput. Default: all such plans (the newest {MAX_RUNS})."
        },
    )

    REQUEST = CalibrationRequest


class CalibratedRunSchema(ma.Schema):
    plan_id = ma.fields.String()
    name = ma.fields.String(allow_none=True)
    periods = ma.fields.Integer()
    hours = ma.fields.Float()
    measured_tokens_per_second = ma.fields.Float()
    predicted_tokens_per_second_before = ma.fields.Float(
        metadata={"description": "As the plan's result predicted it."}
    )
    predicted_tokens_per_second_after = ma.fields.Float(
        metadata={"description": "At its layout with the fitted efficiency."}
    )
    error_before = ma.fields.Float()
    error_after = ma.fields.Float()
    tokens_trained = ma.fields.Float(metadata={"description": "As its usage reported, in all."})
    actual_accelerator_hours = ma.fields.Float(metadata={"description": "Its usage records' total."})
    paced_accelerator_hours = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "What its tokens take at its measured pace with failures and checkpoints paid; "
            "null when it reported no tokens."
        },
    )


class RunOverheadFitSchema(ma.Schema):
    method = ma.fields.String()
    runs = ma.fields.Integer(metadata={"description": "The runs that reported the tokens they trained."})
    paced_accelerator_hours = ma.fields.Float()
    actual_accelerator_hours = ma.fields.Float()
    clipped = ma.fields.Boolean(
        metadata={"description": "The runs took less than their pace says (0) or lost more than 0.9."}
    )
    default = ma.fields.Float(
        metadata={"description": "The overhead in force before: the hardware profile's, or the default."}
    )


class ErrorSummarySchema(ma.Schema):
    runs = ma.fields.Integer()
    mean = ma.fields.Float()
    median = ma.fields.Float()
    rms = ma.fields.Float()
    worst = ma.fields.Float()


class PreviousCalibrationSchema(ma.Schema):
    id = ma.fields.String()
    matmul_efficiency = ma.fields.Float()


class CalibrationFitSchema(ma.Schema):
    method = ma.fields.String()
    model_version = ma.fields.String()
    default_matmul_efficiency = ma.fields.Float(
        metadata={
            "description": "What the cluster model ran the hardware at before: its profile's efficiency at "
            "the runs' precision, or the default of uncalibrated hardware."
        }
    )
    previous = ma.fields.Nested(
        PreviousCalibrationSchema,
        allow_none=True,
        metadata={"description": "The calibration in force before this one."},
    )
    objective = ma.fields.Float(metadata={"description": "Mean squared log error at the efficiency."})
    at_bound = ma.fields.Boolean(
        metadata={"description": "The efficiency is an end of `bounds`: the runs want more (or less)."}
    )
    bounds = ma.fields.List(ma.fields.Float())
    errors_before = ma.fields.Nested(ErrorSummarySchema)
    errors_after = ma.fields.Nested(ErrorSummarySchema)
    run_overhead = ma.fields.Nested(
        RunOverheadFitSchema,
        allow_none=True,
        metadata={"description": "How run_overhead was fitted; null when no run reported tokens trained."},
    )


class CalibrationSchema(ma.Schema):
    """An organisation's large-GEMM efficiency for one hardware profile, fitted to its runs. The newest of an
    (organisation, hardware) is in force: its later plans there use it and name it."""

    id = ma.fields.UUID()
    organization = ma.fields.String(attribute="organization_slug")
    hardware = ma.fields.String(attribute="hardware_slug")
    matmul_efficiency = ma.fields.Float(metadata={"description": "Large-GEMM fraction of the dense peak."})
    run_overhead = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "The share of the runs' actual accelerator-hours beyond their measured pace, "
            "failures and checkpoints: the organisation's later plans on the hardware lose it (unless a "
            "request states its own). Null when no run reported the tokens it trained."
        },
    )
    runs = ma.fields.List(ma.fields.Nested(CalibratedRunSchema))
    fit = ma.fields.Nested(CalibrationFitSchema)
    created_by = ma.fields.String(metadata={"description": "Key id of the creator."})
    created_at = ma.fields.AwareDateTime()


class CalibrationQuerySchema(ListQuerySchema):
    organization = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))
    hardware = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))


class CalibrationPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(CalibrationSchema), required=True)


class OwnCalibrationSchema(ma.Schema):
    """The organisation's calibration a plan was made with (from its snapshot)."""

    id = ma.fields.String()
    hardware = ma.fields.String()
    matmul_efficiency = ma.fields.Float()
    default_matmul_efficiency = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "The efficiency the hardware's profile states at the plan's precision (or the "
            "default of uncalibrated hardware), which this replaced; null in plans from before profiles "
            "stated one."
        },
    )
    runs = ma.fields.Integer(metadata={"description": "The measured runs it was fitted on."})
    run_overhead = ma.fields.Float(
        allow_none=True, metadata={"description": "The run overhead it fitted; null: none fitted."}
    )
    created_at = ma.fields.String()

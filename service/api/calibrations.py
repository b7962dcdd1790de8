"""The cluster model against measured runs: the accuracy report, and an organisation's own calibrations."""

from __future__ import annotations

from service.api.base import LINK_HEADER, LOCATION_HEADER, Blueprint, page_response
from service.api.idempotency import REPLAYED_HEADER_DOC, idempotent
from service.infra.db import get_session
from service.schemas.calibrations import (
    CalibrationPageSchema,
    CalibrationQuerySchema,
    CalibrationRequestSchema,
    CalibrationSchema,
    ModelAccuracyQuerySchema,
    ModelAccuracySchema,
)
from service.services import calibrations, model_accuracy
from service.web.auth import READERS, requires, scope

blp = Blueprint(
    "calibrations",
    __name__,
    url_prefix="/v1/calibrations",
    description="An organisation's own constants for the cluster model, fitted to its measured runs",
)
# Beside the cost reports under /v1/reports, a blueprint of its own.
accuracy_blp = Blueprint(
    "model-accuracy",
    __name__,
    url_prefix="/v1/reports",
    description="The cluster model's predictions against measured throughput",
)


@accuracy_blp.get("/model-accuracy", operation_id="getModelAccuracyReport")
@requires(*READERS)
@accuracy_blp.arguments(ModelAccuracyQuerySchema, location="query", as_kwargs=True)
@accuracy_blp.response(200, ModelAccuracySchema)
def model_accuracy_report(*, detail, from_=None, to=None, organization=None, hardware=None):
    """How far the cluster model's predicted throughput is from measured throughput, per hardware profile:
    over plans with usage records that report tokens_per_second (reversed records left out), the runs,
    periods and hours measured, and the mean, median, RMS and worst relative error (measured / predicted -
    1); with detail=true, each plan. Predicted is the plan's stored prediction for its layout (tokens per
    second of the whole cluster while training); measured, the mean of its records' throughput weighted by
    their periods. Nothing measured: no rows."""
    query = model_accuracy.AccuracyQuery(
        organization=organization, hardware=hardware, start=from_, end=to, detail=detail
    )
    return model_accuracy.model_accuracy(get_session(), query, scope=scope())


@blp.get("", operation_id="listCalibrations")
@requires(*READERS)
@blp.arguments(CalibrationQuerySchema, location="query", as_kwargs=True)
@blp.response(200, CalibrationPageSchema, headers=LINK_HEADER)
def list_calibrations(limit, cursor, organization=None, hardware=None):
    """Calibrations, newest first (the first of an organisation and hardware is in force); filter by
    organization and hardware."""
    page = calibrations.list_calibrations(
        get_session(),
        scope=scope(),
        organization=organization,
        hardware=hardware,
        limit=limit,
        after=cursor,
    )
    return page_response(page, limit)


@blp.post("", operation_id="createCalibration")
@requires("planner", "finance")
@idempotent(blp)
@blp.arguments(CalibrationRequestSchema)
@blp.response(201, CalibrationSchema, headers={**LOCATION_HEADER, **REPLAYED_HEADER_DOC})
def create_calibration(request):
    """Fit the organisation's large-GEMM efficiency on a hardware profile so that the cluster model's
    throughput for its runs' layouts matches their measured throughput (least squared log error), and keep
    it with those runs. From now on the organisation's plans on that hardware use it, and say so
    (`calibration` in the plan, a `calibrated` warning in its result).

    A 422 names the field: an unknown organisation or hardware, no measured run there (`hardware`), and a
    plan in `plans` that is not the organisation's, not on the hardware, not measured or planned at a given
    MFU (`plans/<index>`)."""
    calibration = calibrations.create_calibration(get_session(), request, scope=scope())
    return calibration, {"Location": f"/v1/calibrations/{calibration.id}"}


@blp.get("/<uuid:calibration_id>", operation_id="getCalibration")
@requires(*READERS)
@blp.response(200, CalibrationSchema)
@blp.alt_response(404, response="NOT_FOUND")
def get_calibration(calibration_id):
    """One calibration: the efficiency, the runs it came from, and the fit."""
    return calibrations.get_calibration(get_session(), calibration_id, scope=scope())

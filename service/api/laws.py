"""Scaling laws: the published coefficient sets, laws fitted to an organisation's runs, and their curves."""

from __future__ import annotations

import csv
import io

import flask
import marshmallow as ma
from sqlalchemy.orm import Session
from werkzeug.exceptions import BadRequest

from service.api.base import (
    ETAG_HEADER,
    LINK_HEADER,
    LOCATION_HEADER,
    Blueprint,
    conditional_read,
    conditional_write,
    if_match,
    page_response,
)
from service.api.idempotency import REPLAYED_HEADER_DOC, idempotent
from service.data.models import utcnow
from service.infra.db import get_session
from service.schemas.common import requires as needs  # a rule between fields (auth's `requires` guards views)
from service.schemas.common import rules_json
from service.schemas.fields import numeral
from service.schemas.laws import (
    FitJobSchema,
    FitRequestSchema,
    FrontierQuerySchema,
    FrontierSchema,
    IsoflopQuerySchema,
    IsoflopSchema,
    LawPageSchema,
    LawQuerySchema,
    ScalingLawSchema,
)
from service.services import laws, planning
from service.services.preconditions import etag
from service.web.auth import READERS, current_principal, requires, scope
from service.workers import jobs

blp = Blueprint("scaling-laws", __name__, url_prefix="/v1/scaling-laws", description="Scaling laws")
jobs_blp = Blueprint("fit-jobs", __name__, url_prefix="/v1/fit-jobs", description="Background fits")

CSV_COLUMNS = ("params", "tokens", "flops", "loss")
FORM_FIELDS = frozenset({"organization", "name", "slug", "bootstrap_samples", "bootstrap_seed"})
RETRY_AFTER_SECONDS = 2  # how soon to poll a fit job
PREFER_PARAMETER = {
    "in": "header",
    "name": "Prefer",
    "required": False,
    "schema": {"type": "string", "example": "respond-async"},
    "description": "`respond-async` queues the fit as a job whatever its size (RFC 7240).",
}
BOOTSTRAP_REQUEST = "#/components/schemas/BootstrapRequest"
FIT_REQUEST_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": "FitRequest"},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["organization", "name", "runs"],
                # A seed alone makes a bootstrap without samples (refused at #/bootstrap/samples).
                **rules_json((needs("bootstrap_seed", "bootstrap_samples"),)),
                # The fields of the JSON body, by reference: one rule for both.
                "properties": {
                    **{
                        name: {"$ref": f"#/components/schemas/FitRequest/properties/{name}"}
                        for name in ("organization", "name", "slug")
                    },
                    # Text, not `format: binary`: the part is read as UTF-8 text, which a string states (and
                    # schemathesis 4.32 crashes on a binary property beside the rule above).
                    "runs": {
                        "type": "string",
                        "description": "CSV text with a header row: params, loss, and tokens or flops. "
                        "A file part (`-F runs=@runs.csv`) or a field; UTF-8 either way, else a 422.",
                    },
                    **{
                        f"bootstrap_{name}": {"$ref": f"{BOOTSTRAP_REQUEST}/properties/{name}"}
                        for name in ("samples", "seed")
                    },
                },
            },
            "encoding": {"runs": {"contentType": "text/csv"}},
        },
    },
}


@blp.get("", operation_id="listScalingLaws")
@requires(*READERS)
@blp.arguments(LawQuerySchema, location="query", as_kwargs=True)
@blp.response(200, LawPageSchema, headers=LINK_HEADER)
def list_laws(limit, cursor, organization=None, kind=None):
    """The published laws (on the first page), then the fitted laws you can see, newest first."""
    published = [] if cursor or organization or kind == "fitted" else laws.published_laws()
    if kind == "published":
        return {"items": [laws.describe(law) for law in published], "next_cursor": None}
    page = laws.list_fitted_laws(
        get_session(), scope=scope(), organization=organization, limit=limit, after=cursor
    )
    body, headers = page_response(page, limit)
    body["items"] = [laws.describe(law) for law in (*published, *page.items)]
    return body, headers


def _prepare_fit(reads: Session) -> tuple[dict, dict | None]:
    """Validate, check where the law would go, and fit (unless it is to run as a job: then no columns):
    before the request's transaction, which on SQLite holds the write lock. The target is checked again when
    the law is stored."""
    request = FitRequestSchema().load(_fit_body())
    in_background = laws.runs_in_background(request, prefer_async=_prefers_async())
    laws.fit_target(reads, request, scope=scope())
    return request, None if in_background else laws.fit_columns(request)


@blp.post("", operation_id="fitScalingLaw")
@requires("planner")
@idempotent(blp, parameters=(PREFER_PARAMETER,), prepare=_prepare_fit)
@blp.doc(requestBody=FIT_REQUEST_BODY)
@blp.response(201, ScalingLawSchema, headers={**LOCATION_HEADER, **ETAG_HEADER, **REPLAYED_HEADER_DOC})
@blp.alt_response(
    202,
    schema=FitJobSchema,
    description="Queued as a background fit: poll the job at Location.",
    headers={
        **LOCATION_HEADER,
        **REPLAYED_HEADER_DOC,
        "Retry-After": {"description": "Seconds to wait before polling.", "schema": {"type": "integer"}},
        "Preference-Applied": {
            "description": "`respond-async` when the request asked for it (RFC 7240).",
            "schema": {"type": "string"},
        },
    },
)
@blp.alt_response(413, response="REQUEST_ENTITY_TOO_LARGE")
def fit_law(prepared):
    """Fit L = E + A/N^alpha + B/D^beta to your training runs and store it as a law plans can use.

    Runs come as JSON, or as a CSV file (columns params, loss, and tokens or flops) in a multipart form. The
    fit is Hoffmann et al.'s, as corrected by Besiroglu et al. 2024: summed Huber loss (delta 1e-3) of
    log-loss residuals, L-BFGS from 4 500 starts. With `bootstrap`, resamples give intervals for every
    coefficient and, later, for the allocations made with the law. Chinchilla's IsoFLOP method (Approach 2)
    is run on the same runs when they allow it.

    Small fits (up to 500 runs and 200 bootstrap samples) answer 201 with the law. Larger ones, and any sent
    with `Prefer: respond-async`, answer 202 with a job to poll at Location.
    """
    request, columns = prepared
    session, actor = get_session(), current_principal().key_id
    if columns is None:  # a job's to fit
        job = laws.submit_fit(session, request, scope=scope(), actor=actor)
        jobs.wake_runner()
        headers = {"Location": f"/v1/fit-jobs/{job.id}", "Retry-After": str(RETRY_AFTER_SECONDS)}
        if _prefers_async():
            headers["Preference-Applied"] = "respond-async"
        return flask.make_response(FitJobSchema().dump(job), 202, headers)
    law = laws.create_law(session, request, columns, scope=scope(), actor=actor)
    return laws.describe(law), 201, {"Location": f"/v1/scaling-laws/{law.slug}", **_etag(law)}


def _etag(law) -> dict[str, str]:
    version = laws.law_version(law)
    return {} if version is None else {"ETag": etag(version)}


def _prefers_async() -> bool:
    preferences = flask.request.headers.get("Prefer", "")
    return any(item.strip().lower() == "respond-async" for item in preferences.split(","))


def _fit_body() -> dict:
    request = flask.request
    if request.mimetype != "multipart/form-data":
        try:
            return request.get_json()
        except RecursionError:  # Werkzeug makes a 400 of a ValueError only
            raise BadRequest("The request body is not valid JSON.") from None
    form = request.form
    # A part without a name arrives under None.
    fields = FORM_FIELDS | {"runs"}  # the runs come as a file part or as a field
    unknown = sorted(str(name) for name in (set(form) - fields) | (set(request.files) - {"runs"}))
    if unknown:
        raise ma.ValidationError({name: ["Unknown field."] for name in unknown})
    if "runs" in form and "runs" in request.files:
        raise ma.ValidationError({"runs": ["Send the runs once: as a file part or as a field."]})
    body: dict = {name: form[name] for name in ("organization", "name", "slug") if name in form}
    bootstrap = {
        name: numeral(form[f"bootstrap_{name}"])
        for name in ("samples", "seed")
        if f"bootstrap_{name}" in form
    }
    if bootstrap:
        body["bootstrap"] = bootstrap
    upload = request.files.get("runs")
    if upload is not None:
        body["runs"] = _csv_runs(upload.stream)
    elif "runs" in form:  # a part without a file name: Werkzeug has decoded it already
        body["runs"] = _csv_runs(io.BytesIO(form["runs"].encode("utf-8")))
    else:
        raise ma.ValidationError({"runs": ["Missing data for required field: a CSV file."]})
    return body


def _csv_runs(stream) -> list[dict]:
    """CSV rows as runs, their cells read as numbers where they are numerals (the schema then validates
    them as it does JSON's)."""
    try:
        reader = csv.DictReader(io.TextIOWrapper(stream, encoding="utf-8-sig", newline=""))
        columns = [name.strip().lower() for name in reader.fieldnames or []]
        unknown = sorted(set(columns) - set(CSV_COLUMNS))
        if unknown or not columns:
            raise ma.ValidationError(
                {"runs": [f"The CSV header must name params, loss, and tokens or flops; got {columns}."]}
            )
        reader.fieldnames = columns
        runs: list[dict[str, int | float | str]] = []
        for row in reader:
            if None in row:  # the csv module files cells beyond the header under None
                raise ma.ValidationError(
                    {"runs": {len(runs): [f"Line {reader.line_num} has more cells than the header."]}}
                )
            runs.append({name: numeral(value) for name, value in row.items() if value not in (None, "")})
        return runs
    except (UnicodeDecodeError, csv.Error) as error:
        raise ma.ValidationError({"runs": [f"Not a UTF-8 CSV file: {error}."]}) from None


@blp.get("/<slug:slug>", operation_id="getScalingLaw")
@requires(*READERS)
@blp.response(200, ScalingLawSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
@conditional_read(blp)
def get_law(slug):
    """One scaling law: published, or fitted by your organisation (with an ETag).

    409 for an admin key when several organisations have a fitted law with this slug: use a key of the
    organisation whose law you mean.
    """
    law = laws.get_law(get_session(), slug, scope=scope())
    return laws.describe(law), 200, _etag(law)


@blp.delete("/<slug:slug>", operation_id="deleteScalingLaw")
@requires("planner")
@conditional_write(blp)
@blp.response(204)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
def delete_law(slug):
    """Delete a fitted law; refused (409) once plans have used it, and for published laws."""
    laws.delete_law(get_session(), slug, scope=scope(), if_match=if_match())


@blp.get("/<slug:slug>/isoflop", operation_id="getIsoflopCurve")
@requires(*READERS)
@blp.arguments(IsoflopQuerySchema, location="query", as_kwargs=True)
@blp.response(200, IsoflopSchema)
@blp.alt_response(404, response="NOT_FOUND")
def isoflop(slug, flops, points, span):
    """Loss against model size at a fixed budget (an IsoFLOP profile), for charts."""
    return planning.isoflop(laws.engine_law(get_session(), slug, scope=scope()), flops, points, span)


@blp.get("/<slug:slug>/frontier", operation_id="getComputeFrontier")
@requires(*READERS)
@blp.arguments(FrontierQuerySchema, location="query", as_kwargs=True)
@blp.response(200, FrontierSchema)
@blp.alt_response(404, response="NOT_FOUND")
def frontier(slug, min_flops, max_flops, points):
    """The compute-optimal model size, tokens and loss over a range of budgets, for charts."""
    law = laws.engine_law(get_session(), slug, scope=scope())
    return planning.frontier(law, min_flops, max_flops, points)


@jobs_blp.get("/<uuid:job_id>", operation_id="getFitJob")
@requires(*READERS)
@jobs_blp.response(200, FitJobSchema)
@jobs_blp.alt_response(404, response="NOT_FOUND")
def get_fit_job(job_id):
    """A background fit: queued, running, succeeded (with the path of its law) or failed (with why)."""
    job = laws.get_fit_job(get_session(), job_id, scope=scope())
    if job.status == "queued" or laws.lease_expired(job, utcnow()):
        jobs.wake_runner()  # its runner may have stopped: have this process's runner look
    headers = {} if job.status in ("succeeded", "failed") else {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return job, 200, headers

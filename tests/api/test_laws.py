"""/v1/scaling-laws and /v1/fit-jobs over HTTP: fitting a law to an organisation's runs (JSON or a CSV
upload), its bootstrap intervals, background fits and their runners, planning with a fitted law, and who
sees what.

The runs are drawn from a known law with seeded noise; a fit costs about 2 s, so tests that only need a law
to exist store one fitted once per process (`stored_law`) rather than fitting again.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import math
import uuid
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, update
from werkzeug.datastructures import MultiDict

from service.core.laws import PUBLISHED_LAWS, ScalingLaw
from service.data.models import FitJob, FittedLaw, IdempotencyRecord, Organization, Plan, utcnow
from service.infra.db import get_db
from service.schemas.laws import FitRequestSchema
from service.services import laws
from service.services.plans import reevaluate
from service.workers import jobs
from tests.conftest import SMALL_FIT_GRID, bearer
from tests.problems import assert_problem

pytestmark = pytest.mark.usefixtures("small_fit_grid")  # the grid search is tests/core/test_fit.py's

TRUE = {"E": 1.82, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}
TRUE_LAW = ScalingLaw(**TRUE)
NOISE = 0.005  # multiplicative, on the loss
COEFFICIENTS = ("E", "A", "B", "alpha", "beta")
SLUG = "acme-sweep"  # made from the name "Acme sweep"
INLINE_HARDWARE = {
    "name": "rented",
    "peak_flops": {"bf16": 1e15},
    "memory_bytes": 80e9,
    "price_per_hour": "2.00",
    "currency": "USD",
}


def true_loss(params: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return TRUE["E"] + TRUE["A"] / params ** TRUE["alpha"] + TRUE["B"] / tokens ** TRUE["beta"]


def as_runs(params, tokens, losses) -> list[dict]:
    return [
        {"params": float(n), "tokens": float(d), "loss": float(loss)}
        for n, d, loss in zip(params, tokens, losses, strict=True)
    ]


def sweep(noise: float = NOISE, seed: int = 0) -> list[dict]:
    """6 model sizes (5e7 to 5e9) by 6 token counts (1e9 to 2e11), losses from TRUE with noise."""
    params, tokens = (
        grid.ravel() for grid in np.meshgrid(np.geomspace(5e7, 5e9, 6), np.geomspace(1e9, 2e11, 6))
    )
    losses = true_loss(params, tokens) * np.exp(np.random.default_rng(seed).normal(0.0, noise, params.size))
    return as_runs(params, tokens, losses)


def isoflop_sweep(noise: float = NOISE, seed: int = 1) -> list[dict]:
    """4 budgets (1e18 to 1e21 FLOPs) x 7 sizes from a quarter to 4 times TRUE's optimal size."""
    budgets = np.geomspace(1e18, 1e21, 4)
    params = np.concatenate([TRUE_LAW.optimal_params(c) * np.geomspace(0.25, 4, 7) for c in budgets])
    tokens = np.repeat(budgets, 7) / (6 * params)
    losses = true_loss(params, tokens) * np.exp(np.random.default_rng(seed).normal(0.0, noise, params.size))
    return as_runs(params, tokens, losses)


RUNS = sweep()


def fit_body(**overrides) -> dict:
    return {"organization": "acme", "name": "Acme sweep", "runs": RUNS, **overrides}


def csv_bytes(runs: list[dict], columns=("params", "tokens", "loss"), *, newline="\n", bom=False) -> bytes:
    lines = [",".join(columns)] + [",".join(repr(run[column]) for column in columns) for run in runs]
    return (("\ufeff" if bom else "") + newline.join(lines) + newline).encode()


def upload(client, data: bytes | None, headers=None, **fields):
    form = {"organization": "acme", "name": "Acme sweep", **fields}
    if data is not None:
        form["runs"] = (io.BytesIO(data), "runs.csv", "text/csv")
    return client.post(
        "/v1/scaling-laws", data=form, content_type="multipart/form-data", headers=headers or {}
    )


def coefficients(body: dict) -> dict[str, float]:
    return {name: body[name] for name in COEFFICIENTS}


def count(session, model) -> int:
    session.expire_all()
    return session.scalar(select(func.count()).select_from(model))


def pointers(problem: dict) -> list[str]:
    return [error.get("pointer") for error in problem["errors"]]


@functools.cache
def _fitted_columns() -> dict:
    """The columns of a law fitted to RUNS with a 20-sample bootstrap: one fit per process."""
    return laws.fit_columns(FitRequestSchema().load(fit_body(bootstrap={"samples": 20, "seed": 7})))


def store_law(session, organization: str = "acme", slug: str = SLUG, **overrides) -> FittedLaw:
    """A law as POST /v1/scaling-laws stores it, put straight into the database."""
    org = session.scalars(select(Organization).where(Organization.slug == organization)).one()
    law = FittedLaw(
        organization_id=org.id,
        slug=slug,
        name=slug.replace("-", " ").title(),
        created_by="test",
        **{**copy.deepcopy(_fitted_columns()), **overrides},
    )
    session.add(law)
    session.commit()
    return law


@pytest.fixture
def orgs(client):
    for slug in ("acme", "globex"):
        assert client.post("/v1/organizations", json={"slug": slug, "name": slug.title()}).status_code == 201


@pytest.fixture
def planner(issue_key, orgs):
    return bearer(issue_key("planner", "acme"))


@pytest.fixture
def fitted(client, orgs):
    """POST /v1/scaling-laws of RUNS with a 20-sample bootstrap (seed 7): the 201 response."""
    response = client.post("/v1/scaling-laws", json=fit_body(bootstrap={"samples": 20, "seed": 7}))
    assert response.status_code == 201, response.get_json()
    return response


@pytest.fixture
def stored_law(session, orgs) -> FittedLaw:
    return store_law(session)


@pytest.fixture
def database(app):
    return get_db(app)


# --- Fitting -------------------------------------------------------------------------------------------


def test_a_fit_recovers_the_law_its_runs_were_drawn_from(client, fitted):
    law = fitted.get_json()
    assert fitted.headers["Location"] == f"/v1/scaling-laws/{SLUG}"
    assert law["kind"] == "fitted"
    assert law["slug"] == SLUG
    assert law["organization"] == "acme"
    # 36 runs with 0.5% noise pin down E and the exponents; A and B trade off against alpha and beta along a
    # ridge of the objective, so they are only known to within a factor of about 1.5 here.
    assert law["E"] == pytest.approx(TRUE["E"], rel=0.03)
    assert law["alpha"] == pytest.approx(TRUE["alpha"], abs=0.04)
    assert law["beta"] == pytest.approx(TRUE["beta"], abs=0.04)
    for name in ("A", "B"):
        assert abs(math.log(law[name] / TRUE[name])) < math.log(2), name
    fitted_law = ScalingLaw(**coefficients(law))
    n, d = np.array([run["params"] for run in RUNS]), np.array([run["tokens"] for run in RUNS])
    predicted = fitted_law.E + fitted_law.A / n**fitted_law.alpha + fitted_law.B / d**fitted_law.beta
    np.testing.assert_allclose(predicted, true_loss(n, d), rtol=0.01)  # within twice the noise everywhere
    # N_opt ∝ C^a with a = beta/(alpha + beta), and D_opt ∝ C^b with b = alpha/(alpha + beta).
    assert law["a"] == pytest.approx(law["beta"] / (law["alpha"] + law["beta"]), rel=1e-12)
    assert law["b"] == pytest.approx(law["alpha"] / (law["alpha"] + law["beta"]), rel=1e-12)
    assert law["a"] == pytest.approx(TRUE_LAW.a, abs=0.02)
    flops = 6 * n * d
    assert law["fitted_range"] == pytest.approx(
        {
            "min_params": 5e7,
            "max_params": 5e9,
            "min_tokens": 1e9,
            "max_tokens": 2e11,
            "min_flops": flops.min(),
            "max_flops": flops.max(),
        },
        rel=1e-12,
    )
    statistics = law["fit"]
    assert statistics["method"] == "huber-lbfgs"
    assert statistics["huber_delta"] == 1e-3
    assert statistics["starts"] == len(SMALL_FIT_GRID)  # every start of the grid (4 500 outside these tests)
    assert statistics["runs"] == len(RUNS)
    assert statistics["converged"] is True
    assert 0 < statistics["objective"] < 1e-3
    assert NOISE / 2 < statistics["rmse_log_loss"] < 2 * NOISE
    assert statistics["rmse_log_loss"] <= statistics["max_abs_log_residual"] < 5 * NOISE
    ratios = {entry["flops"]: entry["tokens_per_param"] for entry in statistics["tokens_per_param"]}
    assert list(ratios) == [1e20, 1e22, 1e24]
    for budget, ratio in ratios.items():
        implied = fitted_law.optimal_tokens(budget) / fitted_law.optimal_params(budget)
        assert ratio == pytest.approx(implied, rel=1e-9)
        assert ratio == pytest.approx(
            TRUE_LAW.optimal_tokens(budget) / TRUE_LAW.optimal_params(budget), rel=0.15
        )
    # A grid of sizes x token counts has no two runs of equal compute: no IsoFLOP profile to fit.
    assert law["isoflop"]["available"] is False
    assert "IsoFLOP fit needs at least 3 compute budgets" in law["isoflop"]["reason"]
    assert law["warnings"] == []
    assert law["created_by"]
    assert law["source"].startswith(f"Fitted to {len(RUNS)} runs of acme")
    read = client.get(fitted.headers["Location"])
    assert read.status_code == 200
    assert read.get_json() == law
    audited = [(entry["action"], entry["object_id"]) for entry in client.get("/v1/audit").get_json()["items"]]
    assert ("scaling_law.create", SLUG) in audited


def test_runs_on_an_isoflop_grid_also_get_chinchillas_approach_2(client, orgs):
    response = client.post("/v1/scaling-laws", json=fit_body(name="Acme isoflop", runs=isoflop_sweep()))
    assert response.status_code == 201, response.get_json()
    law = response.get_json()
    isoflop = law["isoflop"]
    assert isoflop["available"] is True
    assert "reason" not in isoflop or isoflop["reason"] is None
    assert isoflop["a"] + isoflop["b"] == pytest.approx(1.0, abs=1e-12)
    # Seven sizes over a 16x span bracket each optimum; 0.5% noise moves the vertices by a few percent.
    assert isoflop["a"] == pytest.approx(TRUE_LAW.a, abs=0.02)
    assert isoflop["a"] == pytest.approx(law["a"], abs=0.03)  # the two approaches agree
    assert [budget["runs"] for budget in isoflop["budgets"]] == [7, 7, 7, 7]
    assert [budget["flops"] for budget in isoflop["budgets"]] == pytest.approx(np.geomspace(1e18, 1e21, 4))
    assert isoflop["skipped"] == []
    assert isoflop["params_coefficient"] * isoflop["tokens_coefficient"] == pytest.approx(1 / 6, rel=1e-9)
    assert [entry["flops"] for entry in isoflop["tokens_per_param"]] == [1e20, 1e22, 1e24]


def test_flops_instead_of_tokens_give_the_same_law(client, fitted):
    runs = [{"params": r["params"], "flops": 6 * r["params"] * r["tokens"], "loss": r["loss"]} for r in RUNS]
    response = client.post("/v1/scaling-laws", json=fit_body(slug="by-flops", runs=runs))
    assert response.status_code == 201, response.get_json()
    by_flops = response.get_json()
    # tokens = flops / (6·params) is the runs' tokens to the last bit or two.
    assert coefficients(by_flops) == pytest.approx(coefficients(fitted.get_json()), rel=1e-6)
    assert by_flops["fitted_range"] == pytest.approx(fitted.get_json()["fitted_range"], rel=1e-12)


def test_a_csv_upload_with_a_byte_order_mark_and_crlf_lines_gives_the_same_law_as_json(
    client, fitted, session
):
    # Spreadsheets save UTF-8 with a byte-order mark and CRLF line ends; columns in any order and case.
    data = csv_bytes(RUNS, ("loss", "params", "tokens"), newline="\r\n", bom=True).replace(
        b"loss,", b" Loss ,", 1
    )
    response = upload(client, data, slug="from-csv", bootstrap_samples="20", bootstrap_seed="7")
    assert response.status_code == 201, response.get_json()
    assert response.headers["Location"] == "/v1/scaling-laws/from-csv"
    from_csv, from_json = response.get_json(), fitted.get_json()
    # repr() of a float reads back as the same float: the same runs, so the very same law.
    assert coefficients(from_csv) == coefficients(from_json)
    assert from_csv["bootstrap"] == from_json["bootstrap"]
    assert from_csv["fit"]["runs"] == len(RUNS)
    stored = session.scalars(select(FittedLaw).where(FittedLaw.slug == "from-csv")).one()
    assert stored.runs["params"] == [run["params"] for run in RUNS]


BROKEN_CSVS = {
    "an unknown column": (b"size,tokens,loss\n1e8,1e9,3.0\n", "#/runs", "must name params, loss"),
    "no header": (b"1e8,1e9,3.0\n2e8,1e9,2.9\n", "#/runs", "must name params, loss"),
    "an empty file": (b"", "#/runs", "must name params, loss"),
    "a header only": (b"params,tokens,loss\n", "#/runs", "Give at least 5 runs"),
    "bytes that are not UTF-8": (b"params,tokens,loss\n1e8,1e9,2.9\xe9\n", "#/runs", "Not a UTF-8 CSV file"),
    "a UTF-16 file": ("params,tokens,loss\n1e8,1e9,3\n".encode("utf-16"), "#/runs", "Not a UTF-8 CSV"),
    "a word for a number": (b"params,tokens,loss\n1e8,1e9,3.0\n2e8,1e9,low\n", "#/runs/1/loss", "number"),
    "NaN": (b"params,tokens,loss\n1e8,1e9,NaN\n", "#/runs/0/loss", ""),
    "a negative size": (b"params,tokens,loss\n-1e8,1e9,3.0\n", "#/runs/0/params", ""),
    "an empty cell": (b"params,tokens,loss\n1e8,1e9,3.0\n2e8,,2.9\n", "#/runs/1/tokens", "tokens or flops"),
    "tokens and flops both": (b"params,tokens,flops,loss\n1e8,1e9,6e17,3.0\n", "#/runs/0/tokens", "either"),
}


@pytest.mark.parametrize(("data", "pointer", "detail"), BROKEN_CSVS.values(), ids=BROKEN_CSVS.keys())
def test_a_csv_that_cannot_be_read_is_a_422_naming_the_runs_or_the_cell(
    client, orgs, session, data, pointer, detail
):
    problem = assert_problem(upload(client, data), 422)
    assert pointer in pointers(problem), problem
    assert detail in " ".join(error["detail"] for error in problem["errors"])
    assert count(session, FittedLaw) == 0


def test_a_csv_row_longer_than_its_header_is_a_422_not_a_crash(client, orgs):
    problem = assert_problem(upload(client, b"params,tokens,loss\n1e8,1e9,3.0,4.0\n"), 422)
    assert all(pointer.startswith("#/runs/0") for pointer in pointers(problem)), problem


def test_a_multipart_form_is_validated_like_json(client, orgs):
    no_file = assert_problem(upload(client, None), 422)
    assert pointers(no_file) == ["#/runs"]
    no_organization = client.post(
        "/v1/scaling-laws",
        data={"name": "x", "runs": (io.BytesIO(csv_bytes(RUNS)), "runs.csv")},
        content_type="multipart/form-data",
    )
    assert pointers(assert_problem(no_organization, 422)) == ["#/organization"]
    bad_samples = assert_problem(upload(client, csv_bytes(RUNS), bootstrap_samples="many"), 422)
    assert pointers(bad_samples) == ["#/bootstrap/samples"]
    text = client.post("/v1/scaling-laws", data=csv_bytes(RUNS), content_type="text/csv")
    assert_problem(text, 415)


def test_runs_sent_as_a_form_field_give_the_same_law_as_a_file(client, fitted, session):
    # The description states `runs` as text (a part with or without a file name), as curl -F sends either.
    form = {"organization": "acme", "name": "Acme sweep", "slug": "from-field"}
    response = client.post(
        "/v1/scaling-laws",
        data={**form, "runs": csv_bytes(RUNS).decode()},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.get_json()
    assert coefficients(response.get_json()) == coefficients(fitted.get_json())
    file = (io.BytesIO(csv_bytes(RUNS)), "runs.csv")
    twice = MultiDict([*form.items(), ("runs", csv_bytes(RUNS).decode()), ("runs", file)])
    response = client.post("/v1/scaling-laws", data=twice, content_type="multipart/form-data")
    problem = assert_problem(response, 422)
    assert pointers(problem) == ["#/runs"]


def test_a_multipart_form_refuses_fields_it_does_not_know_as_json_does(client, orgs, session):
    # Unknown fields are rejected: a misspelt bootstrap_samples must not give a law without intervals.
    typo = assert_problem(upload(client, csv_bytes(RUNS), bootstrp_samples="20"), 422)
    assert any("bootstrp_samples" in pointer for pointer in pointers(typo)), typo
    # JSON refuses {"bootstrap": {"seed": 5}} (samples are required); a form's lone seed must not vanish.
    lone_seed = assert_problem(upload(client, csv_bytes(RUNS), slug="lone-seed", bootstrap_seed="5"), 422)
    assert any("bootstrap" in pointer for pointer in pointers(lone_seed)), lone_seed
    assert count(session, FittedLaw) == 0


# --- Bootstrap ------------------------------------------------------------------------------------------


def test_bootstrap_intervals_contain_the_fit_and_report_their_seed(fitted):
    law = fitted.get_json()
    bootstrap = law["bootstrap"]
    assert bootstrap["samples"] == 20
    assert bootstrap["seed"] == 7
    assert bootstrap["confidence"] == 0.95
    assert 0 <= bootstrap["unusable"] <= 1
    assert set(bootstrap["intervals"]) == {"E", "A", "B", "alpha", "beta", "a", "b"}
    for name, (low, high) in bootstrap["intervals"].items():
        assert low < law[name] < high, name
    assert bootstrap["intervals"]["a"][0] == pytest.approx(1 - bootstrap["intervals"]["b"][1], rel=1e-9)


def test_an_omitted_seed_is_chosen_reported_and_reproduces_the_same_intervals(client, orgs):
    first = client.post("/v1/scaling-laws", json=fit_body(slug="first", bootstrap={"samples": 10}))
    assert first.status_code == 201, first.get_json()
    seed = first.get_json()["bootstrap"]["seed"]
    assert isinstance(seed, int)
    assert 0 <= seed < 2**32
    again = client.post(
        "/v1/scaling-laws", json=fit_body(slug="again", bootstrap={"samples": 10, "seed": seed})
    )
    assert again.status_code == 201, again.get_json()
    assert again.get_json()["bootstrap"] == first.get_json()["bootstrap"]


# --- Background fits ------------------------------------------------------------------------------------


def submit(client, headers=None, **overrides):
    response = client.post(
        "/v1/scaling-laws", json=fit_body(**overrides), headers={"Prefer": "respond-async", **(headers or {})}
    )
    assert response.status_code == 202, response.get_json()
    return response


def test_prefer_respond_async_queues_a_job_that_a_runner_turns_into_the_law(client, database, planner):
    queued = submit(client, headers=planner)
    job = queued.get_json()
    assert queued.headers["Location"] == f"/v1/fit-jobs/{job['id']}"
    assert int(queued.headers["Retry-After"]) > 0
    assert queued.headers["Preference-Applied"] == "respond-async"
    assert job["status"] == "queued"
    assert job["organization"] == "acme"
    assert job["slug"] == SLUG
    assert job["law"] is None
    assert job["error"] is None
    assert job["attempt"] == 0
    polled = client.get(queued.headers["Location"], headers=planner)
    assert polled.status_code == 200
    assert polled.get_json()["status"] == "queued"
    assert "Retry-After" in polled.headers
    assert client.get(f"/v1/scaling-laws/{SLUG}", headers=planner).status_code == 404

    assert jobs.run_pending(database) == 1

    done = client.get(queued.headers["Location"], headers=planner)
    assert done.get_json()["status"] == "succeeded", done.get_json()
    assert done.get_json()["law"] == f"/v1/scaling-laws/{SLUG}"
    assert done.get_json()["attempt"] == 1
    assert done.get_json()["finished_at"] is not None
    assert "Retry-After" not in done.headers
    law = client.get(done.get_json()["law"], headers=planner)
    assert law.status_code == 200
    assert law.get_json()["kind"] == "fitted"
    assert law.get_json()["fit"]["runs"] == len(RUNS)
    # The job outlives its law: deleting the law leaves a job that points nowhere, and frees the slug.
    deleted = client.delete(f"/v1/scaling-laws/{SLUG}", headers={**planner, "If-Match": law.headers["ETag"]})
    assert deleted.status_code == 204
    assert client.get(queued.headers["Location"], headers=planner).get_json()["law"] is None
    submit(client, headers=planner)


def test_fits_beyond_the_synchronous_limits_are_queued_without_being_asked(client, orgs, session):
    samples = laws.SYNC_MAX_BOOTSTRAP + 1
    many_samples = client.post("/v1/scaling-laws", json=fit_body(bootstrap={"samples": samples, "seed": 1}))
    assert many_samples.status_code == 202, many_samples.get_json()
    assert "Preference-Applied" not in many_samples.headers
    runs = (RUNS * 14)[: laws.SYNC_MAX_RUNS + 1]
    many_runs = client.post("/v1/scaling-laws", json=fit_body(slug="many-runs", runs=runs))
    assert many_runs.status_code == 202, many_runs.get_json()
    assert count(session, FitJob) == 2
    assert count(session, FittedLaw) == 0


def test_a_job_whose_runs_cannot_be_fitted_fails_and_says_why(client, database, session, orgs):
    # Valid to the schema; the fit's own checks (run in the job) find the loss rising with scale.
    rising = [{**run, "loss": 10.0 - run["loss"]} for run in RUNS]
    location = submit(client, runs=rising).headers["Location"]
    assert jobs.run_pending(database) == 1
    job = client.get(location).get_json()
    assert job["status"] == "failed"
    assert job["law"] is None
    assert job["error"]["status"] == 422
    assert "do not decrease with scale" in job["error"]["detail"]
    assert [error["pointer"] for error in job["error"]["errors"]] == ["#/runs"]
    assert count(session, FittedLaw) == 0
    # The same runs sent for an answer at once are the same 422.
    at_once = assert_problem(client.post("/v1/scaling-laws", json=fit_body(runs=rising)), 422)
    assert at_once["errors"] == job["error"]["errors"]


def test_a_slug_is_held_while_its_fit_is_queued_and_freed_when_it_fails(client, database, session, orgs):
    rising = [{**run, "loss": 10.0 - run["loss"]} for run in RUNS]
    submit(client, runs=rising)
    again = assert_problem(
        client.post("/v1/scaling-laws", json=fit_body(), headers={"Prefer": "respond-async"}), 409
    )
    assert SLUG in again["detail"]
    assert count(session, FitJob) == 1
    assert jobs.run_pending(database) == 1
    submit(client)  # the failed job holds the slug no longer
    assert count(session, FitJob) == 2


def test_another_organisations_job_is_hidden_from_its_keys(client, issue_key, orgs):
    location = submit(client, organization="globex").headers["Location"]
    for role in ("viewer", "planner", "finance"):
        hidden = client.get(location, headers=bearer(issue_key(role, "acme")))
        missing = client.get(f"/v1/fit-jobs/{uuid.uuid4()}", headers=bearer(issue_key(role, "acme")))
        assert assert_problem(hidden, 404)["title"] == assert_problem(missing, 404)["title"]
    assert client.get(location, headers=bearer(issue_key("viewer", "globex"))).status_code == 200
    assert client.get(location).status_code == 200  # admin


def expire_lease(session, job_id: uuid.UUID) -> None:
    session.execute(
        update(FitJob).where(FitJob.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1))
    )
    session.commit()


def test_a_job_whose_runner_died_is_resumed_and_the_dead_runners_late_result_is_dropped(
    client, database, session, orgs
):
    location = submit(client).headers["Location"]
    job_id = uuid.UUID(location.rsplit("/", 1)[1])
    assert jobs.claim_next(database) == (job_id, 1)  # a runner claims it, then its process stops
    assert client.get(location).get_json()["status"] == "running"
    assert jobs.run_pending(database) == 0  # its lease still runs: nobody takes it over
    expire_lease(session, job_id)

    assert jobs.run_pending(database) == 1
    resumed = client.get(location).get_json()
    assert resumed["status"] == "succeeded"
    assert resumed["attempt"] == 2
    law_id = session.scalars(select(FittedLaw.id)).one()

    jobs.run_job(database, job_id, 1)  # the first runner was only slow: it finishes now
    assert client.get(location).get_json() == resumed
    assert session.scalars(select(FittedLaw.id)).all() == [law_id]


def test_a_superseded_runner_that_finishes_first_stores_nothing(client, database, session, orgs):
    location = submit(client).headers["Location"]
    job_id = uuid.UUID(location.rsplit("/", 1)[1])
    assert jobs.claim_next(database) == (job_id, 1)
    expire_lease(session, job_id)
    assert jobs.claim_next(database) == (job_id, 2)

    jobs.run_job(database, job_id, 1)  # the superseded runner finishes before the one that took over
    assert client.get(location).get_json()["status"] == "running"
    assert count(session, FittedLaw) == 0

    jobs.run_job(database, job_id, 2)
    assert client.get(location).get_json()["status"] == "succeeded"
    assert count(session, FittedLaw) == 1


def test_a_job_interrupted_more_than_max_attempts_times_fails_as_interrupted(client, database, session, orgs):
    location = submit(client).headers["Location"]
    job_id = uuid.UUID(location.rsplit("/", 1)[1])
    for attempt in range(1, jobs.MAX_ATTEMPTS + 1):
        assert jobs.claim_next(database) == (job_id, attempt)
        expire_lease(session, job_id)
    assert jobs.run_pending(database) == 1
    job = client.get(location).get_json()
    assert job["status"] == "failed"
    assert job["error"]["title"] == "Interrupted"
    assert f"interrupted {jobs.MAX_ATTEMPTS} times" in job["error"]["detail"]
    assert count(session, FittedLaw) == 0
    assert jobs.run_pending(database) == 0


# --- Planning with a fitted law -------------------------------------------------------------------------


def test_allocations_with_a_fitted_law_carry_its_bootstrap_intervals(client, stored_law, planner):
    response = client.post("/v1/allocations", json={"flops": 1e23, "law": SLUG}, headers=planner)
    assert response.status_code == 200, response.get_json()
    allocation = response.get_json()
    assert allocation["law"]["slug"] == SLUG
    assert allocation["law"]["alpha"] == pytest.approx(stored_law.alpha, rel=1e-12)
    intervals = allocation["intervals"]
    assert intervals["confidence"] == 0.95
    assert 2 <= intervals["samples"] <= 20
    for name in ("params", "tokens", "predicted_loss"):
        low, high = intervals[name]
        assert low <= allocation[name] <= high, name
    law = ScalingLaw(**{name: getattr(stored_law, name) for name in COEFFICIENTS})
    assert allocation["params"] == pytest.approx(law.optimal_params(1e23), rel=1e-6)
    published = client.post("/v1/allocations", json={"flops": 1e23, "law": "epoch-2024"}, headers=planner)
    assert published.get_json()["intervals"] is None
    estimate = client.post(
        "/v1/estimates",
        json={"params": 1e9, "tokens": 2e10, "hardware": INLINE_HARDWARE, "accelerators": 8, "law": SLUG},
        headers=planner,
    )
    assert estimate.status_code == 200, estimate.get_json()
    assert estimate.get_json()["predicted_loss"] == pytest.approx(law.loss(1e9, 2e10), rel=1e-9)
    isoflop = client.get(f"/v1/scaling-laws/{SLUG}/isoflop?flops=1e21", headers=planner)
    assert isoflop.status_code == 200
    assert isoflop.get_json()["optimal"]["params"] == pytest.approx(law.optimal_params(1e21), rel=1e-6)
    frontier = client.get(f"/v1/scaling-laws/{SLUG}/frontier?min_flops=1e20&max_flops=1e22", headers=planner)
    assert frontier.status_code == 200
    assert frontier.get_json()["law"] == SLUG


def test_an_allocation_far_outside_the_fitted_range_warns_how_far(client, stored_law, planner):
    allocation = client.post("/v1/allocations", json={"flops": 1e26, "law": SLUG}, headers=planner).get_json()
    warnings = [w for w in allocation["warnings"] if w["code"] == "extrapolation"]
    flops = next(w for w in warnings if w["details"]["quantity"] == "flops")
    # 1e26 against the runs' largest 6·5e9·2e11 = 6e21 FLOPs: log10(1e26 / 6e21) = 4.2 orders of magnitude.
    assert flops["details"]["orders_of_magnitude"] == pytest.approx(4.22, abs=0.01)
    assert "4.2 orders of magnitude above" in flops["message"]
    inside = client.post("/v1/allocations", json={"flops": 1e20, "law": SLUG}, headers=planner).get_json()
    assert not [w for w in inside["warnings"] if w["code"] == "extrapolation"]


def test_a_fitted_slug_names_a_law_only_within_its_organisation(client, session, stored_law, issue_key):
    theirs = bearer(issue_key("planner", "globex"))
    refused = assert_problem(
        client.post("/v1/allocations", json={"flops": 1e23, "law": SLUG}, headers=theirs), 422
    )
    assert pointers(refused) == ["#/law"]
    plan = {
        "organization": "globex",
        "flops": 1e21,
        "law": SLUG,
        "hardware": INLINE_HARDWARE,
        "accelerators": 8,
    }
    assert pointers(assert_problem(client.post("/v1/plans", json=plan), 422)) == ["#/law"]  # even as admin
    # An admin sees every organisation's laws: one slug there is enough; two are ambiguous.
    assert client.post("/v1/allocations", json={"flops": 1e23, "law": SLUG}).status_code == 200
    store_law(session, "globex")
    ambiguous = assert_problem(client.post("/v1/allocations", json={"flops": 1e23, "law": SLUG}), 422)
    assert pointers(ambiguous) == ["#/law"]
    assert "Several organisations" in ambiguous["errors"][0]["detail"]
    # A plan names its organisation, which settles it.
    acme_plan = client.post("/v1/plans", json={**plan, "organization": "acme"})
    assert acme_plan.status_code == 201, acme_plan.get_json()


def test_a_plan_made_with_a_fitted_law_reproduces_and_keeps_the_law(
    client, app, session, stored_law, planner
):
    body = {
        "organization": "acme",
        "flops": 1e21,
        "law": SLUG,
        "hardware": INLINE_HARDWARE,
        "accelerators": 64,
    }
    created = client.post("/v1/plans", json=body, headers=planner)
    assert created.status_code == 201, created.get_json()
    result = created.get_json()["result"]
    assert result["law"]["slug"] == SLUG
    low, high = result["intervals"]["params"]
    assert low <= result["params"] <= high
    session.expire_all()
    plan = session.get(Plan, uuid.UUID(created.get_json()["id"]))
    assert plan.law_id == stored_law.id
    assert reevaluate(plan) == plan.result
    verified = app.test_cli_runner().invoke(args=["plans", "verify"])
    assert verified.exit_code == 0, verified.output
    assert "0 differ" in verified.output

    kept = assert_problem(
        client.delete(f"/v1/scaling-laws/{SLUG}", headers={**planner, "If-Match": "*"}), 409
    )
    assert "Plans were made with" in kept["detail"]
    assert client.get(f"/v1/scaling-laws/{SLUG}", headers=planner).status_code == 200


def test_an_unused_fitted_law_can_be_deleted_and_a_published_one_cannot(client, session, stored_law, planner):
    # A delete names the law it read: its ETag (a law deleted and fitted again under the slug is another).
    assert_problem(client.delete(f"/v1/scaling-laws/{SLUG}", headers=planner), 428)
    assert_problem(client.delete(f"/v1/scaling-laws/{SLUG}", headers={**planner, "If-Match": '"1"'}), 412)
    read = client.get(f"/v1/scaling-laws/{SLUG}", headers=planner)
    deleted = client.delete(f"/v1/scaling-laws/{SLUG}", headers={**planner, "If-Match": read.headers["ETag"]})
    assert deleted.status_code == 204
    assert_problem(client.get(f"/v1/scaling-laws/{SLUG}", headers=planner), 404)
    assert_problem(client.delete(f"/v1/scaling-laws/{SLUG}", headers={**planner, "If-Match": "*"}), 404)
    assert count(session, FittedLaw) == 0
    audited = [(entry["action"], entry["object_id"]) for entry in client.get("/v1/audit").get_json()["items"]]
    assert ("scaling_law.delete", SLUG) in audited
    published = assert_problem(
        client.delete("/v1/scaling-laws/epoch-2024", headers={**planner, "If-Match": "*"}), 409
    )
    assert "published" in published["detail"]
    # Without If-Match a delete is refused for that first (428), published law or not.
    assert_problem(client.delete("/v1/scaling-laws/epoch-2024", headers=planner), 428)
    assert client.get("/v1/scaling-laws/epoch-2024", headers=planner).status_code == 200


# --- Refused input --------------------------------------------------------------------------------------


def _runs(*rows) -> list[dict]:
    return [{"params": n, "tokens": d, "loss": loss} for n, d, loss in rows]


REFUSED = {
    "fewer than 5 runs": (
        {"runs": RUNS[:4]},
        "#/runs",
        "at least 5 runs",
    ),
    "fewer than 3 sizes": (
        {"runs": [run for run in RUNS if run["params"] in {RUNS[0]["params"], RUNS[1]["params"]}]},
        "#/runs",
        "at least 3 model sizes",
    ),
    "only repeats": (
        {"runs": _runs(*[(1e8, 1e9, 3.0), (2e8, 1e9, 2.9), (4e8, 1e9, 2.8)] * 4)},
        "#/runs",
        "not repeats",
    ),
    "losses that do not fall": (
        {"runs": [{**run, "loss": 3.0} for run in RUNS]},
        "#/runs",
        "do not decrease with scale",
    ),
    "a negative size": ({"runs": [{**RUNS[0], "params": -1e8}, *RUNS[1:]]}, "#/runs/0/params", ""),
    "a zero loss": ({"runs": [*RUNS[:3], {**RUNS[3], "loss": 0}]}, "#/runs/3/loss", ""),
    "NaN as a string": ({"runs": [{**RUNS[0], "tokens": "NaN"}, *RUNS[1:]]}, "#/runs/0/tokens", ""),
    "Infinity as a string": ({"runs": [{**RUNS[0], "loss": "Infinity"}, *RUNS[1:]]}, "#/runs/0/loss", ""),
    "tokens and flops": ({"runs": [{**RUNS[0], "flops": 1e20}, *RUNS[1:]]}, "#/runs/0/tokens", "either"),
    "neither tokens nor flops": (
        {"runs": [{"params": 1e8, "loss": 3.0}, *RUNS[1:]]},
        "#/runs/0/tokens",
        "either",
    ),
    "an unknown field in a run": ({"runs": [{**RUNS[0], "steps": 10}, *RUNS[1:]]}, "#/runs/0/steps", ""),
    "no runs": ({"runs": []}, "#/runs", ""),
    "too few bootstrap samples": ({"bootstrap": {"samples": 9}}, "#/bootstrap/samples", ""),
    "too many bootstrap samples": ({"bootstrap": {"samples": 5001}}, "#/bootstrap/samples", ""),
    "a negative seed": ({"bootstrap": {"samples": 10, "seed": -1}}, "#/bootstrap/seed", ""),
    "a published slug": ({"slug": "epoch-2024"}, "#/slug", "published"),
    "a name that makes no slug": ({"name": "!!"}, "#/slug", "makes no slug"),
    "a malformed slug": ({"slug": "Acme_Sweep"}, "#/slug", ""),
    "a malformed organization": ({"organization": "ACME"}, "#/organization", ""),
}


@pytest.mark.parametrize(("overrides", "pointer", "detail"), REFUSED.values(), ids=REFUSED.keys())
def test_a_fit_that_cannot_be_made_is_a_422_naming_the_field_and_leaves_nothing(
    client, session, orgs, overrides, pointer, detail
):
    problem = assert_problem(client.post("/v1/scaling-laws", json=fit_body(**overrides)), 422)
    assert pointer in pointers(problem), problem
    assert detail in " ".join(error["detail"] for error in problem["errors"])
    assert count(session, FittedLaw) == count(session, FitJob) == 0


def test_a_published_slug_is_refused_for_queued_fits_too(client, session, orgs):
    problem = assert_problem(
        client.post(
            "/v1/scaling-laws", json=fit_body(name="Epoch 2024"), headers={"Prefer": "respond-async"}
        ),
        422,
    )
    assert pointers(problem) == ["#/slug"]
    assert count(session, FitJob) == 0


def test_more_than_100000_runs_are_refused_and_so_is_too_much_bootstrap_work(client, session, orgs):
    # Built as text: 100 001 runs are 4 MB of JSON, past the 1 MB other bodies may be but within the
    # 16 MB allowed here, so it is the schema that refuses them.
    row = json.dumps({"params": 1e8, "tokens": 1e9, "loss": 3.0})
    body = json.dumps(fit_body(runs=[]))[:-3] + "[" + ",".join([row] * 100_001) + "]}"
    assert len(body) > 1024 * 1024
    too_many = client.post("/v1/scaling-laws", data=body, content_type="application/json")
    problem = assert_problem(too_many, 422)
    assert pointers(problem) == ["#/runs"]
    assert "100000" in problem["errors"][0]["detail"]
    # 5 000 resamples of 4 001 runs are more than the 20 000 000 samples x runs a bootstrap may take.
    work = fit_body(runs=(RUNS * 112)[:4001], bootstrap={"samples": 5000})
    problem = assert_problem(client.post("/v1/scaling-laws", json=work), 422)
    assert pointers(problem) == ["#/bootstrap"]
    assert "samples x runs" in problem["errors"][0]["detail"]
    assert count(session, FittedLaw) == count(session, FitJob) == 0


def test_a_body_over_the_upload_limit_is_413(app_with, client_of, session, orgs):
    client = client_of(app_with(max_fit_upload_length=2_000))
    body = fit_body()
    assert len(json.dumps(body)) > 2_000
    problem = assert_problem(client.post("/v1/scaling-laws", json=body), 413)
    assert problem["title"] == "Content Too Large"
    assert_problem(upload(client, csv_bytes(RUNS)), 413)
    assert count(session, FittedLaw) == 0


def test_a_slug_taken_in_the_organisation_is_409_and_free_in_another(client, session, stored_law):
    taken = assert_problem(client.post("/v1/scaling-laws", json=fit_body()), 409)
    assert SLUG in taken["detail"]
    queued = assert_problem(
        client.post("/v1/scaling-laws", json=fit_body(), headers={"Prefer": "respond-async"}), 409
    )
    assert SLUG in queued["detail"]
    assert count(session, FittedLaw) == 1
    assert count(session, FitJob) == 0
    elsewhere = client.post(
        "/v1/scaling-laws", json=fit_body(organization="globex"), headers={"Prefer": "respond-async"}
    )
    assert elsewhere.status_code == 202


def test_an_organisation_that_does_not_exist_or_is_not_yours_is_422(client, issue_key, session, orgs):
    unknown = assert_problem(client.post("/v1/scaling-laws", json=fit_body(organization="nobody")), 422)
    assert unknown["errors"] == [{"pointer": "#/organization", "detail": "No organization 'nobody'."}]
    planner = bearer(issue_key("planner", "acme"))
    theirs = client.post("/v1/scaling-laws", json=fit_body(organization="globex"), headers=planner)
    assert assert_problem(theirs, 422)["errors"] == [
        {"pointer": "#/organization", "detail": "No organization 'globex'."}
    ]
    queued = client.post(
        "/v1/scaling-laws",
        json=fit_body(organization="globex"),
        headers={**planner, "Prefer": "respond-async"},
    )
    assert assert_problem(queued, 422)["errors"][0]["pointer"] == "#/organization"
    assert count(session, FittedLaw) == count(session, FitJob) == 0


# --- Who sees what --------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["viewer", "finance"])
def test_only_planners_and_admins_fit_or_delete_laws(client, issue_key, stored_law, role, session):
    key = bearer(issue_key(role, "acme"))
    assert_problem(client.post("/v1/scaling-laws", json=fit_body(), headers=key), 403)
    assert_problem(upload(client, csv_bytes(RUNS), headers=key), 403)
    assert_problem(client.delete(f"/v1/scaling-laws/{SLUG}", headers=key), 403)
    assert client.get(f"/v1/scaling-laws/{SLUG}", headers=key).status_code == 200
    assert count(session, FittedLaw) == 1
    assert count(session, FitJob) == 0


def test_lists_show_the_published_laws_then_the_callers_fitted_laws_newest_first(
    client, session, issue_key, stored_law
):
    store_law(session, "acme", "acme-later", created_at=stored_law.created_at + timedelta(seconds=1))
    store_law(session, "globex", "globex-sweep")
    viewer = bearer(issue_key("viewer", "acme"))
    listed = client.get("/v1/scaling-laws", headers=viewer).get_json()
    published = [item["slug"] for item in listed["items"] if item["kind"] == "published"]
    assert published == list(PUBLISHED_LAWS)
    assert [item["slug"] for item in listed["items"] if item["kind"] == "fitted"] == ["acme-later", SLUG]
    assert [item["kind"] for item in listed["items"]] == ["published"] * len(published) + ["fitted"] * 2

    first = client.get("/v1/scaling-laws?limit=1", headers=viewer)
    assert [item["slug"] for item in first.get_json()["items"]][len(published) :] == ["acme-later"]
    cursor = first.get_json()["next_cursor"]
    assert cursor
    assert 'rel="next"' in first.headers["Link"]
    second = client.get(f"/v1/scaling-laws?limit=1&cursor={cursor}", headers=viewer).get_json()
    assert [item["slug"] for item in second["items"]] == [SLUG]
    assert second["next_cursor"] is None

    fitted = client.get("/v1/scaling-laws?kind=fitted", headers=viewer).get_json()["items"]
    assert [item["slug"] for item in fitted] == ["acme-later", SLUG]
    only_published = client.get("/v1/scaling-laws?kind=published", headers=viewer).get_json()["items"]
    assert [item["slug"] for item in only_published] == published
    assert client.get("/v1/scaling-laws?organization=globex", headers=viewer).get_json()["items"] == []
    everyone = client.get("/v1/scaling-laws?kind=fitted").get_json()["items"]  # admin
    assert {item["slug"] for item in everyone} == {"acme-later", SLUG, "globex-sweep"}
    globex = client.get("/v1/scaling-laws?organization=globex").get_json()["items"]
    assert [item["slug"] for item in globex] == ["globex-sweep"]


def test_a_fitted_law_is_dense_and_taken_to_count_the_embeddings_as_its_runs_params(client, stored_law):
    body = client.get(f"/v1/scaling-laws/{SLUG}").get_json()

    assert body["counts_embeddings"] is True
    assert body["moe"] is None


def test_another_organisations_fitted_law_is_404_to_its_keys(client, session, issue_key, stored_law):
    store_law(session, "globex", "globex-sweep")
    for role in ("viewer", "finance", "planner"):
        key = bearer(issue_key(role, "acme"))
        for path in ("", "/isoflop?flops=1e21", "/frontier?min_flops=1e20&max_flops=1e22"):
            hidden = client.get(f"/v1/scaling-laws/globex-sweep{path}", headers=key)
            missing = client.get(f"/v1/scaling-laws/nobodys-law{path}", headers=key)
            assert assert_problem(hidden, 404)["title"] == assert_problem(missing, 404)["title"]
    assert_problem(
        client.delete("/v1/scaling-laws/globex-sweep", headers=bearer(issue_key("planner", "acme"))), 404
    )
    assert client.get("/v1/scaling-laws/globex-sweep").status_code == 200  # admin
    assert count(session, FittedLaw) == 2


def test_a_retried_fit_with_the_same_idempotency_key_replays_the_first_answer(client, session, planner):
    headers = {**planner, "Idempotency-Key": "fit-1"}
    first = client.post("/v1/scaling-laws", json=fit_body(), headers=headers)
    assert first.status_code == 201, first.get_json()
    retry = client.post("/v1/scaling-laws", json=fit_body(), headers=headers)
    assert retry.status_code == 201
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.headers["Location"] == first.headers["Location"]
    assert retry.get_json() == first.get_json()
    other_body = client.post("/v1/scaling-laws", json=fit_body(name="Other"), headers=headers)
    assert_problem(other_body, 422)
    assert count(session, FittedLaw) == 1
    assert count(session, IdempotencyRecord) == 1


def test_a_retried_queued_fit_replays_the_job_with_its_headers(client, session, planner):
    headers = {**planner, "Idempotency-Key": "fit-2", "Prefer": "respond-async"}
    first = client.post("/v1/scaling-laws", json=fit_body(), headers=headers)
    retry = client.post("/v1/scaling-laws", json=fit_body(), headers=headers)
    assert (first.status_code, retry.status_code) == (202, 202)
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.get_json() == first.get_json()
    for name in ("Location", "Retry-After", "Preference-Applied"):
        assert retry.headers[name] == first.headers[name], name
    assert count(session, FitJob) == 1

"""Prometheus metrics, served at GET /metrics.

Under gunicorn each worker is a process with its own counters: gunicorn.conf.py points
PROMETHEUS_MULTIPROC_DIR at an emptied directory before any worker starts, prometheus_client then keeps every
value in a file there, and /metrics adds up the files of all workers, live and exited. Without that variable
(tests, `flask run`) the counters live in this process alone.

Labels stay few and bounded: a request's route is its URL rule (`/v1/plans/<uuid:plan_id>`), never its path,
and nothing is labelled by organisation or key.
"""

from __future__ import annotations

import os

import flask
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
if os.environ.get(MULTIPROC_DIR_VARIABLE):  # any process may count (`flask setup` too): its files go there
    os.makedirs(os.environ[MULTIPROC_DIR_VARIABLE], exist_ok=True)
UNMATCHED_ROUTE = "unmatched"  # 404s and 405s: their paths would make a label value each

HTTP_REQUESTS = Counter(
    "planner_http_requests_total", "HTTP requests answered.", ["method", "route", "status"]
)
HTTP_DURATION = Histogram(
    "planner_http_request_duration_seconds",
    "Time from the request's arrival in the app to its response.",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
PLANS_CREATED = Counter("planner_plans_created_total", "Plans created (drafts; revisions included).")
PLANS_COMMITTED = Counter("planner_plans_committed_total", "Plans committed against a budget or without one.")
BUDGET_CONFLICTS = Counter(
    "planner_budget_conflicts_total",
    "Commits refused because the budget could not take them, by the limit that refused.",
    ["limit"],
)
FIT_JOBS = Counter(
    "planner_fit_jobs_total", "Background fit jobs, by what happened to them.", ["event"]
)  # queued, started, succeeded, failed
DATABASE_ERRORS = Counter(
    "planner_database_errors_total",
    "Requests answered 503 because the database was unreachable, timed out or busy, by the error's type.",
    ["error"],
)
RATE_LIMITED = Counter(
    "planner_rate_limited_total", "Requests refused with 429, by the limit that refused them.", ["limit"]
)  # key (requests per API key), auth_failures (failed authentications per client address)


def observe_request(response: flask.Response, seconds: float) -> None:
    rule = flask.request.url_rule
    labels = (
        flask.request.method,
        rule.rule if rule is not None else UNMATCHED_ROUTE,
        str(response.status_code),
    )
    # Each (method, route, status)'s two series, found once: labels() checks and locks on every call (1-2%
    # of a request's CPU), and the label values are few and bounded.
    series = _REQUEST_SERIES.get(labels)
    if series is None:
        series = _REQUEST_SERIES.setdefault(
            labels, (HTTP_REQUESTS.labels(*labels), HTTP_DURATION.labels(*labels))
        )
    series[0].inc()
    series[1].observe(seconds)


_REQUEST_SERIES: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}


def exposition() -> flask.Response:
    """Every metric in the Prometheus text format: all workers' values when running under gunicorn."""
    if os.environ.get(MULTIPROC_DIR_VARIABLE):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return flask.Response(generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

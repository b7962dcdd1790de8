"""Liveness and readiness probes; outside /v1, no authentication, no dependencies for /healthz."""

from __future__ import annotations

import flask

from service.api.base import Blueprint
from service.infra import metrics
from service.infra.db import get_db
from service.schemas.health import HealthSchema, ReadinessSchema
from service.services.health import check_readiness
from service.web.problems import problem_response

blp = Blueprint("health", __name__, description="Probes for load balancers and orchestrators")


@blp.get("/healthz", operation_id="getHealth")
@blp.doc(security=[])
@blp.response(200, HealthSchema)
def healthz():
    """The process is alive (no dependency is checked)."""
    return {"status": "ok"}


@blp.get("/readyz", operation_id="getReadiness")
@blp.doc(security=[])
@blp.response(200, ReadinessSchema)
@blp.alt_response(503, response="SERVICE_UNAVAILABLE")
def readyz():
    """The database is reachable and its schema is at the migration head this code expects."""
    readiness = check_readiness(
        get_db().readiness_sessionmaker, flask.current_app.extensions["planner.schema_head"]
    )
    if not readiness.ready:
        return problem_response(
            503, f"Not ready: database {readiness.database}.", headers={"Retry-After": "5"}
        )
    return {"status": "ok", "database": readiness.database, "schema_revision": readiness.schema_revision}


@blp.get("/metrics", operation_id="getMetrics")
@blp.doc(
    security=[],
    responses={
        "200": {
            "description": "Prometheus text format: requests by route and status, plans, budget conflicts, "
            "fit jobs, database errors, rate limiting.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
def metrics_exposition():
    """Metrics for Prometheus to scrape, added up over every worker process of this host. Like the probes,
    it needs no key: expose it to the monitoring network only."""
    return metrics.exposition()

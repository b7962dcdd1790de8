"""Plans: stored, reproducible allocations, committed against budgets, safe to retry."""

from __future__ import annotations

import flask

from service.api.base import (
    ETAG_HEADER,
    LINK_HEADER,
    LOCATION_HEADER,
    Blueprint,
    conditional_read,
    etag_header,
    page_response,
)
from service.api.idempotency import REPLAYED_HEADER_DOC, idempotent
from service.auth import READERS, requires, scope
from service.db import get_session
from service.schemas.plans import (
    CompareQuerySchema,
    ComparisonSchema,
    PlanPageSchema,
    PlanQuerySchema,
    PlanRequestSchema,
    PlanRevisionSchema,
    PlanSchema,
)
from service.services import plans

blp = Blueprint("plans", __name__, url_prefix="/v1/plans", description="Plans and their lifecycle")

CREATED_HEADERS = {**LOCATION_HEADER, **ETAG_HEADER, **REPLAYED_HEADER_DOC}
TRANSITION_HEADERS = {**ETAG_HEADER, **REPLAYED_HEADER_DOC}


def _created(plan) -> tuple:
    return plan, {"Location": f"/v1/plans/{plan.id}", **etag_header(plan)}


@blp.get("")
@requires(*READERS)
@blp.arguments(PlanQuerySchema, location="query", as_kwargs=True)
@blp.response(200, PlanPageSchema, headers=LINK_HEADER)
def list_plans(limit, cursor, **filters):
    """Plans, newest first; filter by organization, budget_id, hardware, status, label (key:value) and the
    creation window [created_from, created_to)."""
    page = plans.list_plans(
        get_session(), plans.PlanFilter(**filters), scope=scope(), limit=limit, after=cursor
    )
    return page_response(page, limit)


@blp.post("")
@requires("planner")
@idempotent(blp)
@blp.arguments(PlanRequestSchema)
@blp.response(201, PlanSchema, headers=CREATED_HEADERS)
def create_plan(request):
    """Evaluate an allocation request (or a given `params` and `tokens`) on a cluster and store it as a draft.

    The plan keeps its inputs, a snapshot of what it used (hardware figures and the price in force, the law,
    the engine version) and every output. With `budget_id` it is charged to that budget when committed;
    `"budget": "remaining"` makes the budget's remaining amount its money budget.

    Besides what an allocation refuses (see POST /v1/allocations), a 422 names the field for an organisation
    or budget that does not exist, a plan charged to a budget without a cost in the budget's currency, and a
    run that would end after the year 9998.
    """
    return _created(plans.create_plan(get_session(), request, scope=scope()))


@blp.get("/compare")
@requires(*READERS)
@blp.arguments(CompareQuerySchema, location="query", as_kwargs=True)
@blp.response(200, ComparisonSchema)
@blp.alt_response(404, response="NOT_FOUND")
def compare_plans(ids):
    """Plans side by side (N, D, loss, days, cost), with every input and output that differs."""
    return plans.compare_plans(get_session(), ids, scope=scope())


@blp.get("/<uuid:plan_id>")
@requires(*READERS)
@blp.response(200, PlanSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_read(blp)
def get_plan(plan_id):
    """One plan: inputs, snapshot, result, status."""
    plan = plans.get_plan(get_session(), plan_id, scope=scope())
    return plan, etag_header(plan)


@blp.post("/<uuid:plan_id>/commit")
@requires("planner", "finance")
@idempotent(blp)
@blp.response(200, PlanSchema, headers=TRANSITION_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def commit_plan(plan_id):
    """Commit a draft: reserve its cost, FLOPs and accelerator-hours on its budget (a ledger entry).

    409 when the plan is not a draft, or when its budget would be overspent, its FLOP or accelerator-hour
    cap broken, its hardware not allowed, or the run outside its period: `limit` in the problem says which.
    """
    plan = plans.commit_plan(get_session(), plan_id, scope=scope())
    return plan, etag_header(plan)


@blp.post("/<uuid:plan_id>/cancel")
@requires("planner", "finance")
@idempotent(blp)
@blp.response(200, PlanSchema, headers=TRANSITION_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def cancel_plan(plan_id):
    """Cancel a draft or a committed plan; a committed plan's reservation returns to its budget."""
    plan = plans.cancel_plan(get_session(), plan_id, scope=scope())
    return plan, etag_header(plan)


@blp.post("/<uuid:plan_id>/revise")
@requires("planner")
@idempotent(blp)
@blp.arguments(PlanRevisionSchema)
@blp.response(201, PlanSchema, headers=CREATED_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def revise_plan(_changes, plan_id):
    """What-if: a new draft from this plan's request with changes (JSON merge patch: null removes a member),
    e.g. more accelerators, another price or another law. It names this plan as its parent."""
    changes = flask.request.get_json()  # as sent: merged into the parent's request, then validated whole
    revised = plans.revise_plan(
        get_session(), plan_id, changes, validate=PlanRequestSchema().load, scope=scope()
    )
    return _created(revised)

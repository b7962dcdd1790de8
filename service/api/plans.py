"""Plans: stored, reproducible allocations, committed against budgets, safe to retry."""

from __future__ import annotations

import uuid

import flask
from sqlalchemy.orm import Session

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
from service.data.models import Plan, PlanStatus
from service.infra.db import get_session
from service.schemas.common import ListQuerySchema
from service.schemas.plans import (
    ApprovalRequestSchema,
    CompareQuerySchema,
    ComparisonSchema,
    PlanPageSchema,
    PlanQuerySchema,
    PlanRequestSchema,
    PlanRevisionSchema,
    PlanSchema,
    RejectionRequestSchema,
)
from service.schemas.usage import (
    ReversalRequestSchema,
    StartRequestSchema,
    UsagePageSchema,
    UsageRecordSchema,
    UsageRequestSchema,
)
from service.services import plans, usage
from service.web.auth import READERS, requires, scope

blp = Blueprint("plans", __name__, url_prefix="/v1/plans", description="Plans and their lifecycle")

CREATED_HEADERS = {**LOCATION_HEADER, **ETAG_HEADER, **REPLAYED_HEADER_DOC}
TRANSITION_HEADERS = {**ETAG_HEADER, **REPLAYED_HEADER_DOC}


def _created(plan: Plan) -> tuple[Plan, dict[str, str]]:
    """The new plan, with where it is and its ETag."""
    return plan, {"Location": f"/v1/plans/{plan.id}", **etag_header(plan)}


@blp.get("", operation_id="listPlans")
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


def _evaluate_plan(reads: Session, request: plans.PlanRequest) -> Plan:
    """The plan a request makes, evaluated before the request's transaction (which on SQLite holds the write
    lock from its first statement): what the transaction then does is store it."""
    return plans.evaluate_new(reads, request, scope=scope())


def _evaluate_revision(reads: Session, _changes: dict, plan_id: uuid.UUID) -> Plan:
    """The revision a request makes, evaluated before the request's transaction, as a new plan is."""
    changes = flask.request.get_json()  # as sent: merged into the parent's request, then validated whole
    return plans.evaluate_revision(reads, plan_id, changes, validate=PlanRequestSchema().load, scope=scope())


@blp.post("", operation_id="createPlan")
@requires("planner")
@blp.arguments(PlanRequestSchema)
# A replay is rare and the evaluation cheaper than a look for one: it comes with the claim.
@idempotent(blp, prepare=_evaluate_plan, peek=False)
@blp.response(201, PlanSchema, headers=CREATED_HEADERS)
def create_plan(request, prepared):
    """Evaluate an allocation request (or a given `params` and `tokens`) on a cluster and store it as a draft.

    The plan keeps its inputs, a snapshot of what it used (hardware figures and the price in force, the law,
    the engine version) and every output. With `budget_id` it is charged to that budget when committed;
    `"budget": "remaining"` makes the budget's remaining amount its money budget.

    Besides what an allocation refuses (see POST /v1/allocations), a 422 names the field for an organisation
    or budget that does not exist, a plan charged to a budget without a cost in the budget's currency, and a
    run that would end after the year 9998.
    """
    return _created(plans.store_new(get_session(), prepared))


@blp.get("/compare", operation_id="comparePlans")
@requires(*READERS)
@blp.arguments(CompareQuerySchema, location="query", as_kwargs=True)
@blp.response(200, ComparisonSchema)
@blp.alt_response(404, response="NOT_FOUND")
def compare_plans(ids):
    """Plans side by side (N, D, loss, days, cost), with every input and output that differs."""
    return plans.compare_plans(get_session(), ids, scope=scope())


@blp.get("/<uuid:plan_id>", operation_id="getPlan")
@requires(*READERS)
@blp.response(200, PlanSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_read(blp)
def get_plan(plan_id):
    """One plan: inputs, snapshot, result, status."""
    plan = plans.get_plan(get_session(), plan_id, scope=scope())
    return plan, etag_header(plan)


@blp.post("/<uuid:plan_id>/commit", operation_id="commitPlan")
@requires("planner", "finance")
@idempotent(blp)
@blp.response(200, PlanSchema, headers=TRANSITION_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(
    202,
    schema=PlanSchema,
    headers=TRANSITION_HEADERS,
    description="The budget asks for approval of plans that cost more than its approval_above: the plan is "
    "pending_approval and nothing is reserved until a finance or admin key approves it.",
)
def commit_plan(plan_id):
    """Commit a draft: reserve its cost, FLOPs and accelerator-hours on its budget (a ledger entry).

    When the plan costs more than its budget's `approval_above`, the answer is 202 instead: the plan is
    `pending_approval`, nothing is reserved, and a `plan.approval_requested` event goes to the organisation's
    webhooks; POST .../approve or .../reject decides.

    409 when the plan is not a draft, or when its budget would be overspent, its FLOP or accelerator-hour
    cap broken, its hardware not allowed, or the run outside its period: `limit` in the problem says which.
    """
    plan = plans.commit_plan(get_session(), plan_id, scope=scope())
    pending = plan.status == PlanStatus.PENDING_APPROVAL
    return plan, 202 if pending else 200, etag_header(plan)


@blp.post("/<uuid:plan_id>/approve", operation_id="approvePlan")
@requires("finance")
@idempotent(blp)
@blp.arguments(ApprovalRequestSchema)
@blp.response(200, PlanSchema, headers=TRANSITION_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def approve_plan(decision, plan_id):
    """Approve a plan pending approval (finance or admin): it is committed, and its cost, FLOPs and
    accelerator-hours reserved on its budget as a commit does, against the budget as it is now; a
    `plan.approved` event follows.

    409 when the plan is not pending approval, or when its budget can no longer hold it (changed since the
    commit asked: `limit` says how, and the plan stays pending)."""
    plan = plans.approve_plan(get_session(), plan_id, note=decision.get("note"), scope=scope())
    return plan, etag_header(plan)


@blp.post("/<uuid:plan_id>/reject", operation_id="rejectPlan")
@requires("finance")
@idempotent(blp)
@blp.arguments(RejectionRequestSchema)
@blp.response(200, PlanSchema, headers=TRANSITION_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def reject_plan(decision, plan_id):
    """Reject a plan pending approval (finance or admin), saying why (`note`): it is rejected, nothing was
    reserved, and a `plan.rejected` event follows. 409 when the plan is not pending approval."""
    plan = plans.reject_plan(get_session(), plan_id, note=decision["note"], scope=scope())
    return plan, etag_header(plan)


@blp.post("/<uuid:plan_id>/cancel", operation_id="cancelPlan")
@requires("planner", "finance")
@idempotent(blp)
@blp.response(200, PlanSchema, headers=TRANSITION_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def cancel_plan(plan_id):
    """Cancel a draft, a plan pending approval or a committed plan; a committed plan's reservation returns
    to its budget."""
    plan = plans.cancel_plan(get_session(), plan_id, scope=scope())
    return plan, etag_header(plan)


@blp.post("/<uuid:plan_id>/revise", operation_id="revisePlan")
@requires("planner")
@blp.arguments(PlanRevisionSchema)
@idempotent(blp, prepare=_evaluate_revision, peek=False)
@blp.response(201, PlanSchema, headers=CREATED_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def revise_plan(_changes, plan_id, prepared):
    """What-if: a new draft from this plan's request with changes (JSON merge patch: null removes a member),
    e.g. more accelerators, another price or another law. It names this plan as its parent."""
    return _created(plans.store_new(get_session(), prepared))


# --- The run: started, its usage reported, completed or failed --------------------------------------------


@blp.post("/<uuid:plan_id>/start", operation_id="startPlan")
@requires("planner")
@idempotent(blp)
@blp.arguments(StartRequestSchema)
@blp.response(200, PlanSchema, headers=TRANSITION_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def start_plan(start, plan_id):
    """committed -> running: its run began (`started_at`, now by default). Optional: the first usage record
    starts a committed plan at its period_start. 409 when the plan is not committed."""
    plan = usage.start_plan(get_session(), plan_id, at=start.get("started_at"), scope=scope())
    return plan, etag_header(plan)


@blp.post("/<uuid:plan_id>/usage", operation_id="reportUsage")
@requires("planner")
@idempotent(blp)
@blp.arguments(UsageRequestSchema)
@blp.response(201, UsageRecordSchema, headers=CREATED_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def report_usage(report, plan_id):
    """Append what the run used in a period: accelerator-hours, tokens trained so far, optionally the
    measured throughput and the cost (else the hours at the price in force at period_start).

    Append-only: a wrong record is reversed (POST .../usage/{id}/reverse), never edited. Send an
    Idempotency-Key: a retry then gets the first response. 409 when the plan is not committed or running, or
    when the period overlaps one the same reporter reported (`field` period_start, `usage_id` the record);
    422 for a period not yet ended, fewer tokens than an earlier period reported, or another currency than
    the plan's."""
    record = usage.report_usage(get_session(), plan_id, report, scope=scope())
    return record, {"Location": f"/v1/plans/{plan_id}/usage/{record.id}"}


@blp.get("/<uuid:plan_id>/usage", operation_id="listUsageRecords")
@requires(*READERS)
@blp.arguments(ListQuerySchema, location="query", as_kwargs=True)
@blp.response(200, UsagePageSchema, headers=LINK_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
def list_usage(plan_id, limit, cursor):
    """The plan's usage records and reversals, newest first."""
    page = usage.list_usage(get_session(), plan_id, scope=scope(), limit=limit, after=cursor)
    return page_response(page, limit)


@blp.get("/<uuid:plan_id>/usage/<uuid:usage_id>", operation_id="getUsageRecord")
@requires(*READERS)
@blp.response(200, UsageRecordSchema)
@blp.alt_response(404, response="NOT_FOUND")
def get_usage(plan_id, usage_id):
    """One usage record."""
    return usage.get_usage(get_session(), plan_id, usage_id, scope=scope())


@blp.post("/<uuid:plan_id>/usage/<uuid:usage_id>/reverse", operation_id="reverseUsageRecord")
@requires("planner", "finance")
@idempotent(blp)
@blp.arguments(ReversalRequestSchema)
@blp.response(201, UsageRecordSchema, headers=CREATED_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def reverse_usage(reversal, plan_id, usage_id):
    """Take a wrong record back: a record of the opposite sign for the same period, after which the period
    may be reported again. 409 for a record already reversed, a reversal, or a plan no longer running."""
    record = usage.reverse_usage(get_session(), plan_id, usage_id, note=reversal.get("note"), scope=scope())
    return record, {"Location": f"/v1/plans/{plan_id}/usage/{record.id}"}


@blp.post("/<uuid:plan_id>/complete", operation_id="completePlan")
@requires("planner")
@idempotent(blp)
@blp.response(200, PlanSchema, headers=TRANSITION_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def complete_plan(plan_id):
    """running -> completed: the part of its reservation the run did not spend returns to its budget (a
    settle entry in the ledger). 409 when the plan is not running."""
    plan = usage.finish_plan(get_session(), plan_id, PlanStatus.COMPLETED, scope=scope())
    return plan, etag_header(plan)


@blp.post("/<uuid:plan_id>/fail", operation_id="failPlan")
@requires("planner")
@idempotent(blp)
@blp.response(200, PlanSchema, headers=TRANSITION_HEADERS)
@blp.alt_response(404, response="NOT_FOUND")
def fail_plan(plan_id):
    """running -> failed: as completing, but the run stopped short. 409 when the plan is not running."""
    plan = usage.finish_plan(get_session(), plan_id, PlanStatus.FAILED, scope=scope())
    return plan, etag_header(plan)

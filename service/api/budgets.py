"""Budgets: what an organisation may spend on plans in a period."""

from __future__ import annotations

from service.api.base import (
    ETAG_HEADER,
    LINK_HEADER,
    LOCATION_HEADER,
    Blueprint,
    conditional_read,
    conditional_write,
    etag_header,
    if_match,
    page_response,
)
from service.data.models import utcnow
from service.infra.db import get_session
from service.schemas.budgets import BUDGET_PATCH, BudgetPageSchema, BudgetQuerySchema, BudgetSchema
from service.schemas.common import ListQuerySchema
from service.schemas.plans import LedgerPageSchema
from service.schemas.reports import UtilizationSchema
from service.schemas.usage import BudgetForecastSchema
from service.services import budget_utilization, budgets, plans, usage
from service.services.pagination import Page
from service.web.auth import READERS, requires, scope

blp = Blueprint("budgets", __name__, url_prefix="/v1/budgets", description="Organisations' budgets")


@blp.get("", operation_id="listBudgets")
@requires(*READERS)
@blp.arguments(BudgetQuerySchema, location="query", as_kwargs=True)
@blp.response(200, BudgetPageSchema, headers=LINK_HEADER)
def list_budgets(limit, cursor, organization=None):
    """Budgets, newest first; filter by `organization`."""
    page = budgets.list_budgets(
        get_session(), scope=scope(), organization=organization, limit=limit, after=cursor
    )
    return page_response(page, limit)


@blp.post("", operation_id="createBudget")
@requires("finance")
@blp.arguments(BudgetSchema)
@blp.response(201, BudgetSchema, headers={**LOCATION_HEADER, **ETAG_HEADER})
def create_budget(body):
    """Create a budget for an organisation."""
    budget = budgets.create_budget(get_session(), body, scope=scope())
    return budget, {"Location": f"/v1/budgets/{budget.id}", **etag_header(budget)}


@blp.get("/<uuid:budget_id>", operation_id="getBudget")
@requires(*READERS)
@blp.response(200, BudgetSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_read(blp)
def get_budget(budget_id):
    """One budget with what is committed and what remains."""
    budget = budgets.get_budget(get_session(), budget_id, scope=scope())
    return budget, etag_header(budget)


@blp.put("/<uuid:budget_id>", operation_id="replaceBudget")
@requires("finance")
@blp.arguments(BudgetSchema)
@blp.response(200, BudgetSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
@conditional_write(blp)
def replace_budget(body, budget_id):
    """Replace a budget (its organisation cannot change)."""
    budget = budgets.update_budget(
        get_session(), budget_id, body, scope=scope(), if_match=if_match(), replace=True
    )
    return budget, etag_header(budget)


@blp.patch("/<uuid:budget_id>", operation_id="updateBudget")
@requires("finance")
@blp.arguments(BUDGET_PATCH)
@blp.response(200, BudgetSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
@conditional_write(blp)
def update_budget(body, budget_id):
    """Change some fields of a budget; the amount cannot drop below what is committed."""
    budget = budgets.update_budget(
        get_session(), budget_id, body, scope=scope(), if_match=if_match(), replace=False
    )
    return budget, etag_header(budget)


@blp.delete("/<uuid:budget_id>", operation_id="deleteBudget")
@requires("finance")
@blp.response(204)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
@conditional_write(blp)
def delete_budget(budget_id):
    """Delete a budget with nothing committed."""
    budgets.delete_budget(get_session(), budget_id, scope=scope(), if_match=if_match())


@blp.get("/<uuid:budget_id>/ledger", operation_id="listBudgetLedger")
@requires(*READERS)
@blp.arguments(ListQuerySchema, location="query", as_kwargs=True)
@blp.response(200, LedgerPageSchema, headers=LINK_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
def list_ledger(limit, cursor, budget_id):
    """The budget's ledger, newest first: each plan's commit (its cost reserved), release (given back when
    cancelled) and settle (what a finished run did not spend, given back). The amounts sum to the budget's
    `committed`."""
    page = plans.list_ledger(get_session(), budget_id, scope=scope(), limit=limit, after=cursor)
    return page_response(page, limit)


@blp.get("/<uuid:budget_id>/utilization", operation_id="getBudgetUtilization")
@requires(*READERS)
@blp.response(200, UtilizationSchema)
@blp.alt_response(404, response="NOT_FOUND")
def utilization(budget_id):
    """Committed against the amount over the budget's period: month by month (each plan in the month of its
    start_at, with the running total), the burn rate (committed per day of the period so far) and the day
    the amount runs out at that rate."""
    return budget_utilization.utilization(get_session(), budget_id, scope=scope(), now=utcnow())


@blp.get("/<uuid:budget_id>/forecast", operation_id="getBudgetForecast")
@requires(*READERS)
@blp.arguments(ListQuerySchema, location="query", as_kwargs=True)
@blp.response(200, BudgetForecastSchema, headers=LINK_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
def forecast(limit, cursor, budget_id):
    """Committed, spent and remaining now, and the estimate at completion: of the budget as the sum over
    every plan charged to it, and of each running plan from its progress (its spend so far over the share of
    its tokens trained), a page of them at a time (newest started first; `next_cursor` and a Link header, as
    every list)."""
    session = get_session()
    budget = budgets.get_budget(session, budget_id, scope=scope())
    found = usage.budget_forecast(session, budget, limit=limit, after=cursor)
    _, link = page_response(Page(found.running, found.next_cursor), limit)
    return found, link

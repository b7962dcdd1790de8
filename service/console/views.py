"""The console's pages. Each one reads its form, validates it with the API's own schemas, and calls the
same use case as the API, so that the console can never answer differently from the API it stands beside.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import flask
import marshmallow as ma
from flask.typing import ResponseReturnValue
from sqlalchemy.orm import Session
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import BadRequest, TooManyRequests
from werkzeug.wrappers import Response as WerkzeugResponse

from service.console import blp, figures, same_origin
from service.console.formatting import FILTERS
from service.console.forms import (
    BUDGET_KINDS,
    DEFAULT_BUDGET_KIND,
    DEFAULT_MODE,
    DEFAULT_QUESTIONS,
    MODES,
    allocation_request,
    comparison_request,
    errors_by_field,
    estimate_request,
    opened_sections,
    plan_filter_query,
    report_form,
    report_query,
)
from service.core import engine
from service.data.models import (
    PLAN_STATUSES,
    PRICINGS,
    Budget,
    FittedLaw,
    HardwareProfile,
    Organization,
    PlanStatus,
    utcnow,
)
from service.infra.db import get_session, reading_session
from service.schemas.budgets import BudgetSchema
from service.schemas.common import ListQuerySchema
from service.schemas.comparisons import OfferComparisonRequestSchema, OfferComparisonSchema
from service.schemas.laws import FrontierQuerySchema
from service.schemas.planning import (
    TRAINING_PRECISIONS,
    AllocationRequestSchema,
    AllocationSchema,
    EstimateRequestSchema,
    EstimateSchema,
)
from service.schemas.plans import (
    ApprovalRequestSchema,
    CompareQuerySchema,
    ComparisonSchema,
    LedgerEntrySchema,
    PlanQuerySchema,
    PlanRequestSchema,
    PlanSchema,
    PlanSummarySchema,
    RejectionRequestSchema,
)
from service.schemas.reports import REPORT_GROUPS, REPORT_MEASURES, CostReportQuerySchema, UtilizationSchema
from service.schemas.usage import BudgetForecastSchema, UsageRecordSchema
from service.services import (
    budget_utilization,
    budgets,
    comparisons,
    hardware,
    idempotency,
    laws,
    offers,
    organizations,
    planning,
    plans,
    reports,
    spend,
    transactions,
    usage,
)
from service.services.errors import InvalidFieldError, NotFoundError, ServiceError
from service.web.auth import CONSOLE_COOKIE, READERS, admit, current_principal, requires, scope
from service.web.csv_files import finance_csv

for _name, _filter in FILTERS.items():
    blp.add_app_template_filter(_filter, _name)

# How the planner chose the accelerator count (the performance document's sizing.chosen_by).
SIZING_TEXTS = {
    "days": "chosen by the deadline: the fewest that finish in time",
    "cost": "chosen by cost: the fewest accelerator-hours among runs within a year",
    "budget": "chosen by the budget: the count whose limits buy the most compute",
}
# Whose run overhead an answer took (the performance document's goodput.run_overhead_source).
OVERHEAD_TEXTS = {
    "default": "as published whole runs lose",
    "hardware": "as the hardware profile states",
    "calibration": "as your organisation's runs lost (its calibration)",
    "request": "as asked",
}
LIST_LIMIT = 25
FRONTIER_POINTS = 25
MAX_FITTED_LAWS_CHARTED = 5  # the newest; more lines than this would not be readable


# --- signing in and out ---------------------------------------------------------------------------------


@blp.route("/sign-in", methods=["GET", "POST"])
def sign_in() -> ResponseReturnValue:
    target = _local_path(flask.request.values.get("next"))
    if flask.request.method == "GET":
        return flask.render_template("console/sign_in.html", next=target, error=None)
    key = flask.request.form.get("key", "").strip()
    try:
        admitted = key and same_origin() and admit(key)
    except TooManyRequests as refused:  # too many failures from this address: the form, to try again later
        error = f"Too many failed sign-ins from this address; try again in {refused.retry_after} seconds."
        page = flask.render_template("console/sign_in.html", next=target, error=error)
        return page, 429, {"Retry-After": str(refused.retry_after)}
    if not admitted:
        error = (
            "That API key is not valid (malformed, unknown, revoked or expired)." if key else "Enter a key."
        )
        return flask.render_template("console/sign_in.html", next=target, error=error), 422
    response = flask.redirect(target)
    # A session cookie (no expiry: gone with the browser), unreadable by scripts, never sent cross-site.
    response.set_cookie(
        CONSOLE_COOKIE, key, httponly=True, samesite="Strict", secure=flask.request.is_secure, path="/"
    )
    return response


@blp.post("/sign-out")
def sign_out() -> WerkzeugResponse:
    response = flask.redirect(flask.url_for(".sign_in"))
    response.delete_cookie(CONSOLE_COOKIE, path="/")
    return response


# What the WHATWG URL parser trims from both ends of a URL, and what it drops anywhere in one.
_C0_CONTROLS_AND_SPACE = "".join(map(chr, range(0x21)))
_DROPPED_BY_BROWSERS = dict.fromkeys(map(ord, "\t\n\r"))
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _local_path(target: str | None) -> str:
    """Only a path on this site (never //host or a scheme): an open redirect would help phishing.

    `target` is judged as a browser will read it (the WHATWG URL parser): C0 controls and spaces trimmed from
    both ends, tabs and newlines dropped anywhere, a backslash read as a slash. Judged as written instead,
    `/<TAB>/evil.example` would pass as a path and reach the browser as `//evil.example`.
    """
    path = (target or "").strip(_C0_CONTROLS_AND_SPACE).translate(_DROPPED_BY_BROWSERS).replace("\\", "/")
    # No page of this site has another control character in its address, and a Location header carrying
    # one may be refused on its way out: those go to the planner too.
    if not path.startswith("/") or path.startswith("//") or _CONTROL.search(path):
        return flask.url_for(".planner")
    return path


# --- the planner -------------------------------------------------------------------------------------------


@blp.get("/")
@requires(*READERS)
def planner() -> tuple[str, int]:
    """The planner: the question (a budget, or a model already chosen, with the hardware and the deadline)
    beside its answer. `mode` says which question; until one is asked the form holds the default one."""
    session = get_session()
    args = flask.request.args
    mode = args.get("mode") or DEFAULT_MODE
    context: dict[str, Any] = {"result": None, "run": None, "chart": None, "errors": {}}
    if mode not in MODES:
        context["errors"] = {"mode": [f"Choose one of: {', '.join(MODES)}."]}
        mode = DEFAULT_MODE
    asked = "tokens" in args or "params" in args if mode == "estimate" else "budget" in args
    context["form"] = args if asked else {**DEFAULT_QUESTIONS[mode], **args}
    if asked and not context["errors"]:
        answer = _estimate if mode == "estimate" else _allocation
        context.update(answer(session, args))
    return _render_planner(session, mode, context, 422 if context["errors"] else 200)


def _allocation(session: Session, form: Mapping[str, str]) -> dict[str, Any]:
    """What a budget buys (POST /v1/allocations), with its charts; or the errors, by field."""
    request, errors = allocation_request(form)
    if errors:
        return {"errors": errors}
    try:
        loaded = AllocationRequestSchema().load(request)
        outcome = planning.make_allocation(session, loaded, scope=scope())
    except (ma.ValidationError, InvalidFieldError) as error:
        return {"errors": errors_by_field(error, form.get("budget_kind", DEFAULT_BUDGET_KIND))}
    result = AllocationSchema().dump(outcome)
    chart, note = figures.isoflop_chart(outcome)
    figures_of_run = {}
    if outcome.estimate is not None:
        limit = loaded.cost if loaded.currency == outcome.estimate.currency else None
        figures_of_run = _cluster_figures(outcome.estimate, result["estimate"], loaded, cost_limit=limit)
    return {
        "result": result,
        "run": result["estimate"],
        "chart": chart,
        "chart_note": note,
        "idempotency_key": uuid.uuid4().hex,
        **figures_of_run,
    }


def _estimate(session: Session, form: Mapping[str, str]) -> dict[str, Any]:
    """What a model already chosen takes (POST /v1/estimates), with its charts; or the errors, by field."""
    try:
        loaded = EstimateRequestSchema().load(estimate_request(form))
        estimate = planning.make_estimate(session, loaded, scope=scope())
    except (ma.ValidationError, InvalidFieldError) as error:
        return {"errors": errors_by_field(error)}
    run = EstimateSchema().dump(estimate)
    figures_of_run = _cluster_figures(estimate, run, loaded, cost_limit=None)
    return {"run": run, "idempotency_key": uuid.uuid4().hex, **figures_of_run}


def _cluster_figures(
    estimate: engine.Estimate,
    run: Mapping[str, Any],
    request: planning.AllocationRequest | planning.EstimateRequest,
    *,
    cost_limit: Decimal | None,
) -> dict[str, Any]:
    """The cluster model's charts of a run: its step by part, and the run against the accelerator count
    (none for a run at a given MFU, which the model does not pace)."""
    if estimate.run is None:
        return {}
    sizes = planning.cluster_sizes(estimate, max_accelerators=request.max_accelerators)
    size_charts, caption = figures.cluster_size_charts(
        sizes,
        estimate.accelerators,
        currency=estimate.currency,
        deadline_days=request.days,
        cost_limit=cost_limit,
    )
    return {
        "breakdown_chart": figures.breakdown_chart(run["performance"]),
        "size_charts": size_charts,
        "size_caption": caption,
    }


def _render_planner(session: Session, mode: str, context: dict[str, Any], status: int) -> tuple[str, int]:
    context.update(
        mode=mode,
        modes=MODES,
        sections=opened_sections(mode, context["form"], context["errors"]),
        budget_kinds=BUDGET_KINDS,
        sizing_texts=SIZING_TEXTS,
        overhead_texts=OVERHEAD_TEXTS,
        default_budget_kind=DEFAULT_BUDGET_KIND,
        precisions=[(name, name) for name in TRAINING_PRECISIONS if name != engine.DEFAULT_PRECISION],
        default_precision=engine.DEFAULT_PRECISION,
        hardware_choices=[(item.slug, f"{item.name} ({item.slug})") for item in _hardware_profiles(session)],
        published_laws=laws.published_laws(),
        fitted_laws=_fitted_laws(session),
        budgets=_budgets(session),
        organizations=_organizations(session) if current_principal().is_admin else [],
    )
    return flask.render_template("console/planner.html", **context), status


@blp.post("/plans")
@requires("planner")
def save_plan() -> WerkzeugResponse | tuple[str, int]:
    session = get_session()
    form = flask.request.form
    mode = form.get("mode") or DEFAULT_MODE
    if mode not in MODES:
        raise BadRequest(f"The form's mode must be one of: {', '.join(MODES)}; reload the page.")
    # A model already chosen is saved as POST /v1/plans takes one: its params and tokens, on the accelerators
    # the page showed (the form carries them, not the deadline that chose them).
    request, errors = (estimate_request(form), {}) if mode == "estimate" else allocation_request(form)
    for name in ("name", "budget_id", "organization"):
        if form.get(name, "").strip():
            request[name] = form[name].strip()
    request.setdefault("organization", _organization_slug() or "")
    # A plan names its accelerators: the page's form carries the count the planner chose, not the limit.
    request.pop("max_accelerators", None)
    if not errors:
        try:
            request = PlanRequestSchema().load(request)
            with reading_session() as reads:  # evaluated before the writing transaction, as the API does
                draft = plans.evaluate_new(reads, request, scope=scope())
            return _once(
                session, lambda: flask.url_for(".plan_page", plan_id=plans.store_new(session, draft).id)
            )
        except (ma.ValidationError, InvalidFieldError) as error:  # nothing saved: _once rolls back
            budget_kind = None if mode == "estimate" else form.get("budget_kind", DEFAULT_BUDGET_KIND)
            errors = errors_by_field(error, budget_kind)
    context = {"form": form, "errors": errors, "result": None, "run": None, "chart": None}
    return _render_planner(session, mode, context, 422)


# --- plans -------------------------------------------------------------------------------------------------


@blp.get("/plans")
@requires(*READERS)
def plan_history() -> tuple[str, int]:
    session = get_session()
    items, next_page, errors = [], None, {}
    try:
        query = PlanQuerySchema().load(plan_filter_query(flask.request.args))
    except ma.ValidationError as error:
        errors = errors_by_field(error)
    else:
        limit, cursor = query.pop("limit", LIST_LIMIT), query.pop("cursor", None)
        page = plans.list_plans(session, plans.PlanFilter(**query), scope=scope(), limit=limit, after=cursor)
        items = PlanSummarySchema(many=True).dump(page.items)
        next_page = _next_page_args(page.next_cursor)
    html = flask.render_template(
        "console/plans.html",
        plans=items,
        next_page=next_page,
        errors=errors,
        form=flask.request.args,
        statuses=PLAN_STATUSES,
        budgets=_budgets(session),
        hardware_profiles=_hardware_profiles(session),
    )
    return html, 422 if errors else 200


@blp.get("/plans/compare")
@requires(*READERS)
def compare_plans() -> str:
    ids = ",".join(flask.request.args.getlist("ids"))
    query = CompareQuerySchema().load({"ids": ids} if ids else {})
    comparison = plans.compare_plans(get_session(), query["ids"], scope=scope())
    return flask.render_template("console/compare.html", comparison=ComparisonSchema().dump(comparison))


@blp.get("/plans/<uuid:plan_id>")
@requires(*READERS)
def plan_page(plan_id: uuid.UUID, error: str | None = None, status: int = 200) -> tuple[str, int]:
    session = get_session()
    plan = plans.get_plan(session, plan_id, scope=scope())
    records = usage.list_usage(session, plan_id, scope=scope(), limit=LIST_LIMIT, after=None)
    charged = None if plan.budget_id is None else budgets.get_budget(session, plan.budget_id, scope=scope())
    page = flask.render_template(
        "console/plan.html",
        plan=PlanSchema().dump(plan),
        budget_name=None if charged is None else charged.name,
        usage=UsageRecordSchema(many=True).dump(records.items),
        more_usage=records.next_cursor is not None,
        error=error,
        idempotency_key=uuid.uuid4().hex,
    )
    return page, status


@blp.post("/plans/<uuid:plan_id>/<any(commit, cancel):action>")
@requires("planner", "finance")
def change_plan(plan_id: uuid.UUID, action: str) -> WerkzeugResponse | tuple[str, int]:
    session = get_session()
    change = plans.commit_plan if action == "commit" else plans.cancel_plan

    def act() -> str:
        change(session, plan_id, scope=scope())
        return flask.url_for(".plan_page", plan_id=plan_id)

    try:
        return _once(session, act)
    except NotFoundError:
        raise
    except ServiceError as error:  # rolled back by _once; e.g. the budget cannot hold it: said on the page
        return plan_page(plan_id, error=error.detail, status=409)


@blp.post("/plans/<uuid:plan_id>/decide")
@requires("finance")
def decide_plan(plan_id: uuid.UUID) -> WerkzeugResponse | tuple[str, int]:
    """Approve or reject a plan pending approval (the form's `decision`), with the form's note."""
    session = get_session()
    form = flask.request.form
    note = (form.get("note") or "").strip() or None
    decision = form.get("decision")
    if decision not in {"approve", "reject"}:
        raise BadRequest("The form's decision must be approve or reject.")
    schema = ApprovalRequestSchema() if decision == "approve" else RejectionRequestSchema()
    try:
        schema.load({} if note is None else {"note": note})  # as the API's approve or reject would
    except ma.ValidationError as error:
        return plan_page(plan_id, error=" ".join(errors_by_field(error)["note"]), status=422)
    change = plans.approve_plan if decision == "approve" else plans.reject_plan

    def act() -> str:
        change(session, plan_id, note=note, scope=scope())
        return flask.url_for(".plan_page", plan_id=plan_id)

    try:
        return _once(session, act)
    except NotFoundError:
        raise
    except ServiceError as error:  # rolled back by _once; e.g. the budget can no longer hold it
        return plan_page(plan_id, error=error.detail, status=409)


def _once(session: Session, act: Callable[[], str]) -> WerkzeugResponse:
    """Run `act` (it writes, and says which page to show next) once per rendered form, and go there.

    Each form that writes carries an idempotency key, used as the API's Idempotency-Key: a second
    submission of the same form (a double click, a reload) goes where the first went and writes nothing.
    """
    token = flask.request.form.get("idempotency_key") or None
    key = None
    if token is not None:
        if not idempotency.is_valid_key(token):
            raise BadRequest("The form's idempotency_key is not valid; reload the page.")
        fingerprint = idempotency.fingerprint("POST", flask.request.path, flask.request.get_data())
        key = idempotency.RequestKey(current_principal().key_id, token, fingerprint)
    location = transactions.run_once(
        session,
        act,
        key=key,
        record=lambda location: idempotency.StoredResponse(303, "", {"Location": location}),
        replay=lambda stored: stored.headers["Location"],
    )
    return flask.redirect(location, 303)


# --- budgets ------------------------------------------------------------------------------------------------


@blp.get("/budgets")
@requires(*READERS)
def budget_list() -> str:
    session = get_session()
    query = ListQuerySchema().load(
        {"cursor": flask.request.args["cursor"]} if "cursor" in flask.request.args else {}
    )
    page = budgets.list_budgets(
        session, scope=scope(), organization=None, limit=LIST_LIMIT, after=query.get("cursor")
    )
    items = BudgetSchema(many=True).dump(page.items)
    bars = {item["id"]: figures.utilization_bar(item, f"bar-{item['id']}", width=320) for item in items}
    return flask.render_template(
        "console/budgets.html", budgets=items, bars=bars, next_page=_next_page_args(page.next_cursor)
    )


@blp.get("/budgets/<uuid:budget_id>")
@requires(*READERS)
def budget_page(budget_id: uuid.UUID) -> str:
    session = get_session()
    use = budget_utilization.utilization(session, budget_id, scope=scope(), now=utcnow())
    budget = BudgetSchema().dump(use.budget)
    utilization = UtilizationSchema().dump(use)
    ledger = plans.list_ledger(session, budget_id, scope=scope(), limit=LIST_LIMIT, after=None)
    forecast = BudgetForecastSchema().dump(usage.budget_forecast(session, use.budget, limit=LIST_LIMIT))
    waiting = plans.PlanFilter(budget_id=budget_id, status=PlanStatus.PENDING_APPROVAL)
    pending = plans.list_plans(session, waiting, scope=scope(), limit=LIST_LIMIT, after=None)
    return flask.render_template(
        "console/budget.html",
        pending=PlanSummarySchema(many=True).dump(pending.items),
        budget=budget,
        forecast=forecast,
        utilization=utilization,
        bar=figures.utilization_bar(budget, "utilization"),
        burn=figures.burn_chart(utilization, forecast),
        ledger=LedgerEntrySchema(many=True).dump(ledger.items),
        plan_names={
            str(plan_id): name
            for plan_id, name in plans.names_of(session, {entry.plan_id for entry in ledger.items}).items()
        },
        more_ledger=ledger.next_cursor is not None,
    )


# --- scaling laws ---------------------------------------------------------------------------------------


@blp.get("/laws")
@requires(*READERS)
def law_frontier() -> str:
    session = get_session()
    args = {
        name: flask.request.args[name] for name in ("min_flops", "max_flops") if flask.request.args.get(name)
    }
    shown = {"min_flops": 1e19, "max_flops": 1e26}  # from today's small runs to beyond the largest
    try:
        query, errors = FrontierQuerySchema().load({**shown, **args}), {}
    except ma.ValidationError as error:  # said beside the range, and the default range drawn
        query, errors = FrontierQuerySchema().load(shown), errors_by_field(error)
    fitted = _fitted_laws(session)
    # Dense laws only: the frontier drawn is 6·N·D's closed form, where a mixture-of-experts law's N is active
    # parameters and its compute counts the router (allocate.moe_compute_optimal); not comparable on one axis.
    dense = [law for law in laws.published_laws() if law.moe is None]
    named = dense + [laws.engine_law(session, law.slug, scope=scope()) for law in fitted]
    frontier, rows = figures.frontier_charts(named, query["min_flops"], query["max_flops"], FRONTIER_POINTS)
    return flask.render_template(
        "console/laws.html",
        charts=frontier,
        rows=rows,
        query=query,
        errors=errors,
        warned=[law for law in fitted if law.warnings],  # what each fit leaves in doubt
    )


# --- comparing offers -------------------------------------------------------------------------------------


@blp.get("/comparisons")
@requires(*READERS)
def compare_offers() -> tuple[str, int]:
    """One run priced on every offer: the question first, the frontier and the ranked table beside it."""
    session = get_session()
    args = flask.request.args
    request = comparison_request(args)
    comparison, errors = None, {}
    if request:  # the page opens on the question alone
        try:
            comparison = _compared(session, request)
        except (ma.ValidationError, InvalidFieldError) as error:
            errors = errors_by_field(error)
    return _offers_page(session, args, comparison, errors)


@blp.post("/comparisons/plans")
@requires("planner")
def save_comparison() -> WerkzeugResponse | tuple[str, int]:
    """The offers checked on a comparison's page, each kept as a draft plan of the organisation, labelled
    with its offer and the comparison; then the plan history of that comparison. The comparison is made
    again from the question the form carries (its searches remembered), so a plan is the run the page
    showed; a form sent twice saves once (`_once`)."""
    session = get_session()
    form = flask.request.form
    comparison, errors = None, {}
    try:
        comparison = _compared(session, comparison_request(form))
        chosen = set(form.getlist("offer"))
        rows = [row for row in comparison["offers"] if row["offer"] in chosen]
        if not rows:
            raise ma.ValidationError({"offer": ["Check at least one offer that takes the run."]})
        organization = form.get("organization", "").strip() or _organization_slug() or ""
        tag = (form.get("idempotency_key") or uuid.uuid4().hex)[:12]
        with reading_session() as reads:  # evaluated before the writing transaction, as the API does
            drafts = [
                plans.evaluate_new(reads, _saved_row(row, organization, tag), scope=scope()) for row in rows
            ]

        def save() -> str:
            for draft in drafts:
                plans.store_new(session, draft)
            return flask.url_for(".plan_history", label=f"comparison:{tag}")

        return _once(session, save)
    except (ma.ValidationError, InvalidFieldError) as error:  # nothing saved: _once rolls back
        errors = errors_by_field(error)
    return _offers_page(session, form, comparison, errors)


def _compared(session: Session, request: dict[str, Any]) -> dict[str, Any]:
    """The comparison a page asks for, as OfferComparisonSchema shows it."""
    loaded = OfferComparisonRequestSchema().load(request)
    document = comparisons.comparison_document(comparisons.compare_offers(session, loaded, scope=scope()))
    shown: dict[str, Any] = OfferComparisonSchema().dump(document)
    return shown


def _saved_row(row: dict[str, Any], organization: str, tag: str) -> plans.PlanRequest:
    """A comparison's row as POST /v1/plans takes it: its `plan`, in the organisation, labelled."""
    body = {**row["plan"], "organization": organization}
    body["labels"] = {**body.get("labels", {}), "comparison": tag}
    request: plans.PlanRequest = PlanRequestSchema().load(body)
    return request


def _offers_page(
    session: Session, form: Any, comparison: dict[str, Any] | None, errors: dict[str, Any]
) -> tuple[str, int]:
    html = flask.render_template(
        "console/offers.html",
        form=form,
        comparison=comparison,
        chart=None if comparison is None else figures.comparison_chart(comparison),
        errors=errors,
        hardware=offers.hardware_offered(session),
        pricings=PRICINGS,
        rankings=comparisons.RANKINGS,
        idempotency_key=uuid.uuid4().hex,
        organizations=_organizations(session) if current_principal().is_admin else [],
    )
    return html, 422 if errors else 200


# --- cost report ----------------------------------------------------------------------------------------


@blp.get("/reports/costs")
@requires(*READERS)
def cost_report() -> tuple[str, int]:
    args = report_query(flask.request.args)
    report, errors = None, {}
    try:
        query = CostReportQuerySchema().load(args)
    except ma.ValidationError as error:
        errors = errors_by_field(error)
    else:
        report = _report(query)
    session = get_session()
    budget_choices = _budgets(session)
    return flask.render_template(
        "console/costs.html",
        report=report,
        charts=figures.planned_actual_charts(report) if isinstance(report, spend.SpendReport) else [],
        measures=REPORT_MEASURES,
        query=args,
        shown=report_form(args),
        groups=REPORT_GROUPS,
        statuses=PLAN_STATUSES,
        errors=errors,
        csv_args=MultiDict(flask.request.args),
        budgets=budget_choices,
        budget_names={str(budget.id): budget.name for budget in budget_choices},
        hardware_profiles=_hardware_profiles(session),
        organizations=_organizations(session),
    ), (422 if errors else 200)


@blp.get("/reports/costs.csv")
@requires(*READERS)
def cost_report_csv() -> flask.Response:
    query = CostReportQuerySchema().load(report_query(flask.request.args))
    stem = f"costs_{query['from_']:%Y%m%d}_{query['to']:%Y%m%d}"
    return finance_csv(_cost_query(query), stem, query["part"], scope=scope())


def _report(query: Mapping[str, Any]) -> reports.CostReport | spend.SpendReport:
    cost_query = _cost_query(query)
    if cost_query.measure == "planned":
        return reports.cost_report(get_session(), cost_query, scope=scope())
    return spend.spend_report(get_session(), cost_query, scope=scope())


def _cost_query(query: Mapping[str, Any]) -> reports.CostQuery:
    filters = {name: query[name] for name in ("organization", "budget_id", "hardware") if name in query}
    return reports.CostQuery(
        start=query["from_"],
        end=query["to"],
        granularity=query.get("granularity") or "none",
        group_by=query["group_by"],
        statuses=query["statuses"],
        measure=query["measure"],
        **filters,
    )


# --- shared lookups -------------------------------------------------------------------------------------


def _organization_slug() -> str | None:
    organization_id = current_principal().organization_id
    return None if organization_id is None else organizations.slug_of(get_session(), organization_id)


def _organizations(session: Session) -> list[Organization]:
    return organizations.list_organizations(session, scope=scope(), limit=100, after=None).items


def _budgets(session: Session) -> list[Budget]:
    return budgets.list_budgets(session, scope=scope(), organization=None, limit=100, after=None).items


def _hardware_profiles(session: Session) -> list[HardwareProfile]:
    return hardware.list_hardware(session, vendor=None, precision=None, limit=100, after=None).items


def _fitted_laws(session: Session) -> list[FittedLaw]:
    return laws.list_fitted_laws(
        session, scope=scope(), organization=None, limit=MAX_FITTED_LAWS_CHARTED, after=None
    ).items


def _next_page_args(cursor: str | None) -> dict[str, str] | None:
    if cursor is None:
        return None
    args = flask.request.args.to_dict()
    args["cursor"] = cursor
    return args

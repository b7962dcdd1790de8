"""From HTML forms (every value a string) to the request documents the API's schemas validate, and from
their refusals back to messages beside the form fields."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import marshmallow as ma

from service.core.shape import LATENT_ATTENTION_FIELDS, MOE_FIELDS
from service.schemas.fields import numeral
from service.schemas.planning import LayoutSchema, ModelShapeSchema
from service.schemas.reports import REPORT_GROUPS
from service.services.errors import InvalidFieldError

# The budget a person plans with: one amount in one of these units.
BUDGET_KINDS = {
    "pf_days": "PF-days",
    "flops": "FLOPs",
    "cost": "Money",
    "days": "Deadline (days)",
    "target_loss": "Target loss",
}
DEFAULT_BUDGET_KIND = "pf_days"
# Limits that go with the budget, each a field of its own, as the API combines them (the tightest binds).
LIMIT_FIELDS = ("cost", "days", "accelerator_hours")
# Planner fields passed through as typed (after the budget), and those that are numbers: the schemas take
# JSON numbers only ("8" is refused where 8 is wanted), so a form's numerals are read as numbers first. A
# blank field is left out of the request: the accelerators are then chosen, the MFU predicted by the cluster
# model, and the layout's fields searched (or their defaults taken).
CLUSTER_FIELDS = ("hardware", "accelerators", "max_accelerators", "mfu", "precision", "law")
RULE_FIELDS = ("tokens_per_param", "unique_tokens", "inference_tokens")
PLANNER_FIELDS = CLUSTER_FIELDS + RULE_FIELDS
# The estimate's own: the model a person has already chosen, and the deadline it must meet.
MODEL_FIELDS = ("params", "tokens", "days")
# The request's objects, each from fields of the same names: `shape`, `layout` and `reliability`, as their
# schemas declare them (the shape's micro_batch is the layout's, under an older name: the page has that one).
SHAPE_FIELDS = tuple(name for name in ModelShapeSchema().fields if name != "micro_batch")
LAYOUT_FIELDS = tuple(LayoutSchema().fields)
RELIABILITY_FIELDS = ("checkpoint_write_bytes_per_second", "restart_seconds")
GROUPS = {"shape": SHAPE_FIELDS, "layout": LAYOUT_FIELDS, "reliability": RELIABILITY_FIELDS}
BOOLEAN_FIELDS = frozenset({"sequence_parallel", "flash_attention", "expert_overlap"})
TEXT_FIELDS = frozenset({"hardware", "precision", "law", "activation", "recomputation"})
NUMBER_FIELDS = frozenset(
    {
        "budget",
        "accelerator_hours",
        *PLANNER_FIELDS,
        *MODEL_FIELDS,
        *SHAPE_FIELDS,
        *LAYOUT_FIELDS,
        *RELIABILITY_FIELDS,
    }
    - BOOLEAN_FIELDS
    - TEXT_FIELDS
)

# The planner's two questions (its `mode`): what a budget buys, and what a model already chosen takes.
MODES = {"plan": "From a budget", "estimate": "I already have a model"}
DEFAULT_MODE = "plan"
# What each question holds before a person changes it: a money budget on the usual hardware by a deadline,
# and Chinchilla's 70B on 1.4T tokens by a deadline. Pressing the button answers it.
DEFAULT_QUESTIONS = {
    "plan": {
        "budget_kind": "cost",
        "budget": "5,000,000",
        "currency": "USD",
        "hardware": "h100-sxm",
        "days": "60",
    },
    "estimate": {"params": "7e10", "tokens": "1.4e12", "hardware": "h100-sxm", "days": "30"},
}
# Beyond the question, fields in sections folded under "Advanced", each open when it holds a value or an
# error (an error about one of the request's objects as a whole, shape, layout or reliability, goes with the
# section of that name), so that nothing a person set is hidden. The template draws each section's fields;
# a test holds it to these.
# The mixture of experts' and latent attention's members of the shape and the layout, a section of their own.
MIXTURE_FIELDS = (
    "experts",
    *MOE_FIELDS,
    "expert_parallel",
    "expert_overlap",
    "kv_lora_rank",
    *LATENT_ATTENTION_FIELDS,
    "mtp_depth",
)
NOT_ASKED = frozenset({"dropout", "tensor_parallel_overlap"})  # the API takes them; the page has no field
SECTIONS = {
    "limits": ("cost", "accelerator_hours"),
    "rule": RULE_FIELDS,
    "cluster": ("max_accelerators", "mfu", "precision"),
    "layout": tuple(name for name in LAYOUT_FIELDS if name not in {*MIXTURE_FIELDS, *NOT_ASKED}),
    "shape": tuple(name for name in SHAPE_FIELDS if name not in {*MIXTURE_FIELDS, *NOT_ASKED}),
    "mixture": MIXTURE_FIELDS,
    "reliability": RELIABILITY_FIELDS,
}
ADVANCED = {
    "plan": ("limits", "rule", "cluster", "layout", "shape", "mixture", "reliability"),
    "estimate": ("cluster", "layout", "shape", "mixture", "reliability"),
}


def opened_sections(mode: str, form: Mapping[str, str], errors: Mapping[str, Any]) -> dict[str, bool]:
    """Which of the mode's advanced sections render open: those holding a value (every field there is blank
    by default) or an error."""
    return {
        section: any(form.get(name, "").strip() or errors.get(name) for name in SECTIONS[section])
        or (section in GROUPS and bool(errors.get(section)))
        for section in ADVANCED[mode]
    }


_BOOLEANS = {"true": True, "false": False}  # a menu's values; other text is left for the schema to refuse


def _number_text(text: str) -> str:
    """People write 6,000 or 1_000_000 or 1 000; the schemas read plain numerals."""
    return text.replace(",", "").replace("_", "").replace(" ", "")


def allocation_request(form: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The allocation request a planner form describes, and the form's own errors (by field)."""
    request: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    kind = form.get("budget_kind", DEFAULT_BUDGET_KIND)
    budget = _number_text(form.get("budget", "").strip())
    if kind not in BUDGET_KINDS:
        errors["budget_kind"] = [f"Choose one of: {', '.join(BUDGET_KINDS.values())}."]
    elif not budget:
        errors["budget"] = ["Enter a budget."]
    else:
        request[kind] = budget if kind == "cost" else numeral(budget)  # money stays a decimal string
    for name in LIMIT_FIELDS:
        text = _number_text(form.get(name, "").strip())
        if text and name == kind:
            errors[name] = [f"It is the budget already ({BUDGET_KINDS[kind]}): give it once."]
        elif text:
            request[name] = text if name == "cost" else numeral(text)
    if kind == "cost" or "cost" in request:
        request["currency"] = form.get("currency", "").strip().upper()
    _add_cluster(request, form, PLANNER_FIELDS)
    return request, errors


def estimate_request(form: Mapping[str, str]) -> dict[str, Any]:
    """The estimate request an estimate form describes, as POST /v1/estimates takes it."""
    request: dict[str, Any] = {}
    _add_cluster(request, form, MODEL_FIELDS + CLUSTER_FIELDS)
    return request


def _add_cluster(request: dict[str, Any], form: Mapping[str, str], names: tuple[str, ...]) -> None:
    """The fields `names` as typed, and the request's objects (shape, layout, reliability) from theirs."""
    for name in names:
        text = form.get(name, "").strip()
        if text:
            request[name] = _typed(name, text)
    for group, members in GROUPS.items():
        given = {name: _typed(name, form[name].strip()) for name in members if form.get(name, "").strip()}
        if given:
            request[group] = given
    if "shape" in request and "micro_batch" in request.get("layout", {}):
        # The shape's micro-batch is the older name of the layout's: a plan at a given MFU counts the
        # memory of the micro-batch from it, so that the one field means the same with and without an MFU.
        request["shape"]["micro_batch"] = request["layout"]["micro_batch"]


def _typed(name: str, text: str) -> Any:
    if name in NUMBER_FIELDS:
        return numeral(_number_text(text))
    return _BOOLEANS.get(text, text) if name in BOOLEAN_FIELDS else text


def errors_by_field(
    error: ma.ValidationError | InvalidFieldError, budget_kind: str | None = None
) -> dict[str, list[str]]:
    """Messages keyed by form field ("_form" for the whole form). On the planner (`budget_kind` given) the
    budget's errors go beside its amount, those of the shape's, the layout's and the reliability's members
    beside their own fields, and those about one of these objects as a whole beside its group of fields."""
    found: dict[str, list[str]] = {}
    if isinstance(error, InvalidFieldError):
        # The members of the request's objects have fields of their own on the planner.
        path = error.field[1:] if error.field[:1] in _GROUP_PATHS and len(error.field) > 1 else error.field
        member = str(path[0]) if path else "_form"
        found.setdefault(_form_field(member, budget_kind), []).append(error.detail)
        return found
    messages = error.messages
    if isinstance(messages, Mapping):
        messages = _ungrouped(messages)
    for member, texts in _flatten(messages, ""):
        found.setdefault(_form_field(member, budget_kind), []).extend(texts)
    return found


_GROUP_PATHS = [(group,) for group in GROUPS]


def _ungrouped(messages: Mapping[str, Any]) -> dict[str, Any]:
    """The messages of the request's objects' members under the members' names (a message about an object
    as a whole under its own name); the shape's and the layout's micro-batch are one field."""
    flat: dict[str, Any] = {}
    for name, sub in messages.items():
        members = sub.items() if name in GROUPS and isinstance(sub, Mapping) else [(name, sub)]
        for member, texts in members:
            key = name if member == "_schema" else member
            flat[key] = [*_listed(flat[key]), *_listed(texts)] if key in flat else texts
    return flat


def _listed(texts: Any) -> list[Any]:
    return list(texts) if isinstance(texts, list | tuple) else [texts]


def _form_field(member: str, budget_kind: str | None) -> str:
    """The planner's field for a request member: the amount for the budget's own, else its namesake."""
    if budget_kind is None or (member in LIMIT_FIELDS and member != budget_kind):
        return member
    return "budget" if member in BUDGET_KINDS else member


def _flatten(tree: Any, member: str) -> Iterator[tuple[str, list[str]]]:
    if isinstance(tree, Mapping):
        for name, sub in tree.items():
            top = member or ("_form" if name == "_schema" else str(name))
            yield from _flatten(sub, top)
    elif isinstance(tree, list | tuple):
        messages = [str(item) for item in tree if not isinstance(item, Mapping | list | tuple)]
        if messages:
            yield member or "_form", messages
        for item in tree:
            if isinstance(item, Mapping | list | tuple):
                yield from _flatten(item, member)
    else:
        yield member or "_form", [str(tree)]


def _instant(text: str | None) -> str | None:
    """A date input (YYYY-MM-DD) as the UTC instant the schemas take; other text passes for them to judge."""
    if not text:
        return None
    try:
        day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        return text
    return day.isoformat()


def plan_filter_query(args: Mapping[str, str]) -> dict[str, str]:
    """Plan history filters (empty inputs left out) as GET /v1/plans takes them."""
    query = {
        name: args[name].strip()
        for name in ("status", "budget_id", "hardware", "label", "cursor")
        if args.get(name, "").strip()
    }
    for name in ("created_from", "created_to"):
        instant = _instant(args.get(name, "").strip())
        if instant:
            query[name] = instant
    return query


def report_query(args: Mapping[str, str], now: datetime | None = None) -> dict[str, Any]:
    """Cost report filters as GET /v1/reports/costs takes them, from the page's form or from the API's own
    query (a report's URL with /v1 taken off); by default this calendar year by month and budget, planned
    against actual (of plans whose cost is reserved or spent)."""
    now = now or datetime.now(UTC)
    groups = [name for name in REPORT_GROUPS if args.get(f"group_{name}")]
    for key in args.get("group_label", "").split(","):  # label keys, as many as the API takes
        if key.strip():
            groups.append(f"label:{key.strip()}")
    query: dict[str, Any] = {
        "from": _instant(args.get("from", "").strip()) or f"{now.year}-01-01T00:00:00+00:00",
        "to": _instant(args.get("to", "").strip()) or f"{now.year + 1}-01-01T00:00:00+00:00",
        "granularity": args.get("granularity") or "month",
        "measure": args.get("measure") or "both",
    }
    if args.get("status"):
        query["status"] = args["status"]
    # Once the form was sent, its choice of groups (even none); else the API's group_by; else by budget.
    group_by = ",".join(groups) if groups or "grouped" in args else args.get("group_by", "budget").strip()
    if group_by:
        query["group_by"] = group_by
    for name in ("organization", "budget_id", "hardware"):
        if args.get(name, "").strip():
            query[name] = args[name].strip()
    return query


def report_form(query: Mapping[str, Any]) -> dict[str, Any]:
    """What the cost report's form shows of the query it ran (`report_query`'s): the window's ends as the
    date inputs take them (the UTC day of an instant; a browser shows anything else as blank), the groups
    ticked and the label keys."""
    groups = [group.strip() for group in query.get("group_by", "").split(",")]
    return {
        **{end: _utc_day(query[end]) for end in ("from", "to")},
        "groups": [group for group in groups if group in REPORT_GROUPS],
        "group_label": ",".join(group[len("label:") :] for group in groups if group.startswith("label:")),
    }


def _utc_day(text: str) -> str:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return ""  # not an instant: the schema's error says so beside the form
    return f"{moment.astimezone(UTC) if moment.tzinfo else moment:%Y-%m-%d}"


# The comparison page's fields: the run's, and the filters of the offers it may go to (checkboxes of
# pricings, a list of hardware slugs).
COMPARISON_NUMBERS = ("params", "tokens", "days", "flops", "max_accelerators")
COMPARISON_TEXTS = ("cost", "currency", "law", "rank_by")


def comparison_request(args: Mapping[str, str]) -> dict[str, Any]:
    """The comparison a page's query asks for, as POST /v1/comparisons takes it: blank fields left out."""
    request: dict[str, Any] = {}
    for name in COMPARISON_NUMBERS:
        if text := _number_text(args.get(name, "").strip()):
            request[name] = numeral(text)
    for name in COMPARISON_TEXTS:
        if text := args.get(name, "").strip():
            request[name] = _number_text(text) if name == "cost" else text
    getlist = getattr(args, "getlist", None)
    for name in ("hardware", "pricing"):
        values = [value for value in (getlist(name) if getlist else [args.get(name, "")]) if value]
        if values:
            request[name] = values
    return request

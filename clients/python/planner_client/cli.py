"""`planner`: the Compute Planner API from a shell, on top of planner_client.PlannerClient.

    export PLANNER_URL=http://127.0.0.1:8000 PLANNER_API_KEY=cpk_...
    planner allocate --pf-days 6000
    planner plan create --organization acme --pf-days 6000 --hardware h100-sxm --accelerators 1024
    planner plan list --organization acme --status committed
    planner report costs --from 2026-01-01T00:00:00Z --to 2027-01-01T00:00:00Z --group-by budget --format csv

Results print as readable tables; `--json` prints the API's JSON instead. An error prints the problem's
detail and each invalid field, and exits 1 (2 for a command line that does not parse).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import requests

from planner_client.client import PlannerClient, ProblemError

# Request fields that take a value on the command line, by flag: (field, type). `shape` (an object) and
# anything else go through --body.
BUDGET_FIELDS = {
    "flops": float,
    "pf_days": float,
    "cost": str,
    "currency": str,
    "accelerator_hours": float,
    "days": float,
    "target_loss": float,
}
RULE_FIELDS = {
    "law": str,
    "tokens_per_param": float,
    "unique_tokens": float,
    "inference_tokens": float,
}
CLUSTER_FIELDS = {
    "hardware": str,
    "accelerators": int,
    "mfu": float,
    "precision": str,
    "price_per_hour": str,
    "optimizer": str,
    "zero_stage": int,
    "tensor_parallel": int,
    "recomputation": str,
}
PLAN_FIELDS = {
    "organization": str,
    "name": str,
    "budget_id": str,
    "budget": str,
    "params": float,
    "tokens": float,
    "start_at": str,
}
LIST_LIMIT = 20


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    client = PlannerClient(args.url, args.api_key)
    try:
        args.run(client, args)
    except ProblemError as error:
        print(f"error: {error.status} {error.title}: {error.detail}", file=sys.stderr)
        for entry in error.errors:
            where = entry.get("pointer") or entry.get("parameter") or entry.get("header") or ""
            print(f"  {where}: {entry.get('detail')}", file=sys.stderr)
        return 1
    except requests.RequestException as error:
        print(f"error: cannot reach {client.base_url}: {error}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as error:  # a --body or --runs file that cannot be read
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


# --- The command line ---------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="planner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="the server (default: $PLANNER_URL, else http://127.0.0.1:8000)")
    parser.add_argument("--api-key", help="the API key (default: $PLANNER_API_KEY)")
    parser.add_argument("--json", action="store_true", help="print the API's JSON rather than tables")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add in (_add_planning, _add_plans, _add_budgets, _add_reports, _add_laws, _add_hardware):
        add(commands)
    return parser


def _add_planning(commands) -> None:
    allocate = commands.add_parser("allocate", help="model size and tokens for a compute budget")
    _request_options(allocate, BUDGET_FIELDS, RULE_FIELDS, CLUSTER_FIELDS)
    allocate.set_defaults(run=_allocate)

    estimate = commands.add_parser("estimate", help="time, cost and memory of training a given model")
    _request_options(estimate, {"params": float, "tokens": float}, CLUSTER_FIELDS)
    estimate.set_defaults(run=_estimate)


def _add_plans(commands) -> None:
    plan = _group(commands, "plan", "plans: create, list, show, commit, cancel, compare")
    create = plan.add_parser("create", help="evaluate a request and store it as a draft plan")
    _request_options(create, PLAN_FIELDS, BUDGET_FIELDS, RULE_FIELDS, CLUSTER_FIELDS)
    create.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    create.add_argument("--idempotency-key", help="default: a fresh one (retries reuse it)")
    create.set_defaults(run=_plan_create)
    listing = plan.add_parser("list", help="plans, newest first")
    for name in ("organization", "budget-id", "hardware", "status", "label", "created-from", "created-to"):
        listing.add_argument(f"--{name}")
    listing.add_argument(
        "--limit", type=int, default=LIST_LIMIT, help=f"at most this many (default {LIST_LIMIT})"
    )
    listing.set_defaults(run=_plan_list)
    for action, helps in (
        ("show", "one plan"),
        ("commit", "reserve a draft's cost on its budget"),
        ("cancel", "cancel a plan"),
    ):
        command = plan.add_parser(action, help=helps)
        command.add_argument("plan_id")
        command.set_defaults(run=_plan_action, action=action)
    compare = plan.add_parser("compare", help="plans side by side")
    compare.add_argument("plan_ids", nargs="+")
    compare.set_defaults(run=_plan_compare)


def _add_budgets(commands) -> None:
    budget = _group(commands, "budget", "budgets: list, show, utilization")
    budgets = budget.add_parser("list", help="budgets, newest first")
    budgets.add_argument("--organization")
    budgets.add_argument("--limit", type=int, default=LIST_LIMIT)
    budgets.set_defaults(run=_budget_list)
    for action in ("show", "utilization"):
        command = budget.add_parser(action, help=f"a budget's {action}" if action != "show" else "one budget")
        command.add_argument("budget_id")
        command.set_defaults(run=_budget_action, action=action)


def _add_reports(commands) -> None:
    report = _group(commands, "report", "reports: costs")
    costs = report.add_parser("costs", help="what plans cost, by period and group")
    costs.add_argument("--from", dest="start", required=True, help="ISO 8601, inclusive")
    costs.add_argument("--to", dest="end", required=True, help="ISO 8601, exclusive")
    costs.add_argument("--granularity", choices=("day", "week", "month", "none"))
    costs.add_argument("--group-by", help="up to 3 of organization, budget, hardware, status, label:<key>")
    for name in ("organization", "budget-id", "hardware", "status"):
        costs.add_argument(f"--{name}")
    costs.add_argument("--format", choices=("table", "csv", "json"), default="table")
    costs.set_defaults(run=_report_costs)


def _add_laws(commands) -> None:
    law = _group(commands, "law", "scaling laws: list, show, fit")
    laws = law.add_parser("list", help="published laws, then your fitted ones")
    laws.add_argument("--kind", choices=("published", "fitted"))
    laws.add_argument("--limit", type=int, default=LIST_LIMIT)
    laws.set_defaults(run=_law_list)
    show_law = law.add_parser("show", help="one law")
    show_law.add_argument("slug")
    show_law.set_defaults(run=_law_show)
    fit = law.add_parser("fit", help="fit a law to your training runs (a CSV or JSON file)")
    fit.add_argument("--organization", required=True)
    fit.add_argument("--name", required=True)
    fit.add_argument("--slug")
    fit.add_argument("--runs", required=True, type=Path, help="CSV (params, loss, tokens or flops) or JSON")
    fit.add_argument("--bootstrap-samples", type=int)
    fit.add_argument("--seed", type=int)
    fit.add_argument("--no-wait", action="store_true", help="return the job of a background fit at once")
    fit.set_defaults(run=_law_fit)


def _add_hardware(commands) -> None:
    hardware = _group(commands, "hardware", "hardware profiles: list, show")
    profiles = hardware.add_parser("list", help="hardware profiles")
    profiles.add_argument("--vendor")
    profiles.add_argument("--limit", type=int, default=LIST_LIMIT)
    profiles.set_defaults(run=_hardware_list)
    profile = hardware.add_parser("show", help="one profile with its current price")
    profile.add_argument("slug")
    profile.set_defaults(run=_hardware_show)


def _group(commands, name: str, helps: str):
    group = commands.add_parser(name, help=helps)
    group.set_defaults(run=lambda _client, _args: group.print_help())
    return group.add_subparsers(title="commands", metavar="COMMAND")


def _request_options(parser: argparse.ArgumentParser, *field_sets: dict[str, type]) -> None:
    for fields in field_sets:
        for field, kind in fields.items():
            parser.add_argument(f"--{field.replace('_', '-')}", dest=field, type=kind)
    parser.add_argument("--body", type=Path, help="a JSON file (- for stdin) with more request fields")
    parser.set_defaults(fields=[field for fields in field_sets for field in fields])


def _request(args: argparse.Namespace) -> dict[str, Any]:
    body = (
        json.loads(sys.stdin.read() if str(args.body) == "-" else args.body.read_text()) if args.body else {}
    )
    body.update({field: getattr(args, field) for field in args.fields if getattr(args, field) is not None})
    labels = getattr(args, "label", [])
    if labels:
        pairs = [label.partition("=") for label in labels]
        if any(not sep for _, sep, _ in pairs):
            raise ValueError("--label takes KEY=VALUE")
        body["labels"] = {**body.get("labels", {}), **{key: value for key, _, value in pairs}}
    return body


# --- Commands -----------------------------------------------------------------------------------------------


def _allocate(client: PlannerClient, args: argparse.Namespace) -> None:
    _show(args, client.allocate(**_request(args)), _allocation_rows)


def _estimate(client: PlannerClient, args: argparse.Namespace) -> None:
    _show(args, client.estimate(**_request(args)), lambda body: [*_estimate_rows(body), *_warning_rows(body)])


def _plan_create(client: PlannerClient, args: argparse.Namespace) -> None:
    plan = client.create_plan(idempotency_key=args.idempotency_key, **_request(args))
    _show(args, plan, _plan_rows)


def _plan_list(client: PlannerClient, args: argparse.Namespace) -> None:
    filters = {
        name: getattr(args, name)
        for name in ("organization", "budget_id", "hardware", "status", "label", "created_from", "created_to")
    }
    plans = list(islice(client.plans(**filters, limit=min(args.limit, 100)), args.limit))
    columns = (
        "id",
        "name",
        "status",
        "organization",
        "params",
        "tokens",
        "days",
        "cost",
        "currency",
        "created_at",
    )
    _show_list(args, plans, columns)


def _plan_action(client: PlannerClient, args: argparse.Namespace) -> None:
    act: Callable[[str], dict] = {
        "show": client.get_plan,
        "commit": client.commit_plan,
        "cancel": client.cancel_plan,
    }[args.action]
    _show(args, act(args.plan_id), _plan_rows)


def _plan_compare(client: PlannerClient, args: argparse.Namespace) -> None:
    comparison = client.compare_plans(args.plan_ids)
    if args.json:
        _print_json(comparison)
        return
    ids = [plan["id"][:8] for plan in comparison["plans"]]
    rows = [
        [difference["field"], *(_human(difference["field"], value) for value in difference["values"])]
        for difference in comparison["differences"]
    ]
    _print_table(["field", *ids], rows)


def _budget_list(client: PlannerClient, args: argparse.Namespace) -> None:
    budgets = list(
        islice(client.budgets(organization=args.organization, limit=min(args.limit, 100)), args.limit)
    )
    _show_list(args, budgets, ("id", "name", "organization", "amount", "committed", "remaining", "currency"))


def _budget_action(client: PlannerClient, args: argparse.Namespace) -> None:
    if args.action == "show":
        _show(args, client.get_budget(args.budget_id), _flat_rows)
        return
    use = client.budget_utilization(args.budget_id)
    if args.json:
        _print_json(use)
        return
    _print_table(["", ""], _flat_rows({k: v for k, v in use.items() if k != "months"}))
    print()
    _print_table(
        ["month", "plans", "committed", "cumulative"],
        [
            [month["month"], month["plans"], month["committed"], month["cumulative"]]
            for month in use["months"]
        ],
    )


def _report_costs(client: PlannerClient, args: argparse.Namespace) -> None:
    params = {
        "granularity": args.granularity,
        "group_by": args.group_by,
        "organization": args.organization,
        "budget_id": args.budget_id,
        "hardware": args.hardware,
        "status": args.status,
    }
    if args.format == "csv":
        sys.stdout.write(client.cost_report_csv(args.start, args.end, **params))
        return
    report = client.cost_report(args.start, args.end, **params)
    if args.json or args.format == "json":
        _print_json(report)
        return
    rows = report["rows"]
    columns = [name for name in (rows[0] if rows else {}) if name != "estimated"]
    _print_table(columns, [[_human(name, row.get(name)) for name in columns] for row in rows])
    for total in report["totals"]:
        print(f"total {total['currency']}: {total['plans']} plans, {total['cost']} (estimated)")


def _law_list(client: PlannerClient, args: argparse.Namespace) -> None:
    laws = list(islice(client.scaling_laws(kind=args.kind, limit=min(args.limit, 100)), args.limit))
    _show_list(args, laws, ("slug", "kind", "name", "E", "A", "B", "alpha", "beta"))


def _law_show(client: PlannerClient, args: argparse.Namespace) -> None:
    _show(args, client.get_scaling_law(args.slug), _flat_rows)


def _law_fit(client: PlannerClient, args: argparse.Namespace) -> None:
    request: dict[str, Any] = {"organization": args.organization, "name": args.name}
    if args.slug:
        request["slug"] = args.slug
    if args.bootstrap_samples or args.seed is not None:
        request["bootstrap"] = {
            name: value for name, value in (("samples", args.bootstrap_samples), ("seed", args.seed)) if value
        }
    request["runs"] = _runs(args.runs)
    _show(args, client.fit_scaling_law(wait=not args.no_wait, **request), _flat_rows)


def _runs(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix.lower() == ".json":
        return json.loads(text)
    rows = csv.DictReader(io.StringIO(text))
    return [{name.strip(): _number(value) for name, value in row.items()} for row in rows]


def _number(cell: str) -> float | str:
    """A CSV cell as the JSON number the API takes (it refuses "5e7" in quotes); other text as it is, for the
    server to name."""
    try:
        return float(cell)
    except (TypeError, ValueError):
        return cell


def _hardware_list(client: PlannerClient, args: argparse.Namespace) -> None:
    profiles = list(islice(client.hardware(vendor=args.vendor, limit=min(args.limit, 100)), args.limit))
    _show_list(args, profiles, ("slug", "name", "vendor", "memory_bytes", "price_per_hour", "currency"))


def _hardware_show(client: PlannerClient, args: argparse.Namespace) -> None:
    _show(args, client.get_hardware(args.slug), _flat_rows)


# --- Output -------------------------------------------------------------------------------------------------

Rows = list[list[Any]]


def _show(args: argparse.Namespace, body: dict, rows: Callable[[dict], Rows]) -> None:
    if args.json:
        _print_json(body)
    else:
        _print_table(["", ""], rows(body))


def _show_list(args: argparse.Namespace, items: list[dict], columns: Sequence[str]) -> None:
    if args.json:
        _print_json(items)
    else:
        _print_table(list(columns), [[_human(name, item.get(name)) for name in columns] for item in items])


def _allocation_rows(body: dict) -> Rows:
    rows = [
        [name, _human(name, body.get(name))]
        for name in ("method", "params", "tokens", "tokens_per_param", "flops", "pf_days", "predicted_loss")
    ]
    if body.get("law"):
        rows.append(["law", body["law"]["slug"]])
    if body.get("estimate"):
        rows += _estimate_rows(body["estimate"])
    return rows + _warning_rows(body)


def _estimate_rows(estimate: dict) -> Rows:
    rows = [
        [name, _human(name, estimate.get(name))] for name in ("days", "accelerator_hours", "accelerators")
    ]
    if estimate.get("cost") is not None:
        rows.append(["cost", f"{estimate['cost']} {estimate['currency']}"])
    memory = estimate.get("memory") or {}
    if memory:
        fits = "fits" if memory.get("fits") else "does NOT fit"
        rows.append(["memory per accelerator", f"{memory['total_bytes'] / 1e9:.1f} GB ({fits})"])
    return rows


def _plan_rows(plan: dict) -> Rows:
    rows = [
        [name, _human(name, plan.get(name))]
        for name in ("id", "status", "organization", "budget_id", "method", "params", "tokens", "flops")
        if plan.get(name) is not None
    ]
    rows += [[name, _human(name, plan.get(name))] for name in ("predicted_loss", "days", "accelerator_hours")]
    if plan.get("cost") is not None:
        rows.append(["cost", f"{plan['cost']} {plan['currency']}"])
    result = plan.get("result") or {}
    return rows + _warning_rows(result)


def _warning_rows(body: dict) -> Rows:
    return [["warning", f"{warning['code']}: {warning['message']}"] for warning in body.get("warnings") or []]


def _flat_rows(body: dict, prefix: str = "") -> Rows:
    rows: Rows = []
    for name, value in body.items():
        if isinstance(value, dict):
            rows += _flat_rows(value, f"{prefix}{name}.")
        elif not isinstance(value, list) or all(not isinstance(item, dict) for item in value):
            rows.append([prefix + name, _human(name, value)])
    return rows


_COUNTS = {"params", "tokens", "unique_tokens", "inference_tokens"}
_SCALES = ((1e12, "T"), (1e9, "B"), (1e6, "M"))


def _human(name: str, value: Any) -> str:
    """Numbers as people read them: 6.57e10 params as 65.7B, FLOPs in scientific notation."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float) and name in _COUNTS:
        scale, suffix = next(
            ((s, x) for s, x in ((1e12, "T"), (1e9, "B"), (1e6, "M")) if value >= s), (1, "")
        )
        text = f"{value / scale:.3g}{suffix}"
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, list):
        text = ", ".join(str(item) for item in value)
    else:
        text = str(value)
    return text


def _print_table(header: list[str], rows: Iterable[list[Any]]) -> None:
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(name), *(len(row[i]) for row in rows)]) for i, name in enumerate(header)]
    if any(header):
        print("  ".join(name.ljust(width) for name, width in zip(header, widths, strict=True)).rstrip())
        print("  ".join("-" * width for width in widths))
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _print_json(body: Any) -> None:
    print(json.dumps(body, indent=2))


if __name__ == "__main__":
    sys.exit(main())

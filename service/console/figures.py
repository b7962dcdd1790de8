"""The console's charts of the planner's answers: an allocation's IsoFLOP profile, its step time by part
and its run against the accelerator count, the laws' frontiers, a budget's utilisation and burn. They turn
domain objects into `charts` calls; `charts` draws the SVG."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from markupsafe import Markup

from service.console import charts
from service.console.formatting import money
from service.core import allocate, engine, performance
from service.core.validation import InvalidInput
from service.services import planning, spend
from service.services.errors import InvalidFieldError

DEFAULT_REFERENCE_LAW = "chinchilla-2022"  # the IsoFLOP chart's law when the plan uses a fixed ratio


def isoflop_chart(outcome: engine.Plan) -> tuple[Markup | None, str | None]:
    """The IsoFLOP profile at the plan's budget (loss against model size, the law's optimum and the plan
    marked), and a note on which law draws it; (None, why) when the law cannot draw it at this budget."""
    law = outcome.law or engine.published(DEFAULT_REFERENCE_LAW)
    flops = outcome.allocation.flops
    try:
        profile = planning.isoflop(law, flops, 41, 10.0)
    except InvalidFieldError as error:
        return None, f"No IsoFLOP profile at this budget: {error.detail}"
    optimal, allocation = profile["optimal"], outcome.allocation
    series = [
        charts.Series(
            law.slug or "law", [(point.params, point.predicted_loss) for point in profile["points"]]
        )
    ]
    markers = [charts.Marker(optimal.params, optimal.predicted_loss, "Compute-optimal")]
    if outcome.method == "data-constrained":
        # With repeated data the loss is another curve (Muennighoff et al. 2023); the plan is its minimum.
        unique = allocation.unique_tokens
        assert unique is not None, "a data-constrained allocation has its unique tokens"
        repeated = [(n, _repeated_loss(law, n, flops, unique)) for n, _ in series[0].points]
        series.append(charts.Series(f"{charts.format_number(unique)} unique tokens, repeated", repeated))
        markers[0] = charts.Marker(optimal.params, optimal.predicted_loss, "Compute-optimal, unlimited data")
    plan_loss = allocation.predicted_loss or law.law.loss(allocation.params, allocation.tokens)
    if abs(allocation.params / optimal.params - 1) > 0.01:
        markers.append(charts.Marker(allocation.params, plan_loss, "This plan"))
    note = None if outcome.law else f"Losses from {DEFAULT_REFERENCE_LAW}: the plan uses a fixed ratio."
    chart = charts.line_chart(
        chart_id="isoflop",
        title=f"IsoFLOP profile at {charts.format_number(flops)} FLOPs",
        description=f"Predicted loss against model size when {charts.format_number(flops)} FLOPs are spent "
        f"(D = C / 6N), under {law.slug or 'the given law'}; the minimum is the compute-optimal size.",
        series=series,
        x_label="Model size N (parameters)",
        y_label="Predicted loss (nats/token)",
        x_log=True,
        markers=markers,
    )
    return chart, note


def _repeated_loss(law: engine.NamedLaw, params: float, flops: float, unique: float) -> float:
    """The loss of `params` trained on C/(6N) tokens drawn from `unique` ones; NaN (not drawn) where the law
    refuses the size."""
    try:
        return allocate.data_constrained_loss(law.law, params, flops / (6 * params), unique)
    except InvalidInput:
        return math.nan


# What each part of a step is called on the page, in the order of the model's breakdown: each keeps its
# colour (its place here) on every plan.
STEP_PARTS = {
    "compute": "Compute",
    "memory_bound": "Memory-bound work",
    "tensor_parallel": "Tensor-parallel comms",
    "context_parallel": "Context-parallel comms",
    "pipeline_bubble": "Pipeline bubble",
    "pipeline_transfers": "Pipeline transfers",
    "expert_parallel": "Expert all-to-all",
    "data_parallel": "Data-parallel comms",
    "optimizer": "Optimizer",
}
assert tuple(STEP_PARTS) == performance.BREAKDOWN, "a part of the step without a name on the page"


def seconds(value: float) -> str:
    return f"{charts.format_number(value)} s"


def breakdown_chart(run: Mapping[str, Any]) -> Markup:
    """A stacked bar of the step's seconds by part (a performance document's breakdown): what a step of the
    chosen layout spends its time on. Parts that take no time are named in the description only."""
    step = run["step_seconds"]
    breakdown = run["breakdown"]
    parts = [
        charts.Part(breakdown[name], f"{label} {seconds(breakdown[name])} ({breakdown[name] / step:.0%})", i)
        for i, (name, label) in enumerate(STEP_PARTS.items())
    ]
    idle = [label for name, label in STEP_PARTS.items() if not breakdown[name] > 0]
    described = "; ".join(part.label for part in parts if part.value > 0)
    return charts.stacked_bar(
        chart_id="step-breakdown",
        title=f"A step of {seconds(step)}, by part",
        description=f"Seconds of one training step of the chosen layout: {described}."
        + (f" No time in: {', '.join(idle).lower()}." if idle else ""),
        parts=parts,
        x_label="Seconds per step",
    )


def cluster_size_charts(
    sizes: Sequence[planning.ClusterSize],
    chosen: int,
    *,
    currency: str | None,
    deadline_days: float | None = None,
    cost_limit: Decimal | None = None,
) -> tuple[dict[str, Markup], str | None]:
    """Wall-clock days, and cost where the hardware has a price, against the accelerator count for the
    planned model (`planning.cluster_sizes`), the plan's count marked, with the deadline and the money
    limit as lines; and a caption saying which count is fastest and which cheapest. ({}, None) without
    sizes (a plan at a given MFU)."""
    if not sizes:
        return {}, None
    mark = f"This plan: {chosen:,}"
    at = next((size for size in sizes if size.accelerators == chosen), None)
    fastest = min(sizes, key=lambda size: size.days)
    ideal = (
        []
        if at is None
        else [
            charts.Series(
                "Perfect scaling from this plan",
                [(s.accelerators, at.days * chosen / s.accelerators) for s in sizes],
            )
        ]
    )
    drawn = {
        "days": charts.line_chart(
            chart_id="cluster-days",
            title="Wall-clock days against accelerators",
            description="Days to train this model (goodput included) on each number of accelerators the "
            "planner tries, beside the days if the plan's run scaled perfectly; counts where no layout fits "
            "are left out.",
            series=[charts.Series("Wall-clock days", [(s.accelerators, s.days) for s in sizes]), *ideal],
            x_label="Accelerators",
            y_label="Wall-clock days",
            x_log=True,
            y_log=True,
            markers=[] if at is None else [charts.Marker(chosen, at.days, mark)],
            reference_lines=[] if deadline_days is None else [(deadline_days, "Deadline")],
        )
    }
    caption = f"Fastest on {fastest.accelerators:,} accelerators ({fastest.days:,.1f} days)"
    priced = [size for size in sizes if size.cost is not None]
    if currency is not None and len(priced) == len(sizes):
        cheapest = min(priced, key=lambda size: (size.cost, size.days))
        assert cheapest.cost is not None
        dearest = max(float(size.cost or 0) for size in priced)
        drawn["cost"] = charts.line_chart(
            chart_id="cluster-cost",
            title="Cost against accelerators",
            description=f"Cost in {currency} of training this model on each number of accelerators the "
            "planner tries: it rises where more accelerators stop paying for themselves.",
            series=[
                charts.Series(f"Cost ({currency})", [(s.accelerators, float(s.cost or 0)) for s in sizes])
            ],
            x_label="Accelerators",
            y_label=f"Cost ({currency})",
            x_log=True,
            y_log=dearest > 10 * float(cheapest.cost),  # else a linear scale shows the rise better
            markers=[] if at is None or at.cost is None else [charts.Marker(chosen, float(at.cost), mark)],
            reference_lines=[] if cost_limit is None else [(float(cost_limit), "Money limit")],
        )
        caption += f"; cheapest on {cheapest.accelerators:,} ({money(cheapest.cost, currency)})"
    return drawn, caption + "."


def frontier_charts(
    named: list[engine.NamedLaw], min_flops: float, max_flops: float, points: int
) -> tuple[dict[str, Markup], list[dict[str, Any]]]:
    """Compute-optimal N and D against compute, a chart each, for every law; a fitted law with bootstrap
    fits draws the spread of N and D over them as a band. Also each law with its curve, for the table."""
    lines: dict[str, list[charts.Series]] = {"params": [], "tokens": []}
    rows = []
    for law in named:
        curve = planning.frontier(law, min_flops, max_flops, points)["points"]
        spreads = (
            [(point, engine.frontier_intervals(law, point.flops)) for point in curve] if law.samples else []
        )
        name = law.slug or "law"  # published and fitted laws, all named
        label = f"{name} (band: 95% bootstrap interval)" if law.samples else name
        for figure in ("params", "tokens"):
            band = [
                (point.flops, *getattr(spread, figure)) for point, spread in spreads if spread is not None
            ]
            line = [(point.flops, getattr(point, figure)) for point in curve]
            lines[figure].append(charts.Series(label, line, band=band))
        rows.append({"law": law, "curve": curve})
    drawn = {
        figure: charts.line_chart(
            chart_id=f"frontier-{figure}",
            title=f"Compute-optimal {'model size N' if figure == 'params' else 'training tokens D'}",
            description=f"{'Parameters' if figure == 'params' else 'Tokens'} against training compute for "
            "each law, published and fitted by your organisation.",
            series=series,
            x_label="Training compute (FLOPs)",
            y_label="Parameters" if figure == "params" else "Tokens",
            x_log=True,
            y_log=True,
        )
        for figure, series in lines.items()
    }
    return drawn, rows


def utilization_bar(budget: Mapping[str, Any], chart_id: str, width: int = 640) -> Markup:
    currency = budget["currency"]
    committed, amount = money(budget["committed"], currency), money(budget["amount"], currency)
    return charts.bar(
        chart_id=chart_id,
        title=f"{budget['name']}: {committed} committed of {amount}",
        parts=[(float(budget["committed"]), f"Committed {committed}")],
        total=float(budget["amount"]),
        total_label=f"Amount {amount}",
        width=width,
    )


def burn_chart(utilization: Mapping[str, Any], forecast: Mapping[str, Any] | None = None) -> Markup:
    """Cumulative committed money by month against the amount; with a `forecast` (BudgetForecastSchema's),
    its estimate at completion across the period, drawn with the band its plans' intervals give it."""
    months = utilization["months"]
    step = -(-len(months) // 6)  # at most 6 month labels: more collide on a laptop screen
    series = [
        charts.Series(
            "Committed (cumulative)",
            [(index, float(month["cumulative"])) for index, month in enumerate(months)],
        )
    ]
    if forecast is not None and months:
        low, high = (float(bound) for bound in forecast["intervals"]["estimate_at_completion"])
        confidence = round(100 * forecast["intervals"]["confidence"])
        ends = (0, max(len(months) - 1, 1))
        series.append(
            charts.Series(
                f"Estimate at completion ({confidence}% band)",
                [(x, float(forecast["estimate_at_completion"])) for x in ends],
                band=[(x, low, high) for x in ends],
            )
        )
    return charts.line_chart(
        chart_id="burn",
        title="Committed over the budget's period",
        description="Cumulative committed money by month of plan start, against the budget's amount"
        + ("; the estimate at completion with its band." if forecast is not None else "."),
        series=series,
        x_label="Month (plan start)",
        y_label=f"Money ({utilization['currency']})",
        reference_lines=[(float(utilization["amount"]), "Amount")],
        x_ticks=[(index, month["month"]) for index, month in enumerate(months)][::step],
    )


MAX_STACKED_GROUPS = len(charts.PALETTE)  # one colour each; the smallest beyond are drawn together as "other"


def planned_actual_charts(report: spend.SpendReport) -> list[Markup]:
    """Per currency (amounts in two are never drawn on one scale), planned beside actual for every period of
    a report of actual spend, stacked by its first group (by name where it has one); [] for a report with
    no periods."""
    if report.query.granularity == "none":
        return []
    group = report.query.group_by[0] if report.query.group_by else None
    shown_by = spend.NAMED_GROUPS.get(group or "", group)
    periods = sorted({row["period_start"] for row in report.rows})
    drawn = []
    for currency in sorted({row["currency"] for row in report.rows if row["currency"] is not None}):
        rows = [row for row in report.rows if row["currency"] == currency]
        amounts: dict[str, dict[str, list[float]]] = {}
        for row in rows:
            label = "all" if shown_by is None else str(row.get(shown_by) or row.get(group or "") or "none")
            stack = amounts.setdefault(
                label, {"planned": [0.0] * len(periods), "actual": [0.0] * len(periods)}
            )
            at = periods.index(row["period_start"])
            stack["planned"][at] += float(row["planned_cost"] or 0)
            stack["actual"][at] += float(row["actual_cost"] or 0)
        ranked = sorted(amounts.items(), key=lambda item: -sum(item[1]["planned"]) - sum(item[1]["actual"]))
        if len(ranked) > MAX_STACKED_GROUPS:
            rest = ranked[MAX_STACKED_GROUPS - 1 :]
            other = {
                kind: [sum(stack[kind][i] for _, stack in rest) for i in range(len(periods))]
                for kind in ("planned", "actual")
            }
            ranked = [*ranked[: MAX_STACKED_GROUPS - 1], ("other", other)]
        stacks = [
            charts.Stack(label, stack["planned"], stack["actual"], colour)
            for colour, (label, stack) in enumerate(ranked)
        ]
        totals = next(total for total in report.totals if total["currency"] == currency)
        per = report.query.granularity
        labels = [period[:7] if per == "month" else period for period in periods]
        drawn.append(
            charts.planned_actual_bars(
                chart_id=f"planned-actual-{currency.lower()}",
                title=f"Planned against actual by {per}, {currency}",
                description=(
                    f"For each {per} from {labels[0]} to {labels[-1]}, a pale bar of what plans starting in "
                    f"it planned beside a solid bar of what runs spent in it"
                    + ("" if group is None else f", each stacked by {group}")
                    + f". In all {money(totals['planned_cost'], currency)} planned and "
                    f"{money(totals['actual_cost'], currency)} spent; the table gives every figure."
                ),
                periods=labels,
                stacks=stacks,
                y_label=f"Money ({currency})",
            )
        )
    return drawn


def comparison_chart(comparison: Mapping[str, Any]) -> Markup | None:
    """Cost against days of each offer that takes the run, marked by its rank (the table below names it),
    with the frontier drawn through the offers no other beats on both; None when no offer takes it."""
    rows = [row for row in comparison["offers"] if row["cost"] is not None]
    if not rows:
        return None
    currency = comparison["currency"]
    frontier = sorted((row for row in rows if row["on_frontier"]), key=lambda row: row["days"])
    costs = [float(row["cost"]) for row in rows]
    return charts.line_chart(
        chart_id="comparison-frontier",
        title="Cost against days, by offer",
        description=f"Each offer's run at its days and its cost in {currency} (as paid: a reservation's "
        "whole term), marked by its rank in the table; the line joins the offers no other is both as fast "
        "and as cheap as.",
        series=[
            charts.Series(
                "Frontier: fastest for the money", [(row["days"], float(row["cost"])) for row in frontier]
            )
        ],
        x_label="Wall-clock days",
        y_label=f"Cost ({currency})",
        y_log=max(costs) > 10 * min(costs),
        markers=[charts.Marker(row["days"], float(row["cost"]), str(row["rank"])) for row in rows],
    )

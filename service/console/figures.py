"""The console's charts of the planner's answers: an allocation's IsoFLOP profile, the laws' frontiers,
a budget's utilisation and burn. They turn domain objects into `charts` calls; `charts` draws the SVG."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from service.console import charts
from service.console.formatting import money
from service.core import allocate, engine
from service.core.validation import InvalidInput
from service.services import planning
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


def burn_chart(utilization: Mapping[str, Any]) -> Markup:
    months = utilization["months"]
    step = -(-len(months) // 6)  # at most 6 month labels: more collide on a laptop screen
    return charts.line_chart(
        chart_id="burn",
        title="Committed over the budget's period",
        description="Cumulative committed money by month of plan start, against the budget's amount.",
        series=[
            charts.Series(
                "Committed (cumulative)",
                [(index, float(month["cumulative"])) for index, month in enumerate(months)],
            )
        ],
        x_label="Month (plan start)",
        y_label=f"Money ({utilization['currency']})",
        reference_lines=[(float(utilization["amount"]), "Amount")],
        x_ticks=[(index, month["month"]) for index, month in enumerate(months)][::step],
    )

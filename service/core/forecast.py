"""Where a run is heading, from what it has spent and trained so far (earned value management).

A run planned to train D tokens for a cost BAC (budget at completion) that has trained d tokens for an actual
cost AC has earned EV = BAC·d/D; at the cost per token so far it completes at EAC = AC·D/d (the estimate at
completion, PMI's "EAC = BAC / CPI" with CPI = EV / AC). Before any token is reported, the plan is the
forecast, or what is already spent if that is more. Tokens past the plan are a run that finished its
plan: its forecast is its spend.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from service.core.units import CENT

FINISHED_STATUSES = ("completed", "failed")  # a plan's, as its status column spells them
# Below this share of its tokens trained, a run's spend says too little of its pace to extrapolate (a
# reporter's first token of 6e10 would forecast a hundred-dollar plan at billions): the plan is the forecast.
MIN_SHARE_TO_EXTRAPOLATE = 0.01
FORECAST_BASES = ("plan", "trend", "spent")


@dataclass(frozen=True)
class Progress:
    planned_cost: Decimal
    actual_cost: Decimal
    planned_tokens: float
    tokens_trained: float
    finished: bool = False

    @classmethod
    def of(
        cls, status: str, planned_cost: Decimal | None, actual_cost: Decimal, tokens: float, trained: float
    ) -> Progress:
        """A plan's progress from its status and figures (a plan without a cost plans 0)."""
        finished = status in FINISHED_STATUSES
        return cls(planned_cost or Decimal(0), actual_cost, tokens, trained, finished)

    @property
    def share_trained(self) -> float:
        """Tokens trained over tokens planned, at most 1."""
        if self.planned_tokens <= 0:
            return 1.0
        return min(self.tokens_trained / self.planned_tokens, 1.0)

    @property
    def basis(self) -> str:
        """What the estimate at completion stands on: `spent` (the run finished, or trained all its tokens),
        `trend` (its spend so far over the share trained), or `plan` (too little trained to extrapolate:
        less than MIN_SHARE_TO_EXTRAPOLATE)."""
        if self.finished or self.share_trained >= 1.0:
            return "spent"
        return "trend" if self.share_trained >= MIN_SHARE_TO_EXTRAPOLATE else "plan"

    @property
    def estimate_at_completion(self) -> Decimal:
        """The cost the run will have when it completes: exact where it is a cost (spent, or planned), to the
        cent where it is a projection."""
        if self.basis == "spent":
            return self.actual_cost
        if self.basis == "plan":
            return max(self.planned_cost, self.actual_cost)
        projected = (self.actual_cost / Decimal(repr(self.share_trained))).quantize(CENT, ROUND_HALF_UP)
        return max(self.actual_cost, projected)

    def completion_interval(
        self, point: Decimal | None, interval: tuple[Decimal, Decimal] | None
    ) -> tuple[Decimal, Decimal]:
        """Where the estimate at completion falls, given the plan's cost `interval` around its `point` cost
        (the cluster model's, core/accuracy.py). Before a token is reported, the plan's own interval (at
        least what is spent); while it runs, what it has spent plus what remains of the estimate, stretched
        as the interval stretches the point; once finished (or without an interval), the estimate itself."""
        at_completion = self.estimate_at_completion
        if interval is None or point is None or point <= 0 or self.basis == "spent":
            return at_completion, at_completion
        low, high = interval
        if self.basis == "plan":
            return max(low, self.actual_cost), max(high, self.actual_cost)
        remaining = at_completion - self.actual_cost

        def stretched(bound: Decimal) -> Decimal:
            return (self.actual_cost + remaining * bound / point).quantize(CENT, ROUND_HALF_UP)

        return stretched(low), stretched(high)

    @property
    def variance_at_completion(self) -> Decimal:
        """Forecast less planned: positive for a run heading over its plan, as every variance the service
        gives (PMI's VAC with the sign turned)."""
        return self.estimate_at_completion - self.planned_cost


def expected_end(started_at: datetime, reported_until: datetime, share_trained: float) -> datetime | None:
    """When the run ends at the pace it has kept since it started; None before enough progress to say."""
    if share_trained < MIN_SHARE_TO_EXTRAPOLATE or reported_until <= started_at:
        return None
    elapsed = (reported_until - started_at).total_seconds()
    try:
        return started_at + timedelta(seconds=elapsed / share_trained)
    except OverflowError:
        return None

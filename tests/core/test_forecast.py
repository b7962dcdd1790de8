"""Estimates at completion (earned value management) from a run's spend and tokens so far."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from service.core.forecast import Progress, expected_end


def progress(actual: str, trained: float, *, planned: str = "1000.00", finished: bool = False) -> Progress:
    return Progress(Decimal(planned), Decimal(actual), 1e12, trained, finished)


@pytest.mark.parametrize(
    ("actual", "trained", "estimate"),
    [
        ("0", 0.0, "1000.00"),  # nothing yet: the plan
        ("1200.00", 0.0, "1200.00"),  # spent past the plan before any token: what is spent
        ("250.00", 2.5e11, "1000.00"),  # a quarter for a quarter: on plan
        ("300.00", 2.5e11, "1200.00"),  # a quarter for 300: 1200 at that pace
        ("100.00", 3e11, "333.33"),  # cheaper than planned, to the cent
        ("900.00", 1.1e12, "900.00"),  # trained past the plan: done, at what it spent
    ],
)
def test_a_run_completes_at_its_spend_over_the_share_of_its_tokens_trained(actual, trained, estimate):
    assert progress(actual, trained).estimate_at_completion == Decimal(estimate)


def test_a_finished_run_is_forecast_at_what_it_spent_whatever_it_trained():
    assert progress("400.00", 1e11, finished=True).estimate_at_completion == Decimal("400.00")


def test_the_variance_at_completion_is_positive_for_a_run_heading_over():
    assert progress("300.00", 2.5e11).variance_at_completion == Decimal("200.00")


def test_a_run_ends_at_the_pace_it_kept():
    start = datetime(2027, 1, 1, tzinfo=UTC)
    assert expected_end(start, datetime(2027, 1, 11, tzinfo=UTC), 0.25) == datetime(2027, 2, 10, tzinfo=UTC)
    assert expected_end(start, datetime(2027, 1, 11, tzinfo=UTC), 0.0) is None


def test_the_completion_interval_stretches_what_remains_as_the_plan_s_interval_stretches_its_cost():
    interval = (Decimal("300.00"), Decimal("800.00"))  # around a point cost of 500.00
    waiting = Progress(Decimal("500.00"), Decimal(0), 100.0, 0.0)
    assert waiting.completion_interval(Decimal("500.00"), interval) == interval
    # A run that spent 350.00 before reporting tokens is at least that.
    early = Progress(Decimal("500.00"), Decimal("350.00"), 100.0, 0.0)
    assert early.completion_interval(Decimal("500.00"), interval) == (Decimal("350.00"), Decimal("800.00"))
    # A quarter trained for 150.00 heads to 600.00: 450.00 to go at 0.6 to 1.6 of it.
    running = Progress(Decimal("500.00"), Decimal("150.00"), 100.0, 25.0)
    assert running.estimate_at_completion == Decimal("600.00")
    assert running.completion_interval(Decimal("500.00"), interval) == (Decimal("420.00"), Decimal("870.00"))
    # Finished, or without an interval: the estimate itself.
    done = Progress(Decimal("500.00"), Decimal("550.00"), 100.0, 90.0, finished=True)
    assert done.completion_interval(Decimal("500.00"), interval) == (Decimal("550.00"), Decimal("550.00"))
    assert running.completion_interval(None, None) == (Decimal("600.00"), Decimal("600.00"))

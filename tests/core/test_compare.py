"""core/compare.py: the frontier of days against cost, a reservation's term, an owned accelerator's hour."""

from __future__ import annotations

from decimal import Decimal

from service.core.compare import (
    Point,
    committed_cost,
    frontier,
    most_accelerators_reserved,
    owned_price_per_hour,
)


def test_the_frontier_keeps_what_no_other_run_beats_on_both_fastest_first():
    points = [
        Point("slow-cheap", 30.0, Decimal(100)),
        Point("fast-dear", 10.0, Decimal(300)),
        Point("beaten", 31.0, Decimal(150)),  # slower and dearer than slow-cheap
        Point("middle", 20.0, Decimal(200)),
        Point("tie-slower", 20.0, Decimal(250)),  # as fast as middle, dearer
    ]
    assert frontier(points) == ["fast-dear", "middle", "slow-cheap"]


def test_of_runs_equal_in_both_the_first_is_kept():
    assert frontier([Point("a", 1.0, Decimal(1)), Point("b", 1.0, Decimal(1))]) == ["a"]


def test_a_reservation_costs_its_term_or_the_run_where_the_run_is_longer():
    assert committed_cost(Decimal("4.916"), 8, 24.0, 14) == Decimal("13214.21")  # 4.916 x 8 x 336 h
    assert committed_cost(Decimal("2"), 1, 1000.5, 1) == Decimal("2001.00")


def test_the_most_accelerators_a_term_keeps_within_the_money():
    assert most_accelerators_reserved(Decimal("13214.21"), Decimal("4.916"), 14) == 8
    assert most_accelerators_reserved(Decimal("13214.20"), Decimal("4.916"), 14) == 7


def test_an_owned_hour_is_its_capital_and_its_energy_at_the_meter():
    assert owned_price_per_hour(Decimal("1.16"), 1.2, Decimal("0.08")) == Decimal("1.256")

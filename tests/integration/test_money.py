"""Money is exact on both databases: stored, read back and summed without a float in between."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError, StatementError

from service.data.models import Budget, HardwarePrice, Organization
from tests.builders import hardware_profile


@pytest.fixture
def hardware(session):
    profile = hardware_profile()
    session.add(profile)
    session.commit()
    return profile


def add_prices(session, hardware, amounts):
    for amount in amounts:
        session.add(HardwarePrice(hardware_id=hardware.id, price_per_hour=Decimal(amount), currency="USD"))
    session.commit()


def test_amounts_round_trip_exactly(session, hardware):
    amounts = ["0.000001", "0.1", "0.2", "123456789012.123456", "2.74"]
    add_prices(session, hardware, amounts)
    session.expire_all()
    stored = sorted(session.scalars(select(HardwarePrice.price_per_hour)))
    assert stored == sorted(Decimal(a) for a in amounts)
    assert all(isinstance(value, Decimal) for value in stored)


def test_sums_in_sql_are_exact(session, hardware):
    # 0.1 added ten times is not 1.0 in binary floating point.
    add_prices(session, hardware, ["0.1"] * 10 + ["0.000001"])
    total = session.scalar(select(func.sum(HardwarePrice.price_per_hour)))
    assert total == Decimal("1.000001")


def test_an_amount_with_more_than_six_decimal_places_is_refused(session, hardware):
    session.add(HardwarePrice(hardware_id=hardware.id, price_per_hour=Decimal("0.0000001"), currency="USD"))
    with pytest.raises(StatementError, match="more than 6 decimal places"):
        session.commit()


def test_the_database_refuses_a_budget_committed_beyond_its_amount(session):
    # The safety net under the service's own check: a plan committed concurrently with an amount cut
    # cannot leave the books overspent.
    organization = Organization(slug="acme", name="Acme")
    budget = Budget(
        organization=organization,
        name="b",
        amount=Decimal("100"),
        currency="USD",
        committed=Decimal("60"),
        period_start=datetime(2026, 1, 1, tzinfo=UTC),
        period_end=datetime(2027, 1, 1, tzinfo=UTC),
    )
    session.add(budget)
    session.commit()
    budget.amount = Decimal("59.99")
    with pytest.raises(IntegrityError, match="committed_within_amount"):
        session.commit()

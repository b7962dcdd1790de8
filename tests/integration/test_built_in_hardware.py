"""Built-in hardware profiles kept by each process for a while (services/hardware.py BuiltInHardware): a plan
on one reads no row of it, and what it reads is what the database holds."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlalchemy import event

from service.data.built_in_hardware import BUILT_IN_HARDWARE, BUILT_IN_SECONDS, BuiltInHardware
from service.data.models import HardwarePrice, Organization, Plan, utcnow
from service.services import plans
from service.services.catalog import load_builtin_hardware
from service.services.hardware import get_hardware
from service.services.plans import PlanRequest
from tests.builders import hardware_profile


@pytest.fixture
def clock():
    return [0.0]


@pytest.fixture
def kept(session_factory, session, clock):
    load_builtin_hardware(session)
    session.commit()
    return BuiltInHardware(read_apart=session_factory, clock=lambda: clock[0])


@pytest.fixture
def statements(connection):
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_):
        seen.append(statement)

    event.listen(connection, "before_cursor_execute", record)
    yield seen
    event.remove(connection, "before_cursor_execute", record)


def read(session_factory, kept, slug: str):
    with session_factory(info={BUILT_IN_HARDWARE: kept}) as session:
        profile = get_hardware(session, slug)
        return profile, profile.current_price, profile in session


def test_a_built_in_profile_read_once_is_read_again_without_sql_and_the_same(
    session_factory, kept, statements
):
    first, first_price, _ = read(session_factory, kept, "h100-sxm")
    read_first = len(statements)
    again, again_price, attached = read(session_factory, kept, "h100-sxm")
    assert len(statements) == read_first  # no statement the second time
    assert attached  # a copy in the reading session, as a row read there would be
    assert (again.id, again.slug, again.peak_flops, again.memory_bytes, again.version) == (
        first.id,
        first.slug,
        first.peak_flops,
        first.memory_bytes,
        first.version,
    )
    assert (again_price.price_per_hour, again_price.currency) == (first_price.price_per_hour, "USD")


def test_a_kept_profile_put_back_in_a_session_is_not_written(session_factory, kept, statements):
    read(session_factory, kept, "h100-sxm")
    with session_factory(info={BUILT_IN_HARDWARE: kept}) as session:
        get_hardware(session, "h100-sxm")
        statements.clear()
        session.flush()
        session.commit()
    assert not [s for s in statements if "hardware" in s]


def test_a_price_the_catalog_adds_is_in_use_within_built_in_seconds(session_factory, session, kept, clock):
    read(session_factory, kept, "h100-sxm")
    profile = get_hardware(session, "h100-sxm")
    profile.prices.append(
        HardwarePrice(price_per_hour=Decimal("5.00"), currency="USD", effective_at=utcnow())
    )
    session.commit()
    clock[0] += BUILT_IN_SECONDS - 1
    assert read(session_factory, kept, "h100-sxm")[1].price_per_hour == Decimal("6.88")
    clock[0] += 2
    assert read(session_factory, kept, "h100-sxm")[1].price_per_hour == Decimal("5.00")


def test_custom_profiles_are_read_every_time(session_factory, session, kept, statements):
    session.add(hardware_profile(slug="lab-gpu"))
    session.commit()
    read(session_factory, kept, "lab-gpu")
    before = len(statements)
    read(session_factory, kept, "lab-gpu")
    assert len(statements) > before


def test_forgetting_reads_again(session_factory, kept, statements):
    read(session_factory, kept, "h100-sxm")
    kept.forget()
    before = len(statements)
    read(session_factory, kept, "h100-sxm")
    assert len(statements) > before


def test_a_plan_reads_the_kept_profile_itself_and_stores_it_untouched(
    session_factory, session, kept, statements
):
    session.add(Organization(slug="acme", name="Acme", version=1))
    session.commit()
    request = PlanRequest(
        organization="acme", hardware="h100-sxm", accelerators=8, params=1e9, tokens=2e10, mfu=0.4
    )
    read(session_factory, kept, "h100-sxm")
    shared = kept.get(session, "h100-sxm", shared=True)
    with session_factory(info={BUILT_IN_HARDWARE: kept}) as writing:
        statements.clear()
        plan = plans.create_plan(writing, request, scope=None)
        assert plan.hardware is shared  # no copy into the session: nothing puts the plan there
        assert shared not in writing
        assert plan not in writing
        writing.commit()
    # No profile or price read (the one statement naming the table looks up a calibration by the slug), and
    # none written.
    assert not [s for s in statements if "hardware_profiles.memory_bytes" in s or "FROM hardware_prices" in s]
    assert not [s for s in statements if s.startswith(("INSERT INTO hardware", "UPDATE hardware"))]
    stored = session.get(Plan, plan.id)
    assert (stored.hardware.slug, stored.snapshot["hardware"]["slug"]) == ("h100-sxm", "h100-sxm")

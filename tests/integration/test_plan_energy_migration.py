"""0027 gives plans their energy columns, and fills in what can honestly be said of plans made before it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from service.data.models import HardwareProfile, Organization, Plan
from service.infra import migrate
from service.infra.config import Config
from service.infra.db import create_db_engine
from service.services import energy
from service.services.catalog import load_builtin_hardware

START = datetime(2027, 1, 4, tzinfo=UTC)


@pytest.fixture
def empty_engine(empty_database_url):
    engine = create_db_engine(Config(database_url=empty_database_url))
    yield engine
    engine.dispose()


def a_plan(organization: Organization, hardware: HardwareProfile | None, hours: float) -> Plan:
    return Plan(
        organization_id=organization.id,
        hardware_id=None if hardware is None else hardware.id,
        status="committed",
        start_at=START,
        end_at=START + timedelta(days=1),
        inputs={},
        snapshot={},
        result={},
        method="fixed",
        params=1e9,
        tokens=6e10,
        flops=3.6e20,
        accelerators=8,
        days=1,
        accelerator_hours=hours,
        cost=None,
        currency=None,
        created_by="test",
    )


def test_0027_backfills_energy_where_the_hardware_has_a_tdp_and_never_emissions(empty_engine):
    migrate.upgrade(empty_engine)
    with Session(empty_engine) as session:
        load_builtin_hardware(session)
        organization = Organization(slug="acme", name="Acme")
        session.add(organization)
        session.flush()
        profiles = {
            slug: session.scalar(select(HardwareProfile).where(HardwareProfile.slug == slug))
            for slug in ("h100-sxm", "tpu-v5p")
        }
        plans = {
            "h100-sxm": a_plan(organization, profiles["h100-sxm"], 1_000.0),
            "tpu-v5p": a_plan(organization, profiles["tpu-v5p"], 1_000.0),
            "inline": a_plan(organization, None, 1_000.0),
        }
        session.add_all(plans.values())
        session.commit()
        ids = {name: plan.id for name, plan in plans.items()}

    migrate.downgrade(empty_engine, "0026")
    with empty_engine.connect() as connection:
        columns = {
            row[1] for row in connection.execute(text("SELECT * FROM plans LIMIT 0")).cursor.description
        }
    assert "energy_kwh" not in columns
    migrate.upgrade(empty_engine)

    with Session(empty_engine) as session:
        found = {name: session.get(Plan, plan_id) for name, plan_id in ids.items()}
        one_hour = energy.hours_energy(1.0, hardware="h100-sxm", tdp_watts=700).energy
        assert found["h100-sxm"].energy_kwh == pytest.approx(1_000 * one_hour.energy_kwh, rel=1e-12)
        assert found["tpu-v5p"].energy_kwh is None  # no TDP: no energy
        assert found["inline"].energy_kwh is None  # hardware given inline states none
        assert {plan.emissions_kg_co2e for plan in found.values()} == {None}  # no plan stated a site
        assert found["h100-sxm"].result == {}  # the plan's own documents are not touched

"""Plans keep the energy and emissions of their run (issue 51).

`plans.energy_kwh` and `plans.emissions_kg_co2e` repeat the figures of a plan's estimate's `energy` for the
reports that sum them by month, budget and label, and join the columns of the cost report's index so that
those sums still read the index alone.

The backfill is what the service would have said of a plan made without a site: its hardware's energy at the
modeled draw and the default PUE (services/energy.py, the same code), from the plan's accelerator-hours and
its hardware profile's TDP. Plans on hardware given inline or whose profile states no TDP (TPUs) keep NULL,
and so do the emissions of every plan made before this: none of them stated a site, so no grid intensity is
known for them. Their stored documents are not touched (plans are immutable), so that `flask plans verify`
still evaluates them to what they hold.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-08 00:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COSTS_INDEX = [
    "organization_id",
    "status",
    "start_at",
    "budget_id",
    "hardware_id",
    "currency",
    "cost",
    "accelerator_hours",
    "flops",
]


def upgrade() -> None:
    # Plain ALTERs rather than batch mode: SQLite adds columns in place, and rebuilding `plans` would fail on
    # the rows that refer to it.
    op.add_column("plans", sa.Column("energy_kwh", sa.Float(), nullable=True))
    op.add_column("plans", sa.Column("emissions_kg_co2e", sa.Float(), nullable=True))
    op.drop_index("ix_plans_costs", table_name="plans")
    op.create_index(
        "ix_plans_costs", "plans", [*COSTS_INDEX, "energy_kwh", "emissions_kg_co2e"], unique=False
    )
    _backfill_energy()


def _backfill_energy() -> None:
    # The service's own model, so that a backfilled plan holds what a plan made now without a site would.
    from service.services import energy  # noqa: PLC0415

    hardware = sa.table(
        "hardware_profiles",
        sa.column("id", sa.Uuid()),
        sa.column("slug", sa.String()),
        sa.column("tdp_watts", sa.Integer()),
    )
    plans = sa.table(
        "plans",
        sa.column("hardware_id", sa.Uuid()),
        sa.column("accelerator_hours", sa.Float()),
        sa.column("energy_kwh", sa.Float()),
    )
    bind = op.get_bind()
    powered = bind.execute(
        sa.select(hardware.c.id, hardware.c.slug, hardware.c.tdp_watts).where(
            hardware.c.tdp_watts.is_not(None)
        )
    ).all()
    for hardware_id, slug, tdp_watts in powered:
        # Energy is proportional to accelerator-hours: one hour's, times each plan's.
        one_hour = energy.hours_energy(1.0, hardware=slug, tdp_watts=tdp_watts).energy
        assert one_hour is not None, "hardware with a TDP has a power figure"
        bind.execute(
            sa.update(plans)
            .where(plans.c.hardware_id == hardware_id, plans.c.energy_kwh.is_(None))
            .values(energy_kwh=plans.c.accelerator_hours * one_hour.energy_kwh)
        )


def downgrade() -> None:
    op.drop_index("ix_plans_costs", table_name="plans")
    op.create_index("ix_plans_costs", "plans", COSTS_INDEX, unique=False)
    # DROP COLUMN in place (SQLite 3.35 and later), for the same reason.
    op.execute("ALTER TABLE plans DROP COLUMN emissions_kg_co2e")
    op.execute("ALTER TABLE plans DROP COLUMN energy_kwh")

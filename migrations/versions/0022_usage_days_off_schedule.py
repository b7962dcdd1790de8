"""Reports flag spend off a plan's schedule (issue 49).

A plan's days of usage (`usage_days`, what reports of actual spend sum) keep, beside their hours and cost,
the part of them that records off the plan's schedule used and spent (`plan_usage.off_schedule`, 0020), so
that the cost report and the FOCUS export say, period by period, what the plan itself says in
`off_schedule_cost`. The days of the records flagged since 0020 are filled in here, as the service spreads a
record over its days.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 21:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Exact money: NUMERIC on PostgreSQL, integer millionths on SQLite (see service.data.models.Money).
MONEY = sa.Numeric(18, 6).with_variant(sa.BigInteger(), "sqlite")

revision: str = '0022'
down_revision: str | None = '0021'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('usage_days', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('off_schedule_accelerator_hours', sa.Float(), server_default='0', nullable=False)
        )
        batch_op.add_column(sa.Column('off_schedule_cost', MONEY, server_default='0', nullable=False))
    _fill_in_flagged_records()


def _fill_in_flagged_records() -> None:
    # The service's own types and spread, so that the days hold exactly what it would have written.
    from service.data.models.base import Money, UTCDateTime  # noqa: PLC0415
    from service.services.usage import day_pieces  # noqa: PLC0415

    records = sa.table(
        'plan_usage',
        sa.column('plan_id', sa.Uuid()),
        sa.column('period_start', UTCDateTime()),
        sa.column('period_end', UTCDateTime()),
        sa.column('accelerator_hours', sa.Float()),
        sa.column('cost', Money()),
        sa.column('off_schedule', sa.Boolean()),
    )
    days = sa.table(
        'usage_days',
        sa.column('plan_id', sa.Uuid()),
        sa.column('day', sa.Date()),
        sa.column('off_schedule_accelerator_hours', sa.Float()),
        sa.column('off_schedule_cost', Money()),
    )
    bind = op.get_bind()
    flagged = bind.execute(
        sa.select(
            records.c.plan_id,
            records.c.period_start,
            records.c.period_end,
            records.c.accelerator_hours,
            records.c.cost,
        ).where(records.c.off_schedule)
    ).all()
    for plan_id, start, end, hours, cost in flagged:
        for day, day_hours, day_cost in day_pieces(start, end, hours, cost):
            bind.execute(
                sa.update(days)
                .where(days.c.plan_id == plan_id, days.c.day == day)
                .values(
                    off_schedule_accelerator_hours=days.c.off_schedule_accelerator_hours + day_hours,
                    off_schedule_cost=days.c.off_schedule_cost + day_cost,
                )
            )


def downgrade() -> None:
    with op.batch_alter_table('usage_days', schema=None) as batch_op:
        batch_op.drop_column('off_schedule_cost')
        batch_op.drop_column('off_schedule_accelerator_hours')

"""Usage outside a plan's schedule is flagged (issue 49).

A run reporting usage before its plan's start_at or after its end_at is accepted (runs start late and run
over) but flagged: each such record says so (`plan_usage.off_schedule`), and the plan keeps what its run
used and spent outside its schedule (`plans.off_schedule_accelerator_hours`, `plans.off_schedule_cost`),
moved by every record and reversal in its own transaction like `actual_cost`. Records from before this
revision are taken as on schedule.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Exact money: NUMERIC on PostgreSQL, integer millionths on SQLite (see service.data.models.Money).
MONEY = sa.Numeric(18, 6).with_variant(sa.BigInteger(), "sqlite")

revision: str = '0020'
down_revision: str | None = '0019'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('plan_usage', schema=None) as batch_op:
        batch_op.add_column(sa.Column('off_schedule', sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('off_schedule_accelerator_hours', sa.Float(), server_default='0', nullable=False)
        )
        batch_op.add_column(sa.Column('off_schedule_cost', MONEY, server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_column('off_schedule_cost')
        batch_op.drop_column('off_schedule_accelerator_hours')
    with op.batch_alter_table('plan_usage', schema=None) as batch_op:
        batch_op.drop_column('off_schedule')

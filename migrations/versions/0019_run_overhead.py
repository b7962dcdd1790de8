"""What whole runs lose beyond failures and checkpoints, per hardware profile and per organisation (issue 48).

A plan's goodput takes a run overhead (evaluation, restarts after loss spikes, slow nodes, data stalls,
ramp-up): until now the default or the request's. A hardware profile may now state its installation's
(`hardware_profiles.run_overhead`), and an organisation's calibration fits its own from its runs' actual
accelerator-hours against their measured pace (`calibrations.run_overhead`; NULL when no run reported the
tokens it trained). NULL on a profile: the default.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0019'
down_revision: str | None = '0018'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RANGE = 'run_overhead IS NULL OR (run_overhead >= 0 AND run_overhead <= 0.9)'


def upgrade() -> None:
    with op.batch_alter_table('hardware_profiles', schema=None) as batch_op:
        batch_op.add_column(sa.Column('run_overhead', sa.Float(), nullable=True))
        batch_op.create_check_constraint('run_overhead_range', RANGE)
    with op.batch_alter_table('calibrations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('run_overhead', sa.Float(), nullable=True))
        batch_op.create_check_constraint('run_overhead_range', RANGE)


def downgrade() -> None:
    with op.batch_alter_table('calibrations', schema=None) as batch_op:
        batch_op.drop_constraint('run_overhead_range', type_='check')
        batch_op.drop_column('run_overhead')
    with op.batch_alter_table('hardware_profiles', schema=None) as batch_op:
        batch_op.drop_constraint('run_overhead_range', type_='check')
        batch_op.drop_column('run_overhead')

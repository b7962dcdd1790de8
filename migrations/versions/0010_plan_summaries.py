"""A plan's summary as lists serve it, kept with its row (service/services/plan_summaries.py).

Both columns are nullable: a plan written before this migration has no summary, and a page renders it from
its columns, as every page did before.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 07:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.add_column(sa.Column('summary', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('summary_version', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_column('summary_version')
        batch_op.drop_column('summary')

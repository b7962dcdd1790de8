"""A budget may commit its plans at a quantile of their cost (issue 48).

A plan's cost is the cluster model's point value; its estimate carries an 80% interval from the model's
judged error. A budget's `commit_quantile` (say 0.8, P80) charges each plan that quantile of its cost
instead, so that finance commits on a figure runs like it seldom exceed. NULL: the point value, as before.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 13:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0018'
down_revision: str | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.add_column(sa.Column('commit_quantile', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.drop_column('commit_quantile')

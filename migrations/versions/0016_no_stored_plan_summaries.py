"""Lists render a plan's summary from its row: the summary stored with it goes (issue 47).

Migration 0010 kept each plan's summary as the JSON a page serves, with the version of the row it was
written for, so that GET /v1/plans wrote pages around stored text rather than dumping rows. Measured beside
the path without it, it did not pay for a second, hand-written dump of a plan kept byte-equal to its schema
(docs/decisions/0002-write-path.md). The downgrade adds the columns back empty: pages then render every plan
from its row, as they did for plans stored before 0010.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 06:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0016'
down_revision: str | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_column('summary_version')
        batch_op.drop_column('summary')


def downgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.add_column(sa.Column('summary', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('summary_version', sa.Integer(), nullable=True))

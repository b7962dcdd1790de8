"""Which process holds a fit job (issue 50).

`fit_jobs.runner`: the host name and process id of the runner that claimed the job's current attempt, so
that an operator running several hosts can tell which one is fitting it (and which one died holding it).
Set by each claim; kept once the job ends.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 00:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("fit_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("runner", sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fit_jobs", schema=None) as batch_op:
        batch_op.drop_column("runner")

"""A rotated webhook secret keeps signing beside the new one for a while (issue 50).

`webhooks.previous_secret` and `previous_secret_until`: after POST .../rotate-secret every delivery carries
two signatures, the new secret's and the old one's, until the overlap (WEBHOOK_SECRET_OVERLAP_SECONDS, a
day by default) ends, so that a receiver can take up the new key without refusing deliveries meanwhile.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 22:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

UTC_DATETIME = sa.DateTime(timezone=True)

revision: str = '0023'
down_revision: str | None = '0022'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('webhooks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('previous_secret', sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column('previous_secret_until', UTC_DATETIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('webhooks', schema=None) as batch_op:
        batch_op.drop_column('previous_secret_until')
        batch_op.drop_column('previous_secret')

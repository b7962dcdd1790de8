"""Rate limits shared by every process and host on the database (issue 50).

`rate_limit_buckets`: a token bucket per limit (`scope`: key, auth_failures) and per what it counts (an API
key's id, a client address), taken and refilled by one atomic statement per request on PostgreSQL
(service/web/ratelimit.py, SharedTokenBuckets), so that W workers on H hosts admit the limit, not W x H times
it. The embedded SQLite default keeps its in-process buckets; the table is there on both, as every table is.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 22:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

UTC_DATETIME = sa.DateTime(timezone=True)

revision: str = '0024'
down_revision: str | None = '0023'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'rate_limit_buckets',
        sa.Column('scope', sa.String(length=16), nullable=False),
        sa.Column('key', sa.String(length=100), nullable=False),
        sa.Column('tokens', sa.Float(), nullable=False),
        sa.Column('counted_at', UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint('scope', 'key', name=op.f('pk_rate_limit_buckets')),
    )
    with op.batch_alter_table('rate_limit_buckets', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rate_limit_buckets_counted_at'), ['counted_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('rate_limit_buckets', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rate_limit_buckets_counted_at'))
    op.drop_table('rate_limit_buckets')

"""An index for cost reports: plans by organisation, status and start_at, with what reports sum.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 04:08:37.460756
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.create_index('ix_plans_costs', ['organization_id', 'status', 'start_at', 'budget_id', 'hardware_id', 'currency', 'cost', 'accelerator_hours', 'flops'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_index('ix_plans_costs')


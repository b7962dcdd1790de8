"""Budgets: money (and optional FLOP or accelerator-hour caps) per organisation and period.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 21:43:52.299109
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Exact money: NUMERIC on PostgreSQL, integer millionths on SQLite (see service.data.models.Money).
MONEY = sa.Numeric(18, 6).with_variant(sa.BigInteger(), "sqlite")

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('budgets',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('organization_id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('amount', MONEY, nullable=False),
    sa.Column('currency', sa.String(length=3), nullable=False),
    sa.Column('committed', MONEY, nullable=False),
    sa.Column('period_start', sa.DateTime(timezone=True), nullable=False),
    sa.Column('period_end', sa.DateTime(timezone=True), nullable=False),
    sa.Column('max_flops', sa.Float(), nullable=True),
    sa.Column('max_accelerator_hours', sa.Float(), nullable=True),
    sa.Column('labels', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.CheckConstraint('amount >= 0', name=op.f('ck_budgets_amount_not_negative')),
    sa.CheckConstraint('committed >= 0 AND committed <= amount', name=op.f('ck_budgets_committed_within_amount')),
    sa.CheckConstraint('max_accelerator_hours IS NULL OR max_accelerator_hours > 0', name=op.f('ck_budgets_max_accelerator_hours_positive')),
    sa.CheckConstraint('max_flops IS NULL OR max_flops > 0', name=op.f('ck_budgets_max_flops_positive')),
    sa.CheckConstraint('period_end > period_start', name=op.f('ck_budgets_period_ordered')),
    sa.ForeignKeyConstraint(['organization_id'], ['organizations.id'], name=op.f('fk_budgets_organization_id_organizations'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_budgets'))
    )
    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_budgets_created_at'), ['created_at'], unique=False)
        batch_op.create_index('ix_budgets_organization_id_created_at', ['organization_id', 'created_at'], unique=False)

    op.create_table('budget_hardware',
    sa.Column('budget_id', sa.Uuid(), nullable=False),
    sa.Column('hardware_id', sa.Uuid(), nullable=False),
    sa.ForeignKeyConstraint(['budget_id'], ['budgets.id'], name=op.f('fk_budget_hardware_budget_id_budgets'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['hardware_id'], ['hardware_profiles.id'], name=op.f('fk_budget_hardware_hardware_id_hardware_profiles'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('budget_id', 'hardware_id', name=op.f('pk_budget_hardware'))
    )


def downgrade() -> None:
    op.drop_table('budget_hardware')
    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.drop_index('ix_budgets_organization_id_created_at')
        batch_op.drop_index(batch_op.f('ix_budgets_created_at'))

    op.drop_table('budgets')

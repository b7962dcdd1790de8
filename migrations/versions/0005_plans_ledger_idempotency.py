"""Plans, the budget ledger (with committed FLOPs and hours, capped) and idempotency keys.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 00:03:20.706530
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Exact money: NUMERIC on PostgreSQL, integer millionths on SQLite (see service.data.models.Money).
MONEY = sa.Numeric(18, 6).with_variant(sa.BigInteger(), "sqlite")

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('idempotency_keys',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('principal', sa.String(length=64), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('status_code', sa.Integer(), nullable=True),
    sa.Column('body', sa.Text(), nullable=True),
    sa.Column('headers', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_idempotency_keys')),
    sa.UniqueConstraint('principal', 'key', name='uq_idempotency_keys_principal_key')
    )
    with op.batch_alter_table('idempotency_keys', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_idempotency_keys_expires_at'), ['expires_at'], unique=False)

    op.create_table('plans',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('organization_id', sa.Uuid(), nullable=False),
    sa.Column('budget_id', sa.Uuid(), nullable=True),
    sa.Column('hardware_id', sa.Uuid(), nullable=True),
    sa.Column('parent_id', sa.Uuid(), nullable=True),
    sa.Column('name', sa.String(length=200), nullable=True),
    sa.Column('labels', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('start_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('end_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('inputs', sa.JSON(), nullable=False),
    sa.Column('snapshot', sa.JSON(), nullable=False),
    sa.Column('result', sa.JSON(), nullable=False),
    sa.Column('method', sa.String(length=32), nullable=False),
    sa.Column('params', sa.Float(), nullable=False),
    sa.Column('tokens', sa.Float(), nullable=False),
    sa.Column('flops', sa.Float(), nullable=False),
    sa.Column('predicted_loss', sa.Float(), nullable=True),
    sa.Column('accelerators', sa.Integer(), nullable=False),
    sa.Column('days', sa.Float(), nullable=False),
    sa.Column('accelerator_hours', sa.Float(), nullable=False),
    sa.Column('cost', MONEY, nullable=True),
    sa.Column('currency', sa.String(length=3), nullable=True),
    sa.Column('created_by', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('committed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('cancelled_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.CheckConstraint("status IN ('draft', 'committed', 'cancelled')", name=op.f('ck_plans_status_known')),
    sa.CheckConstraint('cost IS NULL OR cost >= 0', name=op.f('ck_plans_cost_not_negative')),
    sa.ForeignKeyConstraint(['budget_id'], ['budgets.id'], name=op.f('fk_plans_budget_id_budgets'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['hardware_id'], ['hardware_profiles.id'], name=op.f('fk_plans_hardware_id_hardware_profiles'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['organization_id'], ['organizations.id'], name=op.f('fk_plans_organization_id_organizations'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['parent_id'], ['plans.id'], name=op.f('fk_plans_parent_id_plans'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_plans'))
    )
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.create_index('ix_plans_budget_id_created_at_id', ['budget_id', 'created_at', 'id'], unique=False)
        batch_op.create_index('ix_plans_created_at_id', ['created_at', 'id'], unique=False)
        batch_op.create_index('ix_plans_hardware_id_created_at_id', ['hardware_id', 'created_at', 'id'], unique=False)
        batch_op.create_index('ix_plans_organization_id_created_at_id', ['organization_id', 'created_at', 'id'], unique=False)

    op.create_table('budget_ledger',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('budget_id', sa.Uuid(), nullable=False),
    sa.Column('plan_id', sa.Uuid(), nullable=False),
    sa.Column('entry', sa.String(length=16), nullable=False),
    sa.Column('amount', MONEY, nullable=False),
    sa.Column('currency', sa.String(length=3), nullable=False),
    sa.Column('flops', sa.Float(), nullable=False),
    sa.Column('accelerator_hours', sa.Float(), nullable=False),
    sa.Column('actor', sa.String(length=64), nullable=False),
    sa.Column('request_id', sa.String(length=128), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("entry IN ('commit', 'release')", name=op.f('ck_budget_ledger_entry_known')),
    sa.ForeignKeyConstraint(['budget_id'], ['budgets.id'], name=op.f('fk_budget_ledger_budget_id_budgets'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], name=op.f('fk_budget_ledger_plan_id_plans'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_budget_ledger'))
    )
    with op.batch_alter_table('budget_ledger', schema=None) as batch_op:
        batch_op.create_index('ix_budget_ledger_budget_id_created_at_id', ['budget_id', 'created_at', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_budget_ledger_plan_id'), ['plan_id'], unique=False)

    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.add_column(sa.Column('committed_flops', sa.Float(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('committed_accelerator_hours', sa.Float(), server_default='0', nullable=False))
        batch_op.create_check_constraint(
            op.f('ck_budgets_committed_flops_within_cap'),
            'max_flops IS NULL OR committed_flops <= max_flops * 1.000000001',
        )
        batch_op.create_check_constraint(
            op.f('ck_budgets_committed_hours_within_cap'),
            'max_accelerator_hours IS NULL OR committed_accelerator_hours <= max_accelerator_hours * 1.000000001',
        )



def downgrade() -> None:
    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_budgets_committed_hours_within_cap'), type_='check')
        batch_op.drop_constraint(op.f('ck_budgets_committed_flops_within_cap'), type_='check')
        batch_op.drop_column('committed_accelerator_hours')
        batch_op.drop_column('committed_flops')

    with op.batch_alter_table('budget_ledger', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_budget_ledger_plan_id'))
        batch_op.drop_index('ix_budget_ledger_budget_id_created_at_id')

    op.drop_table('budget_ledger')
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_index('ix_plans_organization_id_created_at_id')
        batch_op.drop_index('ix_plans_hardware_id_created_at_id')
        batch_op.drop_index('ix_plans_created_at_id')
        batch_op.drop_index('ix_plans_budget_id_created_at_id')

    op.drop_table('plans')
    with op.batch_alter_table('idempotency_keys', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_idempotency_keys_expires_at'))

    op.drop_table('idempotency_keys')

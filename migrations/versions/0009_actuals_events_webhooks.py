"""Plans meet reality: usage records and their daily sums, a plan's run (running, completed, failed), a
budget's actual spend and alert thresholds, events with their ordered ids, webhooks and their deliveries, and
an organisation's own calibrations of the cluster model.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 16:52:12.310848
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Exact money: NUMERIC on PostgreSQL, integer millionths on SQLite (see service.data.models.Money).
MONEY = sa.Numeric(18, 6).with_variant(sa.BigInteger(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)

PLAN_STATUSES_BEFORE = "status IN ('draft', 'committed', 'cancelled')"
PLAN_STATUSES = "status IN ('draft', 'committed', 'running', 'completed', 'failed', 'cancelled')"
LEDGER_ENTRIES_BEFORE = "entry IN ('commit', 'release')"
LEDGER_ENTRIES = "entry IN ('commit', 'release', 'settle')"

revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('counters',
    sa.Column('name', sa.String(length=32), nullable=False),
    sa.Column('value', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_counters'))
    )
    op.create_table('calibrations',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('organization_id', sa.Uuid(), nullable=False),
    sa.Column('hardware_id', sa.Uuid(), nullable=False),
    sa.Column('matmul_efficiency', sa.Float(), nullable=False),
    sa.Column('runs', sa.JSON(), nullable=False),
    sa.Column('fit', sa.JSON(), nullable=False),
    sa.Column('created_by', sa.String(length=64), nullable=False),
    sa.Column('created_at', UTC_DATETIME, nullable=False),
    sa.CheckConstraint('matmul_efficiency > 0 AND matmul_efficiency <= 1', name=op.f('ck_calibrations_efficiency_range')),
    sa.ForeignKeyConstraint(['hardware_id'], ['hardware_profiles.id'], name=op.f('fk_calibrations_hardware_id_hardware_profiles'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['organization_id'], ['organizations.id'], name=op.f('fk_calibrations_organization_id_organizations'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_calibrations'))
    )
    with op.batch_alter_table('calibrations', schema=None) as batch_op:
        batch_op.create_index('ix_calibrations_organization_id_hardware_id_created_at', ['organization_id', 'hardware_id', 'created_at'], unique=False)

    op.create_table('events',
    sa.Column('id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('organization_id', sa.Uuid(), nullable=False),
    sa.Column('type', sa.String(length=64), nullable=False),
    sa.Column('subject_type', sa.String(length=32), nullable=False),
    sa.Column('subject_id', sa.String(length=100), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=True),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.Column('created_at', UTC_DATETIME, nullable=False),
    sa.ForeignKeyConstraint(['organization_id'], ['organizations.id'], name=op.f('fk_events_organization_id_organizations'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_events')),
    sa.UniqueConstraint('key', name='uq_events_key')
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_organization_id_id', ['organization_id', 'id'], unique=False)

    op.create_table('webhooks',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('organization_id', sa.Uuid(), nullable=False),
    sa.Column('url', sa.String(length=2000), nullable=False),
    sa.Column('secret', sa.String(length=100), nullable=False),
    sa.Column('event_types', sa.JSON(), nullable=False),
    sa.Column('active', sa.Boolean(), nullable=False),
    sa.Column('description', sa.String(length=200), nullable=True),
    sa.Column('created_by', sa.String(length=64), nullable=False),
    sa.Column('created_at', UTC_DATETIME, nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['organization_id'], ['organizations.id'], name=op.f('fk_webhooks_organization_id_organizations'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_webhooks'))
    )
    with op.batch_alter_table('webhooks', schema=None) as batch_op:
        batch_op.create_index('ix_webhooks_organization_id_created_at_id', ['organization_id', 'created_at', 'id'], unique=False)

    op.create_table('webhook_deliveries',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('webhook_id', sa.Uuid(), nullable=False),
    sa.Column('event_id', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', UTC_DATETIME, nullable=False),
    sa.Column('last_status_code', sa.Integer(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('delivered_at', UTC_DATETIME, nullable=True),
    sa.Column('created_at', UTC_DATETIME, nullable=False),
    sa.CheckConstraint("status IN ('pending', 'delivered', 'failed')", name=op.f('ck_webhook_deliveries_status_known')),
    sa.ForeignKeyConstraint(['event_id'], ['events.id'], name=op.f('fk_webhook_deliveries_event_id_events'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['webhook_id'], ['webhooks.id'], name=op.f('fk_webhook_deliveries_webhook_id_webhooks'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_deliveries')),
    sa.UniqueConstraint('webhook_id', 'event_id', name='uq_webhook_deliveries_webhook_id')
    )
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.create_index('ix_webhook_deliveries_status_next_attempt_at', ['status', 'next_attempt_at'], unique=False)
        batch_op.create_index('ix_webhook_deliveries_webhook_id_created_at_id', ['webhook_id', 'created_at', 'id'], unique=False)

    op.create_table('plan_usage',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('plan_id', sa.Uuid(), nullable=False),
    sa.Column('organization_id', sa.Uuid(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('reverses_id', sa.Uuid(), nullable=True),
    sa.Column('reporter', sa.String(length=100), nullable=False),
    sa.Column('period_start', UTC_DATETIME, nullable=False),
    sa.Column('period_end', UTC_DATETIME, nullable=False),
    sa.Column('accelerator_hours', sa.Float(), nullable=False),
    sa.Column('tokens', sa.Float(), nullable=True),
    sa.Column('tokens_per_second', sa.Float(), nullable=True),
    sa.Column('cost', MONEY, nullable=False),
    sa.Column('currency', sa.String(length=3), nullable=False),
    sa.Column('cost_source', sa.String(length=16), nullable=False),
    sa.Column('price_per_hour', MONEY, nullable=True),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('actor', sa.String(length=64), nullable=False),
    sa.Column('request_id', sa.String(length=128), nullable=True),
    sa.Column('created_at', UTC_DATETIME, nullable=False),
    sa.CheckConstraint("(kind = 'usage' AND reverses_id IS NULL AND accelerator_hours >= 0 AND cost >= 0) OR (kind = 'reversal' AND reverses_id IS NOT NULL AND accelerator_hours <= 0 AND cost <= 0)", name=op.f('ck_plan_usage_kind_signs')),
    sa.CheckConstraint("cost_source IN ('reported', 'price', 'reversal')", name=op.f('ck_plan_usage_cost_source_known')),
    sa.CheckConstraint("kind IN ('usage', 'reversal')", name=op.f('ck_plan_usage_kind_known')),
    sa.CheckConstraint('period_end > period_start', name=op.f('ck_plan_usage_period_ordered')),
    sa.CheckConstraint('tokens IS NULL OR tokens >= 0', name=op.f('ck_plan_usage_tokens_not_negative')),
    sa.CheckConstraint('tokens_per_second IS NULL OR tokens_per_second > 0', name=op.f('ck_plan_usage_throughput_positive')),
    sa.ForeignKeyConstraint(['organization_id'], ['organizations.id'], name=op.f('fk_plan_usage_organization_id_organizations'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], name=op.f('fk_plan_usage_plan_id_plans'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['reverses_id'], ['plan_usage.id'], name=op.f('fk_plan_usage_reverses_id_plan_usage'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_plan_usage')),
    sa.UniqueConstraint('reverses_id', name='uq_plan_usage_reverses_id')
    )
    with op.batch_alter_table('plan_usage', schema=None) as batch_op:
        batch_op.create_index('ix_plan_usage_plan_id_created_at_id', ['plan_id', 'created_at', 'id'], unique=False)
        batch_op.create_index('ix_plan_usage_plan_id_reporter_period_start', ['plan_id', 'reporter', 'period_start'], unique=False)

    op.create_table('usage_days',
    sa.Column('plan_id', sa.Uuid(), nullable=False),
    sa.Column('day', sa.Date(), nullable=False),
    sa.Column('organization_id', sa.Uuid(), nullable=False),
    sa.Column('accelerator_hours', sa.Float(), nullable=False),
    sa.Column('cost', MONEY, nullable=False),
    sa.Column('currency', sa.String(length=3), nullable=False),
    sa.ForeignKeyConstraint(['organization_id'], ['organizations.id'], name=op.f('fk_usage_days_organization_id_organizations'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], name=op.f('fk_usage_days_plan_id_plans'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('plan_id', 'day', name=op.f('pk_usage_days'))
    )
    with op.batch_alter_table('usage_days', schema=None) as batch_op:
        batch_op.create_index('ix_usage_days_organization_id_day', ['organization_id', 'day', 'plan_id'], unique=False)

    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.add_column(sa.Column('spent', MONEY, server_default='0', nullable=False))
        batch_op.add_column(sa.Column('overrun', MONEY, server_default='0', nullable=False))
        batch_op.add_column(sa.Column('alert_thresholds', sa.JSON(), server_default='[0.8, 1.0]', nullable=False))
        batch_op.create_check_constraint(op.f('ck_budgets_spent_not_negative'), 'spent >= 0 AND overrun >= 0')

    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.add_column(sa.Column('started_at', UTC_DATETIME, nullable=True))
        batch_op.add_column(sa.Column('finished_at', UTC_DATETIME, nullable=True))
        batch_op.add_column(sa.Column('actual_accelerator_hours', sa.Float(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('actual_cost', MONEY, server_default='0', nullable=False))
        batch_op.add_column(sa.Column('tokens_trained', sa.Float(), server_default='0', nullable=False))
        batch_op.drop_constraint(op.f('ck_plans_status_known'), type_='check')
        batch_op.create_check_constraint(op.f('ck_plans_status_known'), PLAN_STATUSES)

    with op.batch_alter_table('budget_ledger', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_budget_ledger_entry_known'), type_='check')
        batch_op.create_check_constraint(op.f('ck_budget_ledger_entry_known'), LEDGER_ENTRIES)

    op.execute(sa.text("INSERT INTO counters (name, value) VALUES ('events', 0)"))



def downgrade() -> None:
    with op.batch_alter_table('budget_ledger', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_budget_ledger_entry_known'), type_='check')
        batch_op.create_check_constraint(op.f('ck_budget_ledger_entry_known'), LEDGER_ENTRIES_BEFORE)

    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_plans_status_known'), type_='check')
        batch_op.create_check_constraint(op.f('ck_plans_status_known'), PLAN_STATUSES_BEFORE)
        batch_op.drop_column('tokens_trained')
        batch_op.drop_column('actual_cost')
        batch_op.drop_column('actual_accelerator_hours')
        batch_op.drop_column('finished_at')
        batch_op.drop_column('started_at')

    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_budgets_spent_not_negative'), type_='check')
        batch_op.drop_column('alert_thresholds')
        batch_op.drop_column('overrun')
        batch_op.drop_column('spent')

    with op.batch_alter_table('usage_days', schema=None) as batch_op:
        batch_op.drop_index('ix_usage_days_organization_id_day')

    op.drop_table('usage_days')
    with op.batch_alter_table('plan_usage', schema=None) as batch_op:
        batch_op.drop_index('ix_plan_usage_plan_id_reporter_period_start')
        batch_op.drop_index('ix_plan_usage_plan_id_created_at_id')

    op.drop_table('plan_usage')
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_webhook_deliveries_webhook_id_created_at_id')
        batch_op.drop_index('ix_webhook_deliveries_status_next_attempt_at')

    op.drop_table('webhook_deliveries')
    with op.batch_alter_table('webhooks', schema=None) as batch_op:
        batch_op.drop_index('ix_webhooks_organization_id_created_at_id')

    op.drop_table('webhooks')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_organization_id_id')

    op.drop_table('events')
    with op.batch_alter_table('calibrations', schema=None) as batch_op:
        batch_op.drop_index('ix_calibrations_organization_id_hardware_id_created_at')

    op.drop_table('calibrations')
    op.drop_table('counters')

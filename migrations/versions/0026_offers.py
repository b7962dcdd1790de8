"""Offers (issue 51): a hardware profile on a provider, in a region, under a pricing model, with prices.

`offers`: on demand, reserved (a term in days, paid whether used or not), spot (a preemption rate per
instance-hour with its source, and a requeue time) or owned (a site's PUE); the grid region its emissions are
looked up by. `offer_prices`: the price history per accelerator-hour (an owned offer's amortised capital),
with an owned offer's energy price per kWh.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 02:36:22.980159
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Exact money: NUMERIC on PostgreSQL, integer millionths on SQLite (see service.data.models.Money).
MONEY = sa.Numeric(18, 6).with_variant(sa.BigInteger(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)

revision: str = '0026'
down_revision: str | None = '0025'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('offers',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('slug', sa.String(length=63), nullable=False),
    sa.Column('hardware_id', sa.Uuid(), nullable=False),
    sa.Column('provider', sa.String(length=63), nullable=False),
    sa.Column('region', sa.String(length=100), nullable=True),
    sa.Column('availability_zone', sa.String(length=100), nullable=True),
    sa.Column('instance_type', sa.String(length=100), nullable=True),
    sa.Column('accelerators_per_instance', sa.Integer(), nullable=False),
    sa.Column('pricing', sa.String(length=16), nullable=False),
    sa.Column('term_days', sa.Integer(), nullable=True),
    sa.Column('preemptions_per_instance_hour', sa.Float(), nullable=True),
    sa.Column('preemptions_source', sa.Text(), nullable=True),
    sa.Column('requeue_seconds', sa.Float(), nullable=True),
    sa.Column('pue', sa.Float(), nullable=True),
    sa.Column('grid_region', sa.String(length=100), nullable=True),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('created_at', UTC_DATETIME, nullable=False),
    sa.Column('updated_at', UTC_DATETIME, nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.CheckConstraint("(pricing = 'reserved') = (term_days IS NOT NULL)", name=op.f('ck_offers_term_only_reserved')),
    sa.CheckConstraint("(pricing = 'spot') = (preemptions_per_instance_hour IS NOT NULL)", name=op.f('ck_offers_preemptions_only_spot')),
    sa.CheckConstraint("pricing IN ('on_demand', 'reserved', 'spot', 'owned')", name=op.f('ck_offers_pricing_known')),
    sa.CheckConstraint('accelerators_per_instance > 0', name=op.f('ck_offers_accelerators_per_instance_positive')),
    sa.CheckConstraint('preemptions_per_instance_hour IS NULL OR (preemptions_per_instance_hour >= 0 AND preemptions_per_instance_hour < 1)', name=op.f('ck_offers_preemptions_range')),
    sa.CheckConstraint('pue IS NULL OR (pue >= 1 AND pue <= 3)', name=op.f('ck_offers_pue_range')),
    sa.CheckConstraint('requeue_seconds IS NULL OR requeue_seconds >= 0', name=op.f('ck_offers_requeue_not_negative')),
    sa.CheckConstraint('term_days IS NULL OR term_days > 0', name=op.f('ck_offers_term_positive')),
    sa.ForeignKeyConstraint(['hardware_id'], ['hardware_profiles.id'], name=op.f('fk_offers_hardware_id_hardware_profiles'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_offers')),
    sa.UniqueConstraint('slug', name=op.f('uq_offers_slug'))
    )
    with op.batch_alter_table('offers', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_offers_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_offers_hardware_id'), ['hardware_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_offers_pricing'), ['pricing'], unique=False)
        batch_op.create_index('ix_offers_provider_region', ['provider', 'region'], unique=False)

    op.create_table('offer_prices',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('offer_id', sa.Uuid(), nullable=False),
    sa.Column('price_per_hour', MONEY, nullable=False),
    sa.Column('price_per_kwh', MONEY, nullable=True),
    sa.Column('currency', sa.String(length=3), nullable=False),
    sa.Column('as_of', sa.String(length=10), nullable=True),
    sa.Column('source', sa.Text(), nullable=True),
    sa.Column('effective_at', UTC_DATETIME, nullable=False),
    sa.CheckConstraint('price_per_hour >= 0', name=op.f('ck_offer_prices_price_not_negative')),
    sa.CheckConstraint('price_per_kwh IS NULL OR price_per_kwh >= 0', name=op.f('ck_offer_prices_energy_price_not_negative')),
    sa.ForeignKeyConstraint(['offer_id'], ['offers.id'], name=op.f('fk_offer_prices_offer_id_offers'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_offer_prices'))
    )
    with op.batch_alter_table('offer_prices', schema=None) as batch_op:
        batch_op.create_index('ix_offer_prices_offer_id_effective_at', ['offer_id', 'effective_at'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('offer_prices', schema=None) as batch_op:
        batch_op.drop_index('ix_offer_prices_offer_id_effective_at')

    op.drop_table('offer_prices')
    with op.batch_alter_table('offers', schema=None) as batch_op:
        batch_op.drop_index('ix_offers_provider_region')
        batch_op.drop_index(batch_op.f('ix_offers_pricing'))
        batch_op.drop_index(batch_op.f('ix_offers_hardware_id'))
        batch_op.drop_index(batch_op.f('ix_offers_created_at'))

    op.drop_table('offers')

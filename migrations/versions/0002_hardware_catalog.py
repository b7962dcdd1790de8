"""Hardware catalog: accelerator profiles and their price history.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 20:59:20.049484
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Exact money: NUMERIC on PostgreSQL, integer millionths on SQLite (see service.data.models.Money).
MONEY = sa.Numeric(18, 6).with_variant(sa.BigInteger(), "sqlite")

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('hardware_profiles',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('slug', sa.String(length=63), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('vendor', sa.String(length=100), nullable=False),
    sa.Column('peak_flops_fp32', sa.Float(), nullable=True),
    sa.Column('peak_flops_tf32', sa.Float(), nullable=True),
    sa.Column('peak_flops_bf16', sa.Float(), nullable=True),
    sa.Column('peak_flops_fp16', sa.Float(), nullable=True),
    sa.Column('peak_flops_fp8', sa.Float(), nullable=True),
    sa.Column('peak_flops_int8', sa.Float(), nullable=True),
    sa.Column('memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('memory_bandwidth_bytes_per_second', sa.BigInteger(), nullable=False),
    sa.Column('interconnect_bandwidth_bytes_per_second', sa.BigInteger(), nullable=True),
    sa.Column('interconnect', sa.String(length=100), nullable=True),
    sa.Column('tdp_watts', sa.Integer(), nullable=True),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('built_in', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.CheckConstraint('interconnect_bandwidth_bytes_per_second IS NULL OR interconnect_bandwidth_bytes_per_second > 0', name=op.f('ck_hardware_profiles_interconnect_positive')),
    sa.CheckConstraint('memory_bandwidth_bytes_per_second > 0', name=op.f('ck_hardware_profiles_memory_bandwidth_positive')),
    sa.CheckConstraint('memory_bytes > 0', name=op.f('ck_hardware_profiles_memory_positive')),
    sa.CheckConstraint('peak_flops_bf16 IS NULL OR peak_flops_bf16 > 0', name=op.f('ck_hardware_profiles_peak_flops_bf16_positive')),
    sa.CheckConstraint('peak_flops_fp16 IS NULL OR peak_flops_fp16 > 0', name=op.f('ck_hardware_profiles_peak_flops_fp16_positive')),
    sa.CheckConstraint('peak_flops_fp32 IS NULL OR peak_flops_fp32 > 0', name=op.f('ck_hardware_profiles_peak_flops_fp32_positive')),
    sa.CheckConstraint('peak_flops_fp8 IS NULL OR peak_flops_fp8 > 0', name=op.f('ck_hardware_profiles_peak_flops_fp8_positive')),
    sa.CheckConstraint('peak_flops_int8 IS NULL OR peak_flops_int8 > 0', name=op.f('ck_hardware_profiles_peak_flops_int8_positive')),
    sa.CheckConstraint('peak_flops_tf32 IS NULL OR peak_flops_tf32 > 0', name=op.f('ck_hardware_profiles_peak_flops_tf32_positive')),
    sa.CheckConstraint('tdp_watts IS NULL OR tdp_watts > 0', name=op.f('ck_hardware_profiles_tdp_positive')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hardware_profiles')),
    sa.UniqueConstraint('slug', name=op.f('uq_hardware_profiles_slug'))
    )
    with op.batch_alter_table('hardware_profiles', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_hardware_profiles_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_hardware_profiles_vendor'), ['vendor'], unique=False)

    op.create_table('hardware_prices',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('hardware_id', sa.Uuid(), nullable=False),
    sa.Column('price_per_hour', MONEY, nullable=False),
    sa.Column('currency', sa.String(length=3), nullable=False),
    sa.Column('as_of', sa.String(length=10), nullable=True),
    sa.Column('source', sa.Text(), nullable=True),
    sa.Column('effective_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('price_per_hour >= 0', name=op.f('ck_hardware_prices_price_not_negative')),
    sa.ForeignKeyConstraint(['hardware_id'], ['hardware_profiles.id'], name=op.f('fk_hardware_prices_hardware_id_hardware_profiles'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hardware_prices'))
    )
    with op.batch_alter_table('hardware_prices', schema=None) as batch_op:
        batch_op.create_index('ix_hardware_prices_hardware_id_effective_at', ['hardware_id', 'effective_at'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('hardware_prices', schema=None) as batch_op:
        batch_op.drop_index('ix_hardware_prices_hardware_id_effective_at')

    op.drop_table('hardware_prices')
    with op.batch_alter_table('hardware_profiles', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_hardware_profiles_vendor'))
        batch_op.drop_index(batch_op.f('ix_hardware_profiles_created_at'))

    op.drop_table('hardware_profiles')

"""Hardware as installed in a cluster: accelerators per scale-up domain, the scale-up and scale-out links per
accelerator (one direction) and unexpected interruptions per accelerator-hour.

Every column is nullable: a custom profile made before this migration keeps NULL, "not given". The built-in
profiles get their figures from the catalog when `flask --app service setup` loads it again (it runs right
after the migrations and brings every built-in row up to date with catalog/hardware.json).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 09:08:08.055913
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECKS = {
    'ck_hardware_profiles_accelerators_per_node_positive': 'accelerators_per_node IS NULL OR accelerators_per_node > 0',
    'ck_hardware_profiles_scale_up_positive': 'scale_up_bandwidth_bytes_per_second IS NULL OR scale_up_bandwidth_bytes_per_second > 0',
    'ck_hardware_profiles_scale_out_positive': 'scale_out_bandwidth_bytes_per_second IS NULL OR scale_out_bandwidth_bytes_per_second > 0',
    'ck_hardware_profiles_failure_rate_range': 'failures_per_accelerator_hour IS NULL OR (failures_per_accelerator_hour >= 0 AND failures_per_accelerator_hour < 1)',
}


def upgrade() -> None:
    with op.batch_alter_table('hardware_profiles', schema=None) as batch_op:
        batch_op.add_column(sa.Column('accelerators_per_node', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('scale_up_bandwidth_bytes_per_second', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('scale_out_bandwidth_bytes_per_second', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('failures_per_accelerator_hour', sa.Float(), nullable=True))
        for name, condition in CHECKS.items():
            batch_op.create_check_constraint(op.f(name), condition)


def downgrade() -> None:
    with op.batch_alter_table('hardware_profiles', schema=None) as batch_op:
        for name in reversed(CHECKS):
            batch_op.drop_constraint(op.f(name), type_='check')
        batch_op.drop_column('failures_per_accelerator_hour')
        batch_op.drop_column('scale_out_bandwidth_bytes_per_second')
        batch_op.drop_column('scale_up_bandwidth_bytes_per_second')
        batch_op.drop_column('accelerators_per_node')

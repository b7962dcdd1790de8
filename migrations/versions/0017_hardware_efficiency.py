"""Hardware profiles state what they achieve of their peaks, and how that is known (issue 48).

The cluster model read a hardware's large-GEMM efficiency from its slug's prefix (`a100`, `h100`, `h800`),
so the same figures gave different answers under different names and every other part was priced as an A100.
The efficiency is now a field of the profile: GEMM fraction by precision, optionally the HBM and link
fractions, its provenance (calibrated, derived, uncalibrated) and basis. NULL: the profile states none, and
the model runs it at the fractions of uncalibrated hardware, saying so. `flask setup` fills the built-in
profiles from the catalog.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0017'
down_revision: str | None = '0016'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('hardware_profiles', schema=None) as batch_op:
        batch_op.add_column(sa.Column('efficiency', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('hardware_profiles', schema=None) as batch_op:
        batch_op.drop_column('efficiency')

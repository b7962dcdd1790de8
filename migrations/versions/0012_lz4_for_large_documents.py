"""PostgreSQL compresses a plan's documents and a stored response with lz4 rather than pglz (issue 24).

A plan's `result` (about 7 kB of JSON), `snapshot` and `inputs`, and the response an Idempotency-Key keeps
(`idempotency_keys.body`, the plan again), are compressed as each row is written. pglz, PostgreSQL's default,
took a tenth of the database's CPU per plan; lz4 writes them for about a third less CPU per plan (0.6 → 0.5
ms without a key, 1.0 → 0.75 ms with one, bench/RESULTS.md) at some 5% more space. Rows already written keep
pglz: PostgreSQL reads either.

lz4 is a build option of PostgreSQL 14 and later (the PGDG and distribution packages have it): a server
without it keeps pglz, and the service works the same. SQLite: nothing to do.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 19:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0012'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = {'plans': ('result', 'snapshot', 'inputs'), 'idempotency_keys': ('body',)}


def _has_lz4() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != 'postgresql':
        return False
    # Absent before PostgreSQL 14 (no row); without lz4 in the build, not among its values.
    methods = bind.scalar(
        sa.text("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")
    )
    return methods is not None and 'lz4' in methods


def _compress_with(method: str) -> None:
    for table, columns in COLUMNS.items():
        changes = ', '.join(f'ALTER COLUMN {column} SET COMPRESSION {method}' for column in columns)
        op.execute(f'ALTER TABLE {table} {changes}')


def upgrade() -> None:
    if _has_lz4():
        _compress_with('lz4')


def downgrade() -> None:
    if _has_lz4():
        _compress_with('default')

"""Scaling laws fitted to an organisation's runs, background fit jobs, and the fitted law a plan used.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 02:53:04.272247
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('fitted_laws',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('organization_id', sa.Uuid(), nullable=False),
    sa.Column('slug', sa.String(length=63), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('E', sa.Float(), nullable=False),
    sa.Column('A', sa.Float(), nullable=False),
    sa.Column('B', sa.Float(), nullable=False),
    sa.Column('alpha', sa.Float(), nullable=False),
    sa.Column('beta', sa.Float(), nullable=False),
    sa.Column('fitted_range', sa.JSON(), nullable=False),
    sa.Column('fit', sa.JSON(), nullable=False),
    sa.Column('bootstrap', sa.JSON(), nullable=True),
    sa.Column('bootstrap_laws', sa.JSON(), nullable=False),
    sa.Column('isoflop', sa.JSON(), nullable=False),
    sa.Column('warnings', sa.JSON(), nullable=False),
    sa.Column('runs', sa.JSON(), nullable=False),
    sa.Column('created_by', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('length(slug) BETWEEN 2 AND 63', name=op.f('ck_fitted_laws_slug_length')),
    sa.ForeignKeyConstraint(['organization_id'], ['organizations.id'], name=op.f('fk_fitted_laws_organization_id_organizations'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_fitted_laws')),
    sa.UniqueConstraint('organization_id', 'slug', name='uq_fitted_laws_organization_id_slug')
    )
    with op.batch_alter_table('fitted_laws', schema=None) as batch_op:
        batch_op.create_index('ix_fitted_laws_created_at_id', ['created_at', 'id'], unique=False)
        batch_op.create_index('ix_fitted_laws_organization_id_created_at_id', ['organization_id', 'created_at', 'id'], unique=False)

    op.create_table('fit_jobs',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('organization_id', sa.Uuid(), nullable=False),
    sa.Column('slug', sa.String(length=63), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('request', sa.JSON(), nullable=False),
    sa.Column('law_id', sa.Uuid(), nullable=True),
    sa.Column('error', sa.JSON(), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('created_by', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("status IN ('queued', 'running', 'succeeded', 'failed')", name=op.f('ck_fit_jobs_status_known')),
    sa.ForeignKeyConstraint(['law_id'], ['fitted_laws.id'], name=op.f('fk_fit_jobs_law_id_fitted_laws'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['organization_id'], ['organizations.id'], name=op.f('fk_fit_jobs_organization_id_organizations'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_fit_jobs'))
    )
    with op.batch_alter_table('fit_jobs', schema=None) as batch_op:
        batch_op.create_index('ix_fit_jobs_organization_id_slug_pending', ['organization_id', 'slug'], unique=True, sqlite_where=sa.text("status IN ('queued', 'running')"), postgresql_where=sa.text("status IN ('queued', 'running')"))
        batch_op.create_index('ix_fit_jobs_status_lease_expires_at', ['status', 'lease_expires_at'], unique=False)

    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.add_column(sa.Column('law_id', sa.Uuid(), nullable=True))
        batch_op.create_index(batch_op.f('ix_plans_law_id'), ['law_id'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_plans_law_id_fitted_laws'), 'fitted_laws', ['law_id'], ['id'], ondelete='RESTRICT')



def downgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_plans_law_id_fitted_laws'), type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_plans_law_id'))
        batch_op.drop_column('law_id')

    with op.batch_alter_table('fit_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_fit_jobs_status_lease_expires_at')
        batch_op.drop_index('ix_fit_jobs_organization_id_slug_pending', sqlite_where=sa.text("status IN ('queued', 'running')"), postgresql_where=sa.text("status IN ('queued', 'running')"))

    op.drop_table('fit_jobs')
    with op.batch_alter_table('fitted_laws', schema=None) as batch_op:
        batch_op.drop_index('ix_fitted_laws_organization_id_created_at_id')
        batch_op.drop_index('ix_fitted_laws_created_at_id')

    op.drop_table('fitted_laws')

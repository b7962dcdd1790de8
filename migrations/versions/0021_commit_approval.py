"""Approval before large commitments (issue 49).

A budget may name an amount (`budgets.approval_above`, in its currency) above which committing a plan makes
it wait for a finance or admin key: the plan is `pending_approval` and nothing is reserved until it is
approved (then `committed`) or rejected (`rejected`). The plan keeps who asked and who decided, when and why.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 21:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Exact money: NUMERIC on PostgreSQL, integer millionths on SQLite (see service.data.models.Money).
MONEY = sa.Numeric(18, 6).with_variant(sa.BigInteger(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)

revision: str = '0021'
down_revision: str | None = '0020'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PLAN_STATUSES_BEFORE = "status IN ('draft', 'committed', 'running', 'completed', 'failed', 'cancelled')"
PLAN_STATUSES = (
    "status IN ('draft', 'pending_approval', 'rejected', 'committed', 'running', 'completed', 'failed', "
    "'cancelled')"
)


def upgrade() -> None:
    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.add_column(sa.Column('approval_above', MONEY, nullable=True))
        batch_op.create_check_constraint(
            op.f('ck_budgets_approval_above_not_negative'), 'approval_above IS NULL OR approval_above >= 0'
        )
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.add_column(sa.Column('approval_requested_at', UTC_DATETIME, nullable=True))
        batch_op.add_column(sa.Column('approval_requested_by', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('approval_decided_at', UTC_DATETIME, nullable=True))
        batch_op.add_column(sa.Column('approval_decided_by', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('approval_note', sa.String(length=1000), nullable=True))
        batch_op.drop_constraint(op.f('ck_plans_status_known'), type_='check')
        batch_op.create_check_constraint(op.f('ck_plans_status_known'), PLAN_STATUSES)


def downgrade() -> None:
    # Plans waiting for approval go back to drafts; rejected ones to cancelled (what either was before).
    op.execute(sa.text("UPDATE plans SET status = 'draft' WHERE status = 'pending_approval'"))
    op.execute(sa.text("UPDATE plans SET status = 'cancelled' WHERE status = 'rejected'"))
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_plans_status_known'), type_='check')
        batch_op.create_check_constraint(op.f('ck_plans_status_known'), PLAN_STATUSES_BEFORE)
        batch_op.drop_column('approval_note')
        batch_op.drop_column('approval_decided_by')
        batch_op.drop_column('approval_decided_at')
        batch_op.drop_column('approval_requested_by')
        batch_op.drop_column('approval_requested_at')
    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_budgets_approval_above_not_negative'), type_='check')
        batch_op.drop_column('approval_above')

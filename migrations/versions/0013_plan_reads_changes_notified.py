"""PostgreSQL tells the service's processes when what a new plan reads changes (service/workers/change_listener.py).

A new plan reads its organisation, its budget's id and currency, and the organisation's latest calibration
for the hardware (found by the hardware's slug); each process keeps what it read while it hears of every
change. Triggers NOTIFY the channel `plan_reads_changed` (an empty payload: every process forgets every row
it kept) when

* an organisation's row changes or is deleted;
* a budget's currency or organisation changes, or a budget is deleted (not when a commit moves its amounts:
  what a plan does with those it reads afresh);
* a calibration is added, changed or deleted;
* a hardware profile's slug changes, or a profile is deleted;
* any of these tables is truncated.

SQLite has no notifications, and its processes keep nothing: nothing to do there.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 15:10:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0013'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOTIFY = """
CREATE FUNCTION notify_plan_reads_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('plan_reads_changed', '');
    RETURN NULL;
END
$$
"""

# (table, the row events that change what a plan reads)
TRIGGERS = (
    ('organizations', 'UPDATE OR DELETE'),
    ('budgets', 'UPDATE OF id, organization_id, currency OR DELETE'),
    ('calibrations', 'INSERT OR UPDATE OR DELETE'),
    ('hardware_profiles', 'UPDATE OF id, slug OR DELETE'),
)


def upgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    op.execute(NOTIFY)
    for table, events in TRIGGERS:
        op.execute(
            f'CREATE TRIGGER {table}_plan_reads_changed AFTER {events} ON {table} '
            'FOR EACH ROW EXECUTE FUNCTION notify_plan_reads_changed()'
        )
        op.execute(
            f'CREATE TRIGGER {table}_truncated_plan_reads AFTER TRUNCATE ON {table} '
            'FOR EACH STATEMENT EXECUTE FUNCTION notify_plan_reads_changed()'
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    for table, _ in TRIGGERS:
        op.execute(f'DROP TRIGGER {table}_truncated_plan_reads ON {table}')
        op.execute(f'DROP TRIGGER {table}_plan_reads_changed ON {table}')
    op.execute('DROP FUNCTION notify_plan_reads_changed()')

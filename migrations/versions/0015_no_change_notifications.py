"""The processes keep no rows between requests any more: the triggers that told them of changes go (issue 47).

Migrations 0011 and 0013 (PostgreSQL: triggers that NOTIFY `api_key_changed` and `plan_reads_changed`) and
0014 (SQLite: triggers that count the same changes in `change_counters`) served the processes' caches of
verified keys and of what a new plan reads. Measured beside the path without them, those caches did not pay
for the code they took (docs/decisions/0002-write-path.md), and they are gone; so are their triggers, their
functions and SQLite's table. The downgrade puts back what the upgrade drops, as those revisions made it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 06:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0015'
down_revision: str | None = '0014'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# PostgreSQL: (trigger, table, its events, the function it runs), as migrations 0011 and 0013 made them.
POSTGRESQL_TRIGGERS = (
    ('api_key_changed', 'api_keys', 'AFTER UPDATE OR DELETE', 'ROW', 'notify_api_key_changed'),
    ('api_keys_truncated', 'api_keys', 'AFTER TRUNCATE', 'STATEMENT', 'notify_api_key_changed'),
    *(
        (f'{table}_{name}', table, events, level, 'notify_plan_reads_changed')
        for table, row_events in (
            ('organizations', 'UPDATE OR DELETE'),
            ('budgets', 'UPDATE OF id, organization_id, currency OR DELETE'),
            ('calibrations', 'INSERT OR UPDATE OR DELETE'),
            ('hardware_profiles', 'UPDATE OF id, slug OR DELETE'),
        )
        for name, events, level in (
            ('plan_reads_changed', f'AFTER {row_events}', 'ROW'),
            ('truncated_plan_reads', 'AFTER TRUNCATE', 'STATEMENT'),
        )
    ),
)
POSTGRESQL_FUNCTIONS = {
    'notify_api_key_changed': """
CREATE FUNCTION notify_api_key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('api_key_changed', '');
    ELSIF TG_OP = 'DELETE'
        OR (to_jsonb(OLD) - 'last_used_at') IS DISTINCT FROM (to_jsonb(NEW) - 'last_used_at') THEN
        PERFORM pg_notify('api_key_changed', OLD.key_id);
    END IF;
    RETURN NULL;
END
$$
""",
    'notify_plan_reads_changed': """
CREATE FUNCTION notify_plan_reads_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('plan_reads_changed', '');
    RETURN NULL;
END
$$
""",
}

# SQLite: (trigger, its row event, table, the counter it moved), as migration 0014 made them.
API_KEY_COLUMNS = (
    'id', 'key_id', 'secret_hash', 'name', 'role', 'organization_id', 'created_at', 'expires_at', 'revoked_at'
)
SQLITE_TRIGGERS = (
    ('api_keys_updated', f'UPDATE OF {", ".join(API_KEY_COLUMNS)}', 'api_keys', 'api_key_changed'),
    ('api_keys_deleted', 'DELETE', 'api_keys', 'api_key_changed'),
    ('organizations_updated', 'UPDATE', 'organizations', 'plan_reads_changed'),
    ('organizations_deleted', 'DELETE', 'organizations', 'plan_reads_changed'),
    ('budgets_updated', 'UPDATE OF id, organization_id, currency', 'budgets', 'plan_reads_changed'),
    ('budgets_deleted', 'DELETE', 'budgets', 'plan_reads_changed'),
    ('calibrations_inserted', 'INSERT', 'calibrations', 'plan_reads_changed'),
    ('calibrations_updated', 'UPDATE', 'calibrations', 'plan_reads_changed'),
    ('calibrations_deleted', 'DELETE', 'calibrations', 'plan_reads_changed'),
    ('hardware_profiles_updated', 'UPDATE OF id, slug', 'hardware_profiles', 'plan_reads_changed'),
    ('hardware_profiles_deleted', 'DELETE', 'hardware_profiles', 'plan_reads_changed'),
)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == 'postgresql':
        for trigger, table, *_ in POSTGRESQL_TRIGGERS:
            op.execute(f'DROP TRIGGER {trigger} ON {table}')
        for function in POSTGRESQL_FUNCTIONS:
            op.execute(f'DROP FUNCTION {function}()')
    elif dialect == 'sqlite':
        for trigger, *_ in SQLITE_TRIGGERS:
            op.execute(f'DROP TRIGGER {trigger}_counted')
        op.execute('DROP TABLE change_counters')


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == 'postgresql':
        for create in POSTGRESQL_FUNCTIONS.values():
            op.execute(create)
        for trigger, table, events, level, function in POSTGRESQL_TRIGGERS:
            op.execute(
                f'CREATE TRIGGER {trigger} {events} ON {table} FOR EACH {level} EXECUTE FUNCTION {function}()'
            )
    elif dialect == 'sqlite':
        op.execute('CREATE TABLE change_counters (channel VARCHAR(64) PRIMARY KEY, changes INTEGER NOT NULL)')
        op.execute(
            "INSERT INTO change_counters (channel, changes) VALUES ('api_key_changed', 0), ('plan_reads_changed', 0)"
        )
        for trigger, event, table, channel in SQLITE_TRIGGERS:
            op.execute(
                f'CREATE TRIGGER {trigger}_counted AFTER {event} ON {table} FOR EACH ROW BEGIN '
                f"UPDATE change_counters SET changes = changes + 1 WHERE channel = '{channel}'; END"
            )

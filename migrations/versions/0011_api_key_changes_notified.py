"""PostgreSQL tells the service's processes when an API key changes (service/verified_keys.py).

A trigger on `api_keys` NOTIFYs the channel `api_key_changed` with the key's id when its row is deleted or
changes in anything but `last_used_at` (a request's bookkeeping), and with an empty payload when the table
is truncated: each process forgets the keys it verified as the change commits, whoever made it. SQLite has
no notifications, and its processes keep no keys: nothing to do there.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 19:30:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Row triggers for UPDATE and DELETE, a statement trigger for TRUNCATE (which has no rows): one function.
NOTIFY = """
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
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    op.execute(NOTIFY)
    op.execute(
        'CREATE TRIGGER api_key_changed AFTER UPDATE OR DELETE ON api_keys '
        'FOR EACH ROW EXECUTE FUNCTION notify_api_key_changed()'
    )
    op.execute(
        'CREATE TRIGGER api_keys_truncated AFTER TRUNCATE ON api_keys '
        'FOR EACH STATEMENT EXECUTE FUNCTION notify_api_key_changed()'
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    op.execute('DROP TRIGGER api_keys_truncated ON api_keys')
    op.execute('DROP TRIGGER api_key_changed ON api_keys')
    op.execute('DROP FUNCTION notify_api_key_changed()')

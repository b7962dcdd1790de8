"""SQLite counts the changes PostgreSQL notifies, so that its processes may keep rows too
(service/workers/change_listener.py, issue 24).

Without notifications, each SQLite process looked up the key of every request and read a new plan's
organisation, budget and calibration again for every plan: a session, a transaction and a statement each,
0.2 ms of a request's CPU and 0.5 ms of a plan's (bench/RESULTS.md). Here the same changes that notify
PostgreSQL's channels (migrations 0011 and 0013) add one to a counter of the channel's name in
`change_counters`, in the transaction of the change, whoever makes it (the API, the CLI, SQL by hand). A
process reads the counters once per request, before it uses what it keeps, and forgets a channel's rows when
its counter moved.

* `api_key_changed`: a key's row changes in anything but `last_used_at` (a request's bookkeeping), or is
  deleted;
* `plan_reads_changed`: an organisation changes or is deleted; a budget's currency or organisation changes,
  or a budget is deleted (not when a commit moves its amounts); a calibration is added, changed or deleted; a
  hardware profile's slug changes, or a profile is deleted.

SQLite has no TRUNCATE: a DELETE of every row runs the row triggers of a table that has them. PostgreSQL has
its notifications: nothing to do there.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 17:30:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0014'
down_revision: str | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYS = 'api_key_changed'
PLAN_READS = 'plan_reads_changed'
# Every column of api_keys but last_used_at, as this revision leaves the table: a migration that adds a
# column to api_keys must add it here too, in a trigger of its own (tests/integration/test_change_counters.py
# compares this list with the model).
API_KEY_COLUMNS = (
    'id', 'key_id', 'secret_hash', 'name', 'role', 'organization_id', 'created_at', 'expires_at', 'revoked_at'
)
# (trigger, the row event, its table, the channel whose counter moves)
TRIGGERS = (
    ('api_keys_updated', f'UPDATE OF {", ".join(API_KEY_COLUMNS)}', 'api_keys', KEYS),
    ('api_keys_deleted', 'DELETE', 'api_keys', KEYS),
    ('organizations_updated', 'UPDATE', 'organizations', PLAN_READS),
    ('organizations_deleted', 'DELETE', 'organizations', PLAN_READS),
    ('budgets_updated', 'UPDATE OF id, organization_id, currency', 'budgets', PLAN_READS),
    ('budgets_deleted', 'DELETE', 'budgets', PLAN_READS),
    ('calibrations_inserted', 'INSERT', 'calibrations', PLAN_READS),
    ('calibrations_updated', 'UPDATE', 'calibrations', PLAN_READS),
    ('calibrations_deleted', 'DELETE', 'calibrations', PLAN_READS),
    ('hardware_profiles_updated', 'UPDATE OF id, slug', 'hardware_profiles', PLAN_READS),
    ('hardware_profiles_deleted', 'DELETE', 'hardware_profiles', PLAN_READS),
)


def upgrade() -> None:
    if op.get_bind().dialect.name != 'sqlite':
        return
    op.execute('CREATE TABLE change_counters (channel VARCHAR(64) PRIMARY KEY, changes INTEGER NOT NULL)')
    op.execute(f"INSERT INTO change_counters (channel, changes) VALUES ('{KEYS}', 0), ('{PLAN_READS}', 0)")
    for name, event, table, channel in TRIGGERS:
        op.execute(
            f'CREATE TRIGGER {name}_counted AFTER {event} ON {table} FOR EACH ROW BEGIN '
            f"UPDATE change_counters SET changes = changes + 1 WHERE channel = '{channel}'; END"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != 'sqlite':
        return
    for name, *_ in TRIGGERS:
        op.execute(f'DROP TRIGGER {name}_counted')
    op.execute('DROP TABLE change_counters')

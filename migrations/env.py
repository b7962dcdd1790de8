"""Alembic environment: always handed a connection by service.infra.migrate (no URL of its own to get
wrong)."""

from alembic import context

from service.data.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("Run migrations through `flask --app service db upgrade` (service.infra.migrate).")

# SQLite's change counters (migration 0014) are its triggers' bookkeeping for the processes' caches, not a
# model: PostgreSQL notifies instead and has no such table.
SQLITE_ONLY_TABLES = {"change_counters"}


def include_name(name, type_, _parent_names):
    return not (type_ == "table" and name in SQLITE_ONLY_TABLES)


context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    include_name=include_name,
    # SQLite cannot ALTER most things in place: batch mode rebuilds the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

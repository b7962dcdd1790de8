"""Alembic environment: always handed a connection by service.infra.migrate (no URL of its own to get
wrong)."""

from alembic import context

from service.data.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("Run migrations through `flask --app service db upgrade` (service.infra.migrate).")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things in place: batch mode rebuilds the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

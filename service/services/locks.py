"""Cross-process locks held for the length of a transaction."""

from __future__ import annotations

from sqlalchemy import Connection, text

# Arbitrary, fixed: every process that sets up the database takes the same advisory lock.
_SETUP_LOCK_KEY = 7_236_066_151  # "planner" in no particular encoding; only uniqueness matters


def hold_setup_lock(connection: Connection) -> None:
    """Serialise database setup (migrations, built-in data) across processes and hosts until commit.

    PostgreSQL: a transaction-scoped advisory lock, so that two `make run`s starting together do not both
    create the same tables. SQLite needs nothing: its transactions begin IMMEDIATE and hold the write lock.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SETUP_LOCK_KEY})

"""Cross-process locks held for the length of a transaction. Below the use cases: migrating a database
(service/infra/migrate.py) takes the setup lock too."""

from __future__ import annotations

import hashlib

from sqlalchemy import Boolean, ColumnElement, Connection, func, text, true

# Arbitrary, fixed: every process that sets up the database takes the same advisory lock.
_SETUP_LOCK_KEY = 7_236_066_151  # "planner" in no particular encoding; only uniqueness matters


def hold_setup_lock(connection: Connection) -> None:
    """Serialise database setup (migrations, built-in data) across processes and hosts until commit.

    PostgreSQL: a transaction-scoped advisory lock, so that two `make run`s starting together do not both
    create the same tables. SQLite needs nothing: its transactions begin IMMEDIATE and hold the write lock.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SETUP_LOCK_KEY})


def try_transaction_lock(dialect: str, key: ColumnElement[int]) -> ColumnElement[bool]:
    """An expression that takes the lock `key` (`lock_key` of its name) until the transaction ends, without
    waiting: false if another holds it. An expression rather than a statement, so that the statement that
    needs the lock (a read of what it guards, say) takes it without a round trip of its own; `key` may be a
    bound parameter, so that the statement is built once.

    PostgreSQL: a transaction-scoped advisory lock on the 64-bit key. SQLite: true, since a writing
    transaction there already holds the database's write lock (BEGIN IMMEDIATE).
    """
    if dialect != "postgresql":
        return true()
    return func.pg_try_advisory_xact_lock(key, type_=Boolean)


def lock_key(name: str) -> int:
    """The 64-bit key of the lock named `name`: a hash of it."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)

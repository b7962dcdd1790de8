"""Is the database reachable, and is its schema the one this code expects?"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker


@dataclass(frozen=True)
class Readiness:
    ready: bool
    database: str
    schema_revision: str | None


def expected_head(migrations_dir: Path) -> str | None:
    return ScriptDirectory(str(migrations_dir)).get_current_head()


def check_readiness(sessions: sessionmaker[Session], head: str | None) -> Readiness:
    """Opens its own session, so that failing to connect is an answer rather than an error."""
    try:
        with sessions() as session:
            connection = session.connection()
            connection.execute(text("SELECT 1"))
            current = MigrationContext.configure(connection).get_current_heads()
    except SQLAlchemyError as exc:
        return Readiness(False, f"unreachable: {type(exc).__name__}", None)
    revision = current[0] if len(current) == 1 else None
    if revision != head:
        return Readiness(False, f"schema at {current or 'no revision'}, expected {head}", revision)
    return Readiness(True, "ok", revision)

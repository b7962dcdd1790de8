"""Work a transaction asks for once it has committed, and drops if it rolls back: a metric counted, a
background thread woken. The one place the service listens to every session's commits and rollbacks."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

_PENDING = "after_commit.pending"  # session.info: what the transaction under way asked for


def on_commit(session: Session, action: Callable[[], object]) -> None:
    """Run `action` when `session`'s transaction commits; never if it rolls back."""
    session.info.setdefault(_PENDING, []).append(action)


@event.listens_for(Session, "after_commit")
def _run(session: Session) -> None:
    for action in session.info.pop(_PENDING, ()):
        action()


@event.listens_for(Session, "after_soft_rollback")
def _drop(session: Session, previous_transaction: SessionTransaction) -> None:
    if previous_transaction.parent is None:  # the whole transaction, not a savepoint within it
        session.info.pop(_PENDING, None)

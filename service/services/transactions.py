"""Where a use case's transaction ends: committed once, or rolled back whole.

`run_once` runs a use case that may come with an idempotency key (the API's Idempotency-Key header, the
console's form token): the key's claim, what the use case writes and the response to replay to its retries
are one transaction. `commit_or` commits a use case that says what a constraint refusing it means.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from service.data.models import HardwareProfile, Offer, Organization, utcnow
from service.services import idempotency
from service.services.errors import ConflictError, ServiceError

log = logging.getLogger(__name__)

Outcome = TypeVar("Outcome")


def run_once(
    session: Session,
    act: Callable[[], Outcome],
    *,
    key: idempotency.RequestKey | None,
    record: Callable[[Outcome], idempotency.StoredResponse],
    replay: Callable[[idempotency.StoredResponse], Outcome],
) -> Outcome:
    """Run the use case `act` once per `key` and commit what it wrote together with `record(outcome)`, the
    response the request's retries will get.

    A retry writes nothing: its transaction is rolled back and what `replay` makes of the stored response
    is returned instead. Without a key, `act` runs and commits with nothing remembered. On any exception
    (a refusal of the use case, a key in use, a commit the database refuses) the transaction is rolled
    back before the exception goes on, so no claim outlives a request that failed: its retry is evaluated
    afresh.
    """
    try:
        now = utcnow()
        if key is not None:
            stored = idempotency.claim(session, key, now)
            if stored is not None:
                session.rollback()  # the request writes nothing: its response is the stored one
                return replay(stored)
        outcome = act()
        if key is not None:
            idempotency.store(session, record(outcome), key, now)
        session.commit()
    except BaseException:
        _roll_back(session)
        raise
    return outcome


def commit_or(
    session: Session,
    on_conflict: ServiceError | Callable[[IntegrityError], ServiceError | None] | None,
) -> bool:
    """Commit; True when committed. When a constraint refuses the commit (a concurrent request changed a
    row between the use case's check and its write), the transaction is rolled back and then

    * `on_conflict`, an error, is raised;
    * `on_conflict`, a function, is given the violation and returns the error to raise in its place, or
      None for a violation it does not know, which is raised as it is;
    * `on_conflict` None: the violation is expected and harmless (someone else wrote the same); False.
    """
    try:
        session.commit()
    except IntegrityError as violation:
        session.rollback()
        if on_conflict is None:
            return False
        refusal = on_conflict(violation) if callable(on_conflict) else on_conflict
        if refusal is None:
            raise
        raise refusal from None
    return True


def commit_new(
    session: Session, model: type[HardwareProfile] | type[Offer] | type[Organization], slug: str, kind: str
) -> None:
    """Commit a new object; a slug already taken (perhaps by a concurrent request) is a 409 that names it.

    `kind` starts the message: "An organization", "A hardware profile".
    """

    def taken(_violation: IntegrityError) -> ConflictError | None:
        if session.scalar(select(model.id).where(model.slug == slug)) is None:
            return None
        return ConflictError(f"{kind} with slug {slug!r} already exists.")

    commit_or(session, taken)


def _roll_back(session: Session) -> None:
    """Roll back; a rollback that fails (the database went away) must not hide the error that called for it.
    The session's close at the end of the request tries again."""
    try:
        session.rollback()
    except SQLAlchemyError as error:
        log.warning("transaction not rolled back", extra={"error_type": type(error).__name__})

"""Committing a newly created object whose slug must be unique."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.services.errors import ConflictError


def commit_new(session: Session, model: type, slug: str, kind: str) -> None:
    """Commit; a slug already taken (perhaps by a concurrent request) is a 409 that names it.

    `kind` starts the message: "An organization", "A hardware profile".
    """
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        if session.scalar(select(model.id).where(model.slug == slug)) is not None:
            raise ConflictError(f"{kind} with slug {slug!r} already exists.") from None
        raise

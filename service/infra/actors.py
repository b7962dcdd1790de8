"""Who acts in a session: the caller's key id (never a secret) and the request's id, kept in `session.info`
where the session is opened (per request, or by a command), and recorded by the audit log, the ledger and
plans. Below the use cases, so that whatever opens a session can say who acts without importing them."""

from __future__ import annotations

from sqlalchemy.orm import Session

SYSTEM = "system"  # who acts when nobody said: a job, a migration


def act_as(session: Session, actor: str, request_id: str | None = None) -> Session:
    session.info["actor"] = actor
    session.info["request_id"] = request_id
    return session


def actor(session: Session) -> str:
    return str(session.info.get("actor", SYSTEM))


def request_id(session: Session) -> str | None:
    found = session.info.get("request_id")
    return None if found is None else str(found)

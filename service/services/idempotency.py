"""Idempotency keys (IETF httpapi draft "The Idempotency-Key HTTP Header Field").

A request sent with a key is processed once; its successful response is stored with the key, in the same
transaction as what the request wrote, and replayed to every retry. The key belongs to the caller (the API
key id), expires after `KEY_LIFETIME`, and is bound to the request it first came with by a fingerprint of
its method, path and canonical body. Expired keys of others are left to service/idempotency_purger.py, off
the requests' path.

Failures are not stored: a request refused as invalid or conflicting leaves nothing behind, and its retry
is evaluated afresh (a body that was invalid stays invalid; a commit refused for want of budget may pass
once the budget allows it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service import locks
from service.models import IdempotencyRecord
from service.services.errors import InProgressError, KeyReusedError

KEY_LIFETIME = timedelta(hours=24)
MAX_KEY_LENGTH = 255


@dataclass(frozen=True)
class RequestKey:
    """The key a request came with, whose it is (an API key id), and the request (its `fingerprint`)."""

    principal: str
    key: str
    fingerprint: str


@dataclass(frozen=True)
class StoredResponse:
    status_code: int
    body: str
    headers: dict[str, str]


def is_valid_key(key: str) -> bool:
    """1 to MAX_KEY_LENGTH visible ASCII characters (a UUID, say)."""
    return 1 <= len(key) <= MAX_KEY_LENGTH and all(33 <= ord(c) <= 126 for c in key)


def fingerprint(method: str, path: str, body: bytes) -> str:
    """Hash of the request; the body canonically (key order and whitespace do not matter) when it is JSON."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, RecursionError):
        canonical = body
    return hashlib.sha256(b"\0".join((method.encode(), path.encode(), canonical))).hexdigest()


def claim(session: Session, key: RequestKey, now: datetime) -> StoredResponse | None:
    """Take `key` for its request, or return the response to replay.

    Raises InProgressError while another request holds the key, KeyReusedError for another request's key.
    The claim is a row inserted in the caller's transaction: it becomes visible only with what the request
    writes, and vanishes with it on rollback. A request given a response to replay writes nothing: its
    caller rolls back (services/transactions.run_once does all of this).
    """
    if not locks.try_transaction_lock(session.connection(), f"idempotency:{key.principal}:{key.key}"):
        raise _in_progress()
    mine = _of(key)
    session.execute(delete(IdempotencyRecord).where(*mine, IdempotencyRecord.expires_at <= now))
    record = session.scalars(select(IdempotencyRecord).where(*mine)).first()
    if record is not None:
        if record.fingerprint != key.fingerprint:
            raise _reused()
        if record.status_code is None:  # only visible if a transaction committed a claim unfinished
            raise _in_progress()
        return StoredResponse(record.status_code, record.body or "", dict(record.headers))
    insert = (postgresql if session.get_bind().dialect.name == "postgresql" else sqlite).insert
    claimed = session.execute(
        insert(IdempotencyRecord)
        .values(
            principal=key.principal,
            key=key.key,
            fingerprint=key.fingerprint,
            headers={},
            created_at=now,
            expires_at=now + KEY_LIFETIME,
        )
        .on_conflict_do_nothing(index_elements=["principal", "key"])
        .returning(IdempotencyRecord.id)
    ).first()
    if claimed is None:  # a concurrent request took the key between our lookup and our insert
        raise _in_progress()
    return None


def stored_response(session: Session, key: RequestKey, now: datetime) -> StoredResponse | None:
    """The finished response to replay for `key`, if there is one, read without claiming anything (and so
    without a write lock): for requests that do slow work before they claim their key."""
    record = session.scalars(
        select(IdempotencyRecord).where(*_of(key), IdempotencyRecord.expires_at > now)
    ).first()
    if record is None or record.status_code is None:  # no such key, or its request is still running
        return None
    if record.fingerprint != key.fingerprint:
        raise _reused()
    return StoredResponse(record.status_code, record.body or "", dict(record.headers))


def store(session: Session, response: StoredResponse, key: RequestKey) -> None:
    """Keep `response` with the claimed `key` for its retries, to be committed with what the request wrote."""
    session.execute(
        update(IdempotencyRecord)
        .where(*_of(key))
        .values(status_code=response.status_code, body=response.body, headers=response.headers)
    )


def any_expired(session: Session, now: datetime) -> bool:
    return session.scalar(select(IdempotencyRecord.id).where(_expired(now)).limit(1)) is not None


def purge_expired(session: Session, now: datetime, limit: int) -> int:
    """Delete up to `limit` keys expired at `now`; how many. Rows another transaction is deleting or
    replacing are skipped (PostgreSQL), never waited for."""
    expired = select(IdempotencyRecord.id).where(_expired(now)).limit(limit).with_for_update(skip_locked=True)
    deleted = session.scalars(
        delete(IdempotencyRecord)
        .where(IdempotencyRecord.id.in_(expired.scalar_subquery()))
        .returning(IdempotencyRecord.id)
    ).all()
    return len(deleted)


def _of(key: RequestKey) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    return IdempotencyRecord.principal == key.principal, IdempotencyRecord.key == key.key


def _expired(now: datetime) -> ColumnElement[bool]:
    return IdempotencyRecord.expires_at <= now


def _reused() -> KeyReusedError:
    return KeyReusedError(
        "This Idempotency-Key was used for a different request (another body or path); "
        "use a new key for a new request."
    )


def _in_progress() -> InProgressError:
    return InProgressError("A request with this Idempotency-Key is in progress; retry after it finishes.")

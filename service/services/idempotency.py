"""Idempotency keys (IETF httpapi draft "The Idempotency-Key HTTP Header Field").

A request sent with a key is processed once; its successful response is stored with the key, in the same
transaction as what the request wrote, and replayed to every retry. The key belongs to the caller (the API
key id), expires after `KEY_LIFETIME`, and is bound to the request it first came with by a fingerprint of
its method, path and canonical body.

A request with a fresh key costs two statements besides its own: `claim` takes the key's lock and reads its
record in one, `store` writes the record, response included, in the other.
Expired keys of others are left to service/workers/idempotency_purger.py, off the requests' path.

Failures are not stored: a request refused as invalid or conflicting leaves nothing behind, and its retry
is evaluated afresh (a body that was invalid stays invalid; a commit refused for want of budget may pass
once the budget allows it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    and_,
    bindparam,
    delete,
    literal,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.util.typing import TupleAny, Unpack

from service.data.models import IdempotencyRecord, table_of
from service.infra import locks
from service.services.errors import InProgressError, KeyReusedError

KEY_LIFETIME = timedelta(hours=24)
IDEMPOTENCY_KEYS = table_of(IdempotencyRecord)
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
    """Take `key` for its request until the transaction ends, or return the response to replay.

    Raises InProgressError while another request holds the key, KeyReusedError for another request's key.
    Nothing is written: the lock keeps a concurrent request with the same key out (on SQLite, the write lock
    that BEGIN IMMEDIATE took), and `store` writes the key's record once the request has its response. A
    request given a response to replay writes nothing either: its caller rolls back
    (services/transactions.run_once does all of this).
    """
    dialect = session.get_bind().dialect.name
    found = session.execute(_claim_statement(dialect), _claim_parameters(key)).first()
    assert found is not None, "the claim selects one row, with or without a record"
    return _answer(found, key, now)


def lock_of(key: RequestKey) -> int:
    """The advisory lock (PostgreSQL) a request holds while it claims `key`."""
    return locks.lock_key(f"idempotency:{key.principal}:{key.key}")


def _claim_parameters(key: RequestKey) -> dict[str, object]:
    return {
        "lock": lock_of(key),
        "principal": key.principal,
        "key": key.key,
    }


def _answer(found: Sequence[Any], key: RequestKey, now: datetime) -> StoredResponse | None:
    """What a claim that read `found` (its lock, and the key's record or nulls) means: None when the key is
    free, the response to replay, or the errors `claim` raises."""
    locked, record_id, fingerprint_, status_code, body, headers, expires_at = found
    if not locked:
        raise _in_progress()
    if record_id is None or expires_at <= now:  # a fresh key, or one expired: `store` replaces it
        return None
    if fingerprint_ != key.fingerprint:
        raise _reused()
    if status_code is None:  # a record without its response: taken for a request still running
        raise _in_progress()
    return StoredResponse(status_code, body or "", dict(headers))


@functools.cache
def _claim_statement(dialect: str) -> Select[Unpack[TupleAny]]:
    """The key's lock taken and its record read in one statement: a one-row select joined to the record, so
    that the lock is taken whether or not there is one. Built once per dialect."""
    one_row = select(literal(1).label("one")).subquery()
    records = IDEMPOTENCY_KEYS.c
    return (
        select(
            locks.try_transaction_lock(dialect, bindparam("lock", type_=BigInteger)).label("locked"),
            records.id,
            records.fingerprint,
            records.status_code,
            records.body,
            records.headers,
            records.expires_at,
        )
        .select_from(one_row)
        .outerjoin(
            IDEMPOTENCY_KEYS,
            and_(records.principal == bindparam("principal"), records.key == bindparam("key")),
        )
    )


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


def store(session: Session, response: StoredResponse, key: RequestKey, now: datetime) -> None:
    """Keep `response` with the `key` claimed at `now` for its retries, to be committed with what the request
    wrote: a new record, or one in place of the key's expired record.

    Raises InProgressError when the key has a live record after all. On PostgreSQL the claim's snapshot is
    taken as its statement starts, just before the lock: a request with the same key that committed in
    between left a record the claim did not see. Its retry will replay it.
    """
    stored = session.execute(
        _upsert(session.get_bind().dialect.name), {**_record(response, key, now), "now": now}
    ).first()
    if stored is None:
        raise _in_progress()


def _record(response: StoredResponse, key: RequestKey, now: datetime) -> dict[str, object]:
    """The key's record, kept with `response` from `now`: its columns' values."""
    return {
        "id": uuid.uuid4(),
        "principal": key.principal,
        "key": key.key,
        "fingerprint": key.fingerprint,
        "status_code": response.status_code,
        "body": response.body,
        "headers": response.headers,
        "created_at": now,
        "expires_at": now + KEY_LIFETIME,
    }


@functools.cache
def _upsert(dialect_name: str) -> ReturningInsert[Unpack[TupleAny]]:
    """`store`'s statement, built once per dialect and given each record's values when run."""
    insert = (
        postgresql.insert(IDEMPOTENCY_KEYS)
        if dialect_name == "postgresql"
        else sqlite.insert(IDEMPOTENCY_KEYS)
    )
    return _replacing_expired(insert)


def _replacing_expired(insert: postgresql.Insert | sqlite.Insert) -> ReturningInsert[Unpack[TupleAny]]:
    """`insert` of a key's record, replacing the key's record only when that expired (`now`): the id of the
    record written, none when the key has a live record."""
    table = IDEMPOTENCY_KEYS
    replaced = ("fingerprint", "status_code", "body", "headers", "created_at", "expires_at")
    return insert.on_conflict_do_update(
        index_elements=[table.c.principal, table.c.key],
        set_={name: insert.excluded[name] for name in replaced},
        where=table.c.expires_at <= bindparam("now"),
    ).returning(table.c.id)


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

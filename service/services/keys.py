"""API keys: `cpk_<key id>_<secret>`. Only a SHA-256 of the secret is stored; the full key is shown once.

256 random bits need no slow key-derivation function: nobody can guess them, and a fast hash is enough
to keep a database dump from turning into working keys.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, selectinload

from service.data.models import ApiKey, utcnow
from service.services import organizations
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from service.services.pagination import Cursor, Page, paginate
from service.services.transactions import commit_or

PREFIX = "cpk"
ROLES = ("admin", "planner", "finance", "viewer")
_KEY_FORMAT = re.compile(rf"^{PREFIX}_([a-z0-9]{{4,32}})_([A-Za-z0-9_-]{{16,128}})$")
# How stale last_used_at may get before a request refreshes it (a write per request would serialise reads).
LAST_USED_RESOLUTION = 60  # seconds


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's id (never its secret), role and organisation (None for admins)."""

    key_id: str
    role: str
    organization_id: uuid.UUID | None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True, kw_only=True)
class NewKey:
    """A key to issue (what ApiKeySchema loads)."""

    name: str
    role: str
    organization_slug: str | None = None  # none for an admin key; one for every other role
    expires_at: datetime | None = None  # None: never


def parse(key: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed key, or None."""
    match = _KEY_FORMAT.match(key)
    return (match.group(1), match.group(2)) if match else None


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def authenticate(session: Session, key: str, now: datetime | None = None) -> tuple[Principal, bool] | None:
    """The principal a presented key stands for, and whether its last_used_at is due a refresh; None when
    the key is malformed, unknown, wrong, revoked or expired. All failures look alike to the caller."""
    parsed = parse(key)
    if parsed is None:
        return None
    key_id, secret = parsed
    stored = session.scalar(select(ApiKey).where(ApiKey.key_id == key_id))
    # Compare a digest even for unknown ids, so that timing does not tell which ids exist.
    expected = stored.secret_hash if stored is not None else digest("")
    if not hmac.compare_digest(digest(secret), expected) or stored is None:
        return None
    now = now or utcnow()
    if stored.revoked_at is not None or (stored.expires_at is not None and stored.expires_at <= now):
        return None
    last_used_at = stored.last_used_at
    stale = last_used_at is None or (now - last_used_at).total_seconds() > LAST_USED_RESOLUTION
    return Principal(key_id, stored.role, stored.organization_id), stale


def touch(session: Session, key_id: str, now: datetime | None = None) -> None:
    """Record that a key was used, unless another request already did within LAST_USED_RESOLUTION."""
    now = now or utcnow()
    threshold = now - timedelta(seconds=LAST_USED_RESOLUTION)
    session.execute(
        update(ApiKey)
        .where(ApiKey.key_id == key_id, or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at < threshold))
        .values(last_used_at=now)
    )
    session.commit()


def create_key(session: Session, new: NewKey) -> ApiKey:
    """A new key. Admin keys belong to no organisation; every other role to exactly one.

    The returned record carries the full key in `key`, an attribute that is not a column: it exists for
    the one response that shows it, and is never stored.
    """
    role = new.role
    if new.expires_at is not None and new.expires_at <= utcnow():
        raise InvalidFieldError("expires_at", "Must be in the future: the key would never work.")
    organization = None
    if role == "admin":
        if new.organization_slug:
            raise InvalidFieldError("organization", "Admin keys belong to no organization; leave it out.")
    else:
        if not new.organization_slug:
            raise InvalidFieldError("organization", f"Required for a {role} key.")
        organization = organizations.named_in_body(session, new.organization_slug, scope=None)
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    record = ApiKey(
        key_id=key_id,
        secret_hash=digest(secret),
        name=new.name,
        role=role,
        organization=organization,
        expires_at=new.expires_at,
    )
    session.add(record)
    session.commit()
    record.key = f"{PREFIX}_{key_id}_{secret}"
    return record


def ensure_bootstrap_admin_key(session: Session, key: str) -> ApiKey:
    """Make the admin key `key` (PLANNER_ADMIN_KEY) exist, stored hashed; idempotent across restarts.

    Only ever inserts: a bootstrap key that an admin revoked (or let expire) stays revoked, whatever the
    environment says at the next start.
    """
    parsed = parse(key)
    if parsed is None:
        raise ValueError(
            f"PLANNER_ADMIN_KEY must look like {PREFIX}_<4-32 of a-z 0-9>_<16+ of A-Z a-z 0-9 _ ->"
        )
    key_id, secret = parsed
    record = session.scalars(select(ApiKey).where(ApiKey.key_id == key_id)).first()
    if record is not None:
        if not hmac.compare_digest(record.secret_hash, digest(secret)):
            raise ValueError(f"PLANNER_ADMIN_KEY: key {key_id} exists with another secret; choose another id")
        return record
    record = ApiKey(
        key_id=key_id, secret_hash=digest(secret), name="bootstrap admin (PLANNER_ADMIN_KEY)", role="admin"
    )
    session.add(record)
    commit_or(session, on_conflict=None)  # None: another process bootstrapping the same key meanwhile is fine
    return record


def list_keys(session: Session, *, limit: int, after: Cursor | None) -> Page[ApiKey]:
    stmt = select(ApiKey).options(selectinload(ApiKey.organization))
    return paginate(session, stmt, ApiKey, limit, after)


def revoke_key(session: Session, key_uuid: uuid.UUID, *, caller: Principal) -> None:
    """Revoke a key: the next request that presents it is refused."""
    record = session.get(ApiKey, key_uuid)
    if record is None:
        raise NotFoundError(f"No API key {key_uuid}.")
    if record.key_id == caller.key_id:
        raise ConflictError("A key cannot revoke itself; use another admin key.")
    if record.revoked_at is None:
        record.revoked_at = utcnow()
        session.commit()

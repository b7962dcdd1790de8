"""Keyset pagination, newest first, on (created_at, id): stable under inserts and cheap at any depth."""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Generic, Protocol, TypeVar, TypeVarTuple

from sqlalchemy import ColumnElement, FromClause, Row, Select, literal, tuple_
from sqlalchemy.orm import Mapped, QueryableAttribute, Session

MAX_LIMIT = 100
DEFAULT_LIMIT = 20


# A cursor is 24 bytes in base64url, 32 characters without padding: the time in microseconds since the Unix
# epoch (signed, big-endian), then the id. Every string of that shape is a position, so the description can
# state it (`CURSOR_PATTERN`) and the server takes whatever the pattern admits: a time before or after any
# a datetime holds is clamped to the first or last one (a position before or after every item).
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{32}$"
_POSITION = struct.Struct(">q16s")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)
_MICROSECONDS = timedelta(microseconds=1)


@dataclass(frozen=True)
class Cursor:
    """Position after the last item of a page."""

    created_at: datetime
    id: uuid.UUID

    def encode(self) -> str:
        microseconds = (self.created_at - _EPOCH) // _MICROSECONDS
        return base64.urlsafe_b64encode(_POSITION.pack(microseconds, self.id.bytes)).decode()

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """Raises ValueError for anything that is neither of CURSOR_PATTERN's shape nor a cursor in its
        earlier form, base64url JSON (read still: a client paging through an upgrade is not refused)."""
        if re.fullmatch(CURSOR_PATTERN, token):
            microseconds, id_ = _POSITION.unpack(base64.urlsafe_b64decode(token))
            earliest, latest = (int((end - _EPOCH) // _MICROSECONDS) for end in (_EARLIEST, _LATEST))
            moment = _EPOCH + timedelta(microseconds=min(max(microseconds, earliest), latest))
            return cls(moment, uuid.UUID(bytes=id_))
        if not re.fullmatch(r"[A-Za-z0-9_-]+", token):  # b64decode would skip other characters
            raise ValueError("Not a valid cursor.")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            created_at, id_ = json.loads(raw)
            if not (isinstance(created_at, str) and isinstance(id_, str)):
                raise TypeError("cursor members must be strings")
            moment = datetime.fromisoformat(created_at)
            if moment.tzinfo is None:
                raise ValueError("cursor time has no offset")
            return cls(moment.astimezone(UTC), uuid.UUID(id_))
        except (binascii.Error, ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise ValueError("Not a valid cursor.") from exc


class Paged(Protocol):
    """A model that can be listed a page at a time: keyed by `id` after its time column (see paginate)."""

    # A class attribute, as on every mapped class: the column on the class, the value on an instance.
    id: ClassVar[Mapped[uuid.UUID]]


Item = TypeVar("Item", bound=Paged)
Columns = TypeVarTuple("Columns")
Listed = TypeVar("Listed")  # what a page holds: entities of a Paged model, or rows of some of its columns


@dataclass(frozen=True)
class Page(Generic[Listed]):
    items: list[Listed]
    next_cursor: str | None


def paginate(
    session: Session,
    stmt: Select[Item],
    model: type[Item],
    limit: int,
    after: Cursor | None,
    *,
    time: str = "created_at",
) -> Page[Item]:
    """Run `stmt` (a select of `model`) one page at a time, newest first by `model.<time>` then `model.id`."""
    paged = _page_of(stmt, getattr(model, time), model.id, limit, after)
    return _page(list(session.scalars(paged)), limit, time)


def paginate_rows(
    session: Session,
    stmt: Select[*tuple[Any, ...]],
    table: FromClause,
    limit: int,
    after: Cursor | None,
    *,
    time: str = "created_at",
) -> Page[Row[Any]]:
    """As paginate, for a Core select of some of `table`'s columns (its `time` and `id` among them, under
    those names): rows, for lists that show a few columns and need none of what loading entities costs.

    Core all the way, on the session's connection: with the ORM's columns, or through the ORM's execute,
    each page rebuilt a processor for every column, and matched the cached statement's columns to the new
    statement's one by one, a millisecond of a 100-row page (issue 24). Nor is the session flushed first:
    lists are read by GETs, with nothing pending."""
    columns = table.c
    paged = _page_of(stmt, columns[time], columns.id, limit, after)
    return _page(list(session.connection().execute(paged).all()), limit, time)


def _page_of(
    stmt: Select[*Columns],
    moment: ColumnElement[datetime] | QueryableAttribute[datetime],
    id_: ColumnElement[uuid.UUID] | QueryableAttribute[uuid.UUID],
    limit: int,
    after: Cursor | None,
) -> Select[*Columns]:
    if after is not None:
        # A row value, not `t < :t OR (t = :t AND id < :id)`: both databases seek an index on (t, id) to it,
        # where the OR form makes them read and discard every row above the cursor (slower the deeper).
        stmt = stmt.where(
            tuple_(moment, id_) < tuple_(literal(after.created_at, moment.type), literal(after.id, id_.type))
        )
    return stmt.order_by(moment.desc(), id_.desc()).limit(limit + 1)


def _page(rows: list[Listed], limit: int, time: str) -> Page[Listed]:
    """The first `limit` rows (one more was asked for: whether there is a next page)."""
    items = rows[:limit]
    if len(rows) <= limit:
        return Page(items, None)
    last: Any = items[-1]  # an entity or a row: either has the time and the id as attributes
    return Page(items, Cursor(getattr(last, time), last.id).encode())

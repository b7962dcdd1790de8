"""The events feed (GET /v1/events): an organisation's events in the order they were committed, read a page
at a time by pollers that move forward.

Unlike the other lists, which are newest first for people browsing history, the feed is oldest first: a
poller resumes where it stopped and must see every event once, in order. Its cursor is the last event id
considered, and every page carries one, even an empty page: the poller stores it and asks again later.

Why "considered" and not "returned": ids are taken from the "events" counter row by transactions that hold
its lock until they commit (service/services/events.py), so the events visible at any moment are exactly
those with ids up to the highest one visible: no event with a smaller id can be committed later. A page that
reaches the end of what is visible may therefore move the cursor to that highest id, past events the filters
left out, and a poller filtering for a rare type does not scan the same events again on every poll. The
highest id is read before the page, so the page never holds an event committed after it was taken.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from service.data.models import Event, Organization
from service.services.errors import NotFoundError

_LARGEST_ID = 2**63 - 1  # events.id is a BIGINT: larger ids exist nowhere (and PostgreSQL refuses them)


# The feed's cursor is the id it stands after, in decimal: every string of this shape is one (ids stay far
# below 10^18), so the description states it and the server takes whatever it admits.
FEED_CURSOR_PATTERN = r"^[0-9]{1,18}$"


@dataclass(frozen=True)
class FeedCursor:
    """Where a poller stands: after the event `after_id` (0: before the first)."""

    after_id: int

    # Cursors of the earlier form, tagged JSON in base64url (["events", id]): pollers store theirs, so
    # they are read still; the tag refuses another list's cursor rather than misread it.
    _TAG = "events"

    def encode(self) -> str:
        return str(self.after_id)

    @classmethod
    def decode(cls, token: str) -> FeedCursor:
        """Raises ValueError for anything that is neither of FEED_CURSOR_PATTERN's shape nor a cursor of the
        feed in its earlier form."""
        if re.fullmatch(FEED_CURSOR_PATTERN, token):
            return cls(int(token))
        if not re.fullmatch(r"[A-Za-z0-9_-]+", token):  # b64decode would skip other characters
            raise ValueError("Not a valid cursor.")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            tag, after_id = json.loads(raw)
        except (binascii.Error, ValueError, TypeError, RecursionError) as exc:
            raise ValueError("Not a valid cursor.") from exc
        if tag != cls._TAG or type(after_id) is not int or not 0 <= after_id <= _LARGEST_ID:
            raise ValueError("Not a valid cursor.")
        return cls(after_id)


@dataclass(frozen=True)
class FeedEvent:
    """An event as the API shows it (and webhooks send it)."""

    id: int
    type: str
    subject_type: str
    subject_id: str
    organization_slug: str
    data: dict[str, Any]
    created_at: datetime

    @property
    def subject(self) -> dict[str, str]:
        return {"type": self.subject_type, "id": self.subject_id}

    @classmethod
    def of(cls, event: Event, organization_slug: str) -> FeedEvent:
        return cls(
            id=event.id,
            type=event.type,
            subject_type=event.subject_type,
            subject_id=event.subject_id,
            organization_slug=organization_slug,
            data=event.data,
            created_at=event.created_at,
        )


@dataclass(frozen=True)
class FeedPage:
    items: list[FeedEvent]
    next_cursor: str  # never None: where the next poll starts
    has_more: bool  # more events are visible now: ask again at once rather than after a pause


def _with_slug() -> Any:
    return select(Event, Organization.slug).join(Organization, Organization.id == Event.organization_id)


# `scope` below: the organisation whose events the caller may see, or None for all (admins).


def _in_scope(scope: uuid.UUID | None, organization: str | None) -> list[ColumnElement[bool]]:
    conditions = []
    if scope is not None:
        conditions.append(Event.organization_id == scope)
    if organization is not None:
        named = select(Organization.id).where(Organization.slug == organization).scalar_subquery()
        conditions.append(Event.organization_id == named)
    return conditions


def list_events(
    session: Session,
    *,
    scope: uuid.UUID | None,
    organization: str | None = None,
    types: Sequence[str] = (),
    subject_id: str | None = None,
    limit: int,
    after: FeedCursor | None,
) -> FeedPage:
    """The events after `after` (oldest first), at most `limit`, and where to resume."""
    in_scope = _in_scope(scope, organization)
    start = after.after_id if after is not None else 0
    # First the highest visible id, then the page up to it (see the module's docstring): with READ COMMITTED
    # each statement sees what was committed when it began, and the page must not see further than this.
    head = session.scalar(select(func.max(Event.id)).where(*in_scope))
    if head is None or head <= start:
        return FeedPage([], FeedCursor(start).encode(), has_more=False)
    stmt = _with_slug().where(*in_scope, Event.id > start, Event.id <= head)
    if types:
        stmt = stmt.where(Event.type.in_(types))
    if subject_id is not None:
        stmt = stmt.where(Event.subject_id == subject_id)
    rows = session.execute(stmt.order_by(Event.id).limit(limit + 1)).all()
    items = [FeedEvent.of(event, slug) for event, slug in rows[:limit]]
    has_more = len(rows) > limit
    return FeedPage(items, FeedCursor(items[-1].id if has_more else head).encode(), has_more)


def get_event(session: Session, event_id: int, *, scope: uuid.UUID | None) -> FeedEvent:
    row = None
    if 0 < event_id <= _LARGEST_ID:
        row = session.execute(_with_slug().where(Event.id == event_id, *_in_scope(scope, None))).first()
    if row is None:
        raise NotFoundError(f"No event {event_id}.")
    return FeedEvent.of(*row)

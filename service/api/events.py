"""The events feed: what happened to an organisation's plans and budgets, in the order it happened."""

from __future__ import annotations

import flask

from service.api.base import LINK_HEADER, Blueprint
from service.infra.db import get_session
from service.schemas.events import EventPageSchema, EventQuerySchema, EventSchema
from service.services import feed
from service.web.auth import READERS, requires, scope

blp = Blueprint("events", __name__, url_prefix="/v1/events", description="Events, oldest first, for pollers")


@blp.get("", operation_id="listEvents")
@requires(*READERS)
@blp.arguments(EventQuerySchema, location="query", as_kwargs=True)
@blp.response(200, EventPageSchema, headers=LINK_HEADER)
def list_events(limit, cursor, types=(), subject_id=None, organization=None):
    """Events after `cursor`, OLDEST first (unlike the other lists): a poller moves forward and keeps the
    `next_cursor` of each page, which is never null, to ask for what came after it later. The `Link`
    header is there only when more events are waiting (`has_more`)."""
    page = feed.list_events(
        get_session(),
        scope=scope(),
        organization=organization,
        types=types,
        subject_id=subject_id,
        limit=limit,
        after=cursor,
    )
    headers = {}
    if page.has_more:
        args = {**flask.request.args.to_dict(), "limit": limit, "cursor": page.next_cursor}
        headers["Link"] = f'<{flask.url_for("events.list_events", **args)}>; rel="next"'
    return {"items": page.items, "next_cursor": page.next_cursor, "has_more": page.has_more}, headers


@blp.get("/<int:event_id>", operation_id="getEvent")
@requires(*READERS)
@blp.response(200, EventSchema)
@blp.alt_response(404, response="NOT_FOUND")
def get_event(event_id):
    """One event (events never change)."""
    return feed.get_event(get_session(), event_id, scope=scope())

"""The events feed: what an event looks like (in the feed and in a webhook's body) and how it is polled."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate
from webargs.fields import DelimitedList

from service.schemas.common import StrictSchema
from service.schemas.fields import SLUG_PATTERN, CursorField, Text
from service.services.events import EVENT_TYPES
from service.services.feed import FEED_CURSOR_PATTERN, FeedCursor
from service.services.pagination import DEFAULT_LIMIT, MAX_LIMIT


class SubjectSchema(ma.Schema):
    type = ma.fields.String(required=True, metadata={"example": "plan", "description": "plan or budget"})
    id = ma.fields.String(required=True, metadata={"description": "The subject's id (a UUID for both)."})


class EventSchema(ma.Schema):
    """An event, as GET /v1/events shows it and a webhook receives it as its body."""

    id = ma.fields.Integer(
        required=True,
        metadata={
            "description": "Increasing in the order events were committed: an integer (below 2^53, so "
            "exact in JSON everywhere), unique across organisations. Stable: use it to ignore an event seen "
            "twice.",
            "example": 42,
        },
    )
    type = ma.fields.String(required=True, metadata={"enum": list(EVENT_TYPES)})
    subject = ma.fields.Nested(SubjectSchema, required=True, metadata={"description": "What it is about."})
    organization = ma.fields.String(attribute="organization_slug", required=True)
    data = ma.fields.Dict(
        required=True, metadata={"description": "What the type says of its subject (README, Events)."}
    )
    created_at = ma.fields.AwareDateTime(required=True)


class EventPageSchema(ma.Schema):
    items = ma.fields.List(ma.fields.Nested(EventSchema), required=True)
    next_cursor = ma.fields.String(
        required=True,
        metadata={
            "pattern": FEED_CURSOR_PATTERN,
            "description": "Never null: pass it as `cursor` to get the events after this page, now or later "
            "(an empty page gives it back, or one further on past events the filters left out). Keep it "
            "where your poller keeps its state.",
        },
    )
    has_more = ma.fields.Boolean(
        required=True,
        metadata={"description": "More events are there already: ask again at once, not after a pause."},
    )


class EventTypesField(DelimitedList):
    """One or more event types, comma-separated in a query (an array, style form, in the description)."""

    def __init__(self, **kwargs):
        limits = {"minItems": 1, "uniqueItems": True}
        names = ma.fields.String(metadata={"enum": list(EVENT_TYPES)})
        super().__init__(names, metadata={**limits, **kwargs.pop("metadata", {})}, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str):
            raise self.make_error("invalid")
        names = tuple(part.strip() for part in value.split(","))
        for name in names:
            if name not in EVENT_TYPES:
                raise ma.ValidationError(f"Unknown event type {name!r}: use {', '.join(EVENT_TYPES)}.")
        return tuple(dict.fromkeys(names))


class EventQuerySchema(StrictSchema):
    limit = ma.fields.Integer(
        load_default=DEFAULT_LIMIT,
        validate=validate.Range(min=1, max=MAX_LIMIT),
        metadata={"description": f"Events per page (at most {MAX_LIMIT})."},
    )
    cursor = CursorField(
        decode=FeedCursor.decode,
        pattern=FEED_CURSOR_PATTERN,
        load_default=lambda: None,  # a callable: the description shows no default
        metadata={
            "description": "The `next_cursor` of your last page (the id of the last event it considered, in "
            "decimal): the events after it. Omit it, or send 0, to start from the first event. A value of "
            "another shape is a 422."
        },
    )
    type = EventTypesField(
        attribute="types",
        metadata={"description": "Only events of these types, comma-separated (plan.started,plan.failed)."},
    )
    subject_id = Text(
        validate=validate.Length(min=1, max=100), metadata={"description": "Only events about this object."}
    )
    organization = ma.fields.String(
        validate=validate.Regexp(SLUG_PATTERN), metadata={"description": "Only this organisation's events."}
    )

"""marshmallow schemas, named by role. The same schemas validate requests and generate `openapi.yaml`."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate

from service.services.pagination import DEFAULT_LIMIT, MAX_LIMIT, Cursor

SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])$"


class StrictSchema(ma.Schema):
    """Rejects unknown fields: a misspelt field must fail loudly, not be silently ignored."""

    class Meta:
        unknown = ma.RAISE


class Text(ma.fields.String):
    """A string that can be stored anywhere: PostgreSQL text cannot hold NUL, and no name needs control codes.

    A pattern rather than custom code, so that the OpenAPI description carries the rule too.
    """

    def __init__(self, **kwargs):
        no_control_codes = validate.Regexp(
            r"^[^\x00-\x1f\x7f]*$", error="Must not contain control characters."
        )
        extra = kwargs.pop("validate", None)
        validators = [no_control_codes, *([extra] if callable(extra) else extra or [])]
        super().__init__(validate=validators, **kwargs)


class CursorField(ma.fields.String):
    """An opaque pagination cursor; loads into a `Cursor`."""

    def _deserialize(self, value, attr, data, **kwargs):
        token = super()._deserialize(value, attr, data, **kwargs)
        try:
            return Cursor.decode(token)
        except ValueError as exc:
            raise ma.ValidationError(str(exc)) from exc


class ListQuerySchema(StrictSchema):
    limit = ma.fields.Integer(
        load_default=DEFAULT_LIMIT,
        validate=validate.Range(min=1, max=MAX_LIMIT),
        metadata={"description": f"Items per page (at most {MAX_LIMIT})."},
    )
    cursor = CursorField(
        load_default=None,
        metadata={"description": "The `next_cursor` of the previous page; omit for the newest items."},
    )


class PageSchema(ma.Schema):
    next_cursor = ma.fields.String(
        allow_none=True,
        required=True,
        metadata={"description": "Pass as `cursor` to get the next page; null on the last page."},
    )


class OrganizationSchema(StrictSchema):
    id = ma.fields.UUID(dump_only=True)
    slug = ma.fields.String(
        required=True,
        validate=validate.Regexp(
            SLUG_PATTERN, error="Must be 2-63 lowercase letters, digits or inner hyphens."
        ),
        metadata={"example": "acme-research"},
    )
    name = Text(required=True, validate=validate.Length(min=1, max=200))
    created_at = ma.fields.AwareDateTime(dump_only=True)


class OrganizationPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(OrganizationSchema), required=True)


class HealthSchema(ma.Schema):
    status = ma.fields.String(required=True, metadata={"example": "ok"})


class ReadinessSchema(HealthSchema):
    database = ma.fields.String(required=True, metadata={"example": "ok"})
    schema_revision = ma.fields.String(allow_none=True)

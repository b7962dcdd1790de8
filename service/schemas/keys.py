"""API keys and the audit log."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate

from service.schemas.common import PageSchema, Rule, StrictSchema
from service.schemas.fields import SLUG_PATTERN, Text, UtcDateTime
from service.services.keys import ROLES as KEY_ROLES
from service.services.keys import NewKey


def _organization_by_role() -> tuple[Rule, ...]:
    """Admin keys belong to no organisation; every other role's key to one."""
    admin = {"properties": {"role": {"enum": ["admin"]}}}
    not_admin = {"properties": {"role": {"not": {"enum": ["admin"]}}}}
    return (
        Rule(
            broken=lambda value: (
                ("Admin keys belong to no organization; leave it out.", "organization")
                if value["role"] == "admin" and value["organization"] is not None
                else None
            ),
            schema=lambda given, absent: {"anyOf": [not_admin, absent("organization")]},
            text="an admin key has no `organization`",
        ),
        Rule(
            broken=lambda value: (
                (f"Required for a {value['role']} key.", "organization")
                if value["role"] != "admin" and value["organization"] is None
                else None
            ),
            schema=lambda given, absent: {"anyOf": [admin, given("organization")]},
            text="a planner, finance or viewer key needs `organization`",
        ),
    )


class ApiKeySchema(StrictSchema):
    id = ma.fields.UUID(dump_only=True)
    key_id = ma.fields.String(dump_only=True, metadata={"description": "The public part of the key."})
    name = Text(required=True, validate=validate.Length(min=1, max=200), metadata={"example": "ci pipeline"})
    role = ma.fields.String(required=True, validate=validate.OneOf(KEY_ROLES))
    organization = ma.fields.String(
        attribute="organization_slug",
        allow_none=True,
        validate=validate.Regexp(SLUG_PATTERN, error="Must be an organization slug."),
        metadata={
            "description": "An existing organisation's slug: required for planner, finance and viewer keys, "
            "absent for admin keys."
        },
    )
    expires_at = UtcDateTime(
        allow_none=True, metadata={"description": "When the key stops working; in the future."}
    )
    created_at = ma.fields.AwareDateTime(dump_only=True)
    revoked_at = ma.fields.AwareDateTime(dump_only=True, allow_none=True)
    last_used_at = ma.fields.AwareDateTime(
        dump_only=True, allow_none=True, metadata={"description": "To the minute."}
    )

    RULES = _organization_by_role()
    REQUEST = NewKey


class IssuedKeySchema(ApiKeySchema):
    key = ma.fields.String(
        dump_only=True,
        metadata={
            "description": "The full key, cpk_<key_id>_<secret>. Shown this once; only a hash is kept."
        },
    )


class ApiKeyPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(ApiKeySchema), required=True)


class AuditEntrySchema(ma.Schema):
    id = ma.fields.UUID()
    created_at = ma.fields.AwareDateTime()
    actor = ma.fields.String(metadata={"description": "Key id of the caller (never a secret), or system."})
    organization_id = ma.fields.UUID(allow_none=True)
    action = ma.fields.String(metadata={"example": "budget.update"})
    object_type = ma.fields.String()
    object_id = ma.fields.String()
    request_id = ma.fields.String(allow_none=True)
    # Not an attribute named `fields`, which is the schema's own (its fields by name).
    changed_fields = ma.fields.List(
        ma.fields.String(),
        data_key="fields",
        attribute="fields",
        metadata={"description": "Names of the fields set or changed."},
    )


class AuditPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(AuditEntrySchema), required=True)

"""Organisations: the tenants."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate

from service.schemas.common import PageSchema, StrictSchema
from service.schemas.fields import Text, slug_field


class OrganizationSchema(StrictSchema):
    id = ma.fields.UUID(dump_only=True)
    slug = slug_field(required=True, metadata={"example": "acme"})
    name = Text(required=True, validate=validate.Length(min=1, max=200))
    created_at = ma.fields.AwareDateTime(dump_only=True)


class OrganizationPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(OrganizationSchema), required=True)

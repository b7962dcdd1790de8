"""The probes: /healthz and /readyz."""

from __future__ import annotations

import marshmallow as ma


class HealthSchema(ma.Schema):
    status = ma.fields.String(required=True, metadata={"example": "ok"})


class ReadinessSchema(HealthSchema):
    database = ma.fields.String(required=True, metadata={"example": "ok"})
    schema_revision = ma.fields.String(allow_none=True)

"""Webhooks and their deliveries."""

from __future__ import annotations

import re

import marshmallow as ma
from marshmallow import validate

from service.infra import egress
from service.schemas.common import ListQuerySchema, PageSchema, StrictSchema
from service.schemas.fields import SLUG_PATTERN, JsonBoolean, Text
from service.services.events import EVENT_TYPES
from service.services.webhooks import DELIVERY_STATUSES, WebhookFields

MAX_URL_LENGTH = 2000
# An absolute http(s) URL of printable ASCII: a host name (IDNs in their xn-- form), an IPv4 address or a
# bracketed IPv6 one, an optional port, then path, query or fragment. The pattern is the whole rule, which
# the OpenAPI description states. It leaves out credentials (user:password@), which everyone who may read
# the webhook would see: receivers authenticate the sender by its signature instead.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"  # 1-65535
# RFC 3986's IPv6address (section 3.2.2), what urllib and the sender accept between brackets.
_H16 = r"[0-9A-Fa-f]{1,4}"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_LS32 = rf"(?:{_H16}:{_H16}|{_OCTET}(?:\.{_OCTET}){{3}})"
_IPV6 = "|".join(
    [
        rf"(?:{_H16}:){{6}}{_LS32}",
        rf"::(?:{_H16}:){{5}}{_LS32}",
        *(
            rf"(?:(?:{_H16}:){{0,{before}}}{_H16})?::(?:{_H16}:){{{after}}}{_LS32}"
            for before, after in ((0, 4), (1, 3), (2, 2), (3, 1), (4, 0))
        ),
        rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
        rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
    ]
)
URL_PATTERN = rf"^https?://(?:{_LABEL}(?:\.{_LABEL})*|\[(?:{_IPV6})\])(?::{_PORT})?(?:[/?#][!-~]*)?$"


def _is_url(url: str) -> None:
    if re.match(r"^https?://[^/?#]*@", url):  # the pattern refuses it too, but without saying why
        raise ma.ValidationError(
            "Must not contain credentials (user:password@): verify the signature instead."
        )
    if not re.fullmatch(URL_PATTERN, url):
        raise ma.ValidationError("Must be an http or https URL such as https://host/path.")
    try:
        egress.Target.of(url)  # parsed as the sender will parse it
    except egress.Refused as refusal:
        raise ma.ValidationError(str(refusal)) from None


class WebhookSchema(StrictSchema):
    """A webhook. Writes: POST (organization and url required), PATCH (url, event_types, active,
    description). Its secret is shown only by the responses that make one (IssuedWebhookSchema)."""

    id = ma.fields.UUID(dump_only=True)
    organization = ma.fields.String(
        required=True,
        attribute="organization_slug",
        validate=validate.Regexp(SLUG_PATTERN, error="Must be an organization slug."),
        metadata={"description": "Slug of the organisation whose events it receives.", "example": "acme"},
    )
    url = ma.fields.String(
        required=True,
        validate=[validate.Length(max=MAX_URL_LENGTH), _is_url],
        metadata={
            "pattern": URL_PATTERN,
            "description": "Where events are POSTed: http or https, to a public address unless the operator "
            "allows internal ones (WEBHOOK_ALLOWED_NETWORKS), checked on the address each delivery connects "
            "to. Redirects are not followed.",
            "example": "https://orchestrator.internal/hooks/planner",
        },
    )
    event_types = ma.fields.List(
        ma.fields.String(validate=validate.OneOf(EVENT_TYPES)),
        validate=validate.Length(max=len(EVENT_TYPES)),
        metadata={"description": "The types it receives; empty or absent: every type."},
    )
    active = JsonBoolean(
        metadata={
            "description": "Default true. An inactive webhook's deliveries wait until it is active again."
        }
    )
    description = Text(
        allow_none=True, validate=validate.Length(max=200), metadata={"example": "Finance bot"}
    )
    created_by = ma.fields.String(dump_only=True, metadata={"description": "Key id of its creator."})
    created_at = ma.fields.AwareDateTime(dump_only=True)
    REQUEST = WebhookFields
    previous_secret_until = ma.fields.AwareDateTime(
        dump_only=True,
        allow_none=True,
        metadata={
            "description": "After a rotation: until when deliveries are signed with the secret before it too "
            "(a second signature); null when only one secret signs."
        },
    )


class IssuedWebhookSchema(WebhookSchema):
    secret = ma.fields.String(
        dump_only=True,
        metadata={
            "description": "whsec_ and the base64 of 32 random bytes: the key of the HMAC-SHA256 signatures "
            "(README, Webhooks). Shown this once: keep it in your receiver's configuration.",
        },
    )


class WebhookPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(WebhookSchema), required=True)


class WebhookQuerySchema(ListQuerySchema):
    organization = ma.fields.String(
        validate=validate.Regexp(SLUG_PATTERN), metadata={"description": "Only this organisation's webhooks."}
    )


class DeliverySchema(ma.Schema):
    id = ma.fields.UUID(
        metadata={"description": "Sent as the `webhook-id` header: the same on every attempt."}
    )
    event_id = ma.fields.Integer()
    status = ma.fields.String(metadata={"enum": list(DELIVERY_STATUSES)})
    attempts = ma.fields.Integer(
        metadata={"description": "Attempts made so far (begun, if one is under way)."}
    )
    next_attempt_at = ma.fields.Method(
        "_next_attempt_at",
        allow_none=True,
        metadata={"type": "string", "format": "date-time", "description": "While pending: when it is due."},
    )
    last_status_code = ma.fields.Integer(
        allow_none=True, metadata={"description": "The receiver's HTTP status at the last attempt."}
    )
    last_error = ma.fields.String(allow_none=True, metadata={"description": "Why the last attempt failed."})
    delivered_at = ma.fields.AwareDateTime(allow_none=True)
    created_at = ma.fields.AwareDateTime()

    def _next_attempt_at(self, delivery) -> str | None:
        return delivery.next_attempt_at.isoformat() if delivery.status == "pending" else None


class DeliveryPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(DeliverySchema), required=True)


class DeliveryQuerySchema(ListQuerySchema):
    status = ma.fields.String(validate=validate.OneOf(DELIVERY_STATUSES))


# The variant for PATCH, named for the OpenAPI description (service/api/__init__.py).
WEBHOOK_PATCH = WebhookSchema(partial=True)

"""Webhooks: an organisation's events POSTed to its endpoints, signed, with retries."""

from __future__ import annotations

from datetime import timedelta

from flask import current_app

from service.api.base import (
    ETAG_HEADER,
    IF_MATCH_PARAMETER,
    LINK_HEADER,
    LOCATION_HEADER,
    Blueprint,
    conditional_read,
    conditional_write,
    etag_header,
    if_match,
    page_response,
)
from service.infra.db import get_session
from service.schemas.webhooks import (
    WEBHOOK_PATCH,
    DeliveryPageSchema,
    DeliveryQuerySchema,
    DeliverySchema,
    IssuedWebhookSchema,
    WebhookPageSchema,
    WebhookQuerySchema,
    WebhookSchema,
)
from service.services import webhooks
from service.web.auth import requires, scope
from service.workers import webhook_sender

blp = Blueprint("webhooks", __name__, url_prefix="/v1/webhooks", description="Webhooks and their deliveries")

# Viewers do not see webhooks: a URL may carry a receiver's token, and webhooks reach into other systems.
MANAGERS = ("planner", "finance")
# The only copies of a secret: no cache may keep them.
NO_STORE = {"Cache-Control": "no-store"}


def egress_policy():
    """Where this server's senders may deliver (WEBHOOK_ALLOWED_NETWORKS): a URL they may not is a 422."""
    return webhook_sender.policy_of_app()


@blp.get("", operation_id="listWebhooks")
@requires(*MANAGERS)
@blp.arguments(WebhookQuerySchema, location="query", as_kwargs=True)
@blp.response(200, WebhookPageSchema, headers=LINK_HEADER)
def list_webhooks(limit, cursor, organization=None):
    """Webhooks, newest first; filter by `organization`. Never their secrets."""
    page = webhooks.list_webhooks(
        get_session(), scope=scope(), organization=organization, limit=limit, after=cursor
    )
    return page_response(page, limit)


@blp.post("", operation_id="createWebhook")
@requires(*MANAGERS)
@blp.arguments(WebhookSchema)
@blp.response(201, IssuedWebhookSchema, headers={**LOCATION_HEADER, **ETAG_HEADER})
def create_webhook(body):
    """Register an endpoint for an organisation's events. The response's `secret` is the only time it is
    shown."""
    webhook = webhooks.create_webhook(get_session(), body, scope=scope(), policy=egress_policy())
    return webhook, {"Location": f"/v1/webhooks/{webhook.id}", **etag_header(webhook), **NO_STORE}


@blp.get("/<uuid:webhook_id>", operation_id="getWebhook")
@requires(*MANAGERS)
@blp.response(200, WebhookSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_read(blp)
def get_webhook(webhook_id):
    webhook = webhooks.get_webhook(get_session(), webhook_id, scope=scope())
    return webhook, etag_header(webhook)


@blp.patch("/<uuid:webhook_id>", operation_id="updateWebhook")
@requires(*MANAGERS)
@blp.arguments(WEBHOOK_PATCH)
@blp.response(200, WebhookSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_write(blp)
def update_webhook(body, webhook_id):
    """Change its url, event_types, active or description."""
    webhook = webhooks.update_webhook(
        get_session(), webhook_id, body, scope=scope(), if_match=if_match(), policy=egress_policy()
    )
    return webhook, etag_header(webhook)


@blp.delete("/<uuid:webhook_id>", operation_id="deleteWebhook")
@requires(*MANAGERS)
@blp.response(204)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_write(blp)
def delete_webhook(webhook_id):
    """Delete it and its deliveries; nothing more is sent to it."""
    webhooks.delete_webhook(get_session(), webhook_id, scope=scope(), if_match=if_match())


@blp.post("/<uuid:webhook_id>/rotate-secret", operation_id="rotateWebhookSecret")
@requires(*MANAGERS)
@blp.response(200, IssuedWebhookSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(412, response="PRECONDITION_FAILED")
@blp.doc(parameters=[{**IF_MATCH_PARAMETER, "required": False}])
def rotate_secret(webhook_id):
    """A new secret, shown this once and in force at once: every attempt from now on, retries of earlier
    events included, is signed with it, and until `previous_secret_until` (WEBHOOK_SECRET_OVERLAP_SECONDS,
    a day by default) with the secret it replaces too: two signatures in `webhook-signature`, so that a
    receiver can change keys without refusing a delivery. If-Match is optional."""
    overlap = timedelta(seconds=current_app.extensions["planner.config"].webhook_secret_overlap_seconds)
    webhook = webhooks.rotate_secret(
        get_session(), webhook_id, scope=scope(), if_match=if_match(), overlap=overlap
    )
    return webhook, {**etag_header(webhook), **NO_STORE}


@blp.get("/<uuid:webhook_id>/deliveries", operation_id="listWebhookDeliveries")
@requires(*MANAGERS)
@blp.arguments(DeliveryQuerySchema, location="query", as_kwargs=True)
@blp.response(200, DeliveryPageSchema, headers=LINK_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
def list_deliveries(limit, cursor, webhook_id, status=None):
    """The webhook's deliveries, newest first; filter by `status` (pending, delivered, failed)."""
    page = webhooks.list_deliveries(
        get_session(), webhook_id, scope=scope(), status=status, limit=limit, after=cursor
    )
    return page_response(page, limit)


@blp.post("/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/retry", operation_id="retryWebhookDelivery")
@requires(*MANAGERS)
@blp.response(200, DeliverySchema)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
def retry_delivery(webhook_id, delivery_id):
    """Queue a failed delivery again, for a fresh round of attempts under the same `webhook-id`."""
    delivery = webhooks.retry_delivery(get_session(), webhook_id, delivery_id, scope=scope())
    webhook_sender.wake_sender()
    return delivery

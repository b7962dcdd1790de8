"""API keys (admins only) and the audit log."""

from __future__ import annotations

from service.api.base import LINK_HEADER, LOCATION_HEADER, Blueprint, page_response
from service.infra.db import get_session
from service.schemas.common import ListQuerySchema
from service.schemas.keys import ApiKeyPageSchema, ApiKeySchema, AuditPageSchema, IssuedKeySchema
from service.services import audit, keys
from service.web.auth import current_principal, requires

blp = Blueprint("keys", __name__, url_prefix="/v1", description="API keys and the audit log (admins)")


@blp.post("/keys", operation_id="createKey")
@requires()
@blp.arguments(ApiKeySchema)
@blp.response(201, IssuedKeySchema, headers=LOCATION_HEADER)
def create_key(body):
    """Issue a key. The response's `key` is the only time the full key is shown."""
    issued = keys.create_key(get_session(), body)
    # The only copy of the secret: no cache may keep it.
    return issued, {"Location": f"/v1/keys/{issued.id}", "Cache-Control": "no-store"}


@blp.get("/keys", operation_id="listKeys")
@requires()
@blp.arguments(ListQuerySchema, location="query", as_kwargs=True)
@blp.response(200, ApiKeyPageSchema, headers=LINK_HEADER)
def list_keys(limit, cursor):
    """All keys, newest first (never their secrets)."""
    return page_response(keys.list_keys(get_session(), limit=limit, after=cursor), limit)


@blp.delete("/keys/<uuid:key_uuid>", operation_id="revokeKey")
@requires()
@blp.response(204)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
def revoke_key(key_uuid):
    """Revoke a key: it stops working at once; the record stays for the audit log."""
    keys.revoke_key(get_session(), key_uuid, caller=current_principal())


@blp.get("/audit", operation_id="listAuditEntries")
@requires()
@blp.arguments(ListQuerySchema, location="query", as_kwargs=True)
@blp.response(200, AuditPageSchema, headers=LINK_HEADER)
def list_audit(limit, cursor):
    """Every mutation, newest first: who, organisation, action, object, when, request id."""
    return page_response(
        audit.list_entries(get_session(), organization_id=None, limit=limit, after=cursor), limit
    )

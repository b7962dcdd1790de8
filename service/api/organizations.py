from __future__ import annotations

from service.api.base import (
    ETAG_HEADER,
    LINK_HEADER,
    LOCATION_HEADER,
    Blueprint,
    conditional_read,
    etag_header,
    page_response,
)
from service.infra.db import get_session
from service.schemas.common import ListQuerySchema
from service.schemas.organizations import OrganizationPageSchema, OrganizationSchema
from service.services import organizations
from service.web.auth import READERS, requires, scope

blp = Blueprint("organizations", __name__, url_prefix="/v1/organizations", description="Tenants")


@blp.get("", operation_id="listOrganizations")
@requires(*READERS)
@blp.arguments(ListQuerySchema, location="query", as_kwargs=True)
@blp.response(200, OrganizationPageSchema, headers=LINK_HEADER)
def list_organizations(limit, cursor):
    """List organisations, newest first (an organisation's key sees its own)."""
    page = organizations.list_organizations(get_session(), scope=scope(), limit=limit, after=cursor)
    return page_response(page, limit)


@blp.post("", operation_id="createOrganization")
@requires()
@blp.arguments(OrganizationSchema)
@blp.response(201, OrganizationSchema, headers=LOCATION_HEADER)
@blp.alt_response(409, response="CONFLICT")
def create_organization(body):
    """Create an organisation (admins)."""
    organization = organizations.create_organization(get_session(), **body)
    return organization, {"Location": f"/v1/organizations/{organization.slug}"}


@blp.get("/<slug:slug>", operation_id="getOrganization")
@requires(*READERS)
@blp.response(200, OrganizationSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_read(blp)
def get_organization(slug):
    """One organisation by slug."""
    organization = organizations.get_organization(get_session(), slug, scope=scope())
    return organization, etag_header(organization)

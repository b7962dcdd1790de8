from __future__ import annotations

from service.api.base import ETAG_HEADER, LINK_HEADER, LOCATION_HEADER, Blueprint, page_response
from service.db import get_session
from service.schemas import ListQuerySchema, OrganizationPageSchema, OrganizationSchema
from service.services import organizations

blp = Blueprint("organizations", __name__, url_prefix="/v1/organizations", description="Tenants")


@blp.get("")
@blp.arguments(ListQuerySchema, location="query", as_kwargs=True)
@blp.response(200, OrganizationPageSchema, headers=LINK_HEADER)
def list_organizations(limit, cursor):
    """List organisations, newest first."""
    page = organizations.list_organizations(get_session(), limit=limit, after=cursor)
    return page_response(page, limit)


@blp.post("")
@blp.arguments(OrganizationSchema)
@blp.response(201, OrganizationSchema, headers=LOCATION_HEADER)
@blp.alt_response(409, response="CONFLICT")
def create_organization(body):
    """Create an organisation."""
    organization = organizations.create_organization(get_session(), **body)
    return organization, {"Location": f"/v1/organizations/{organization.slug}"}


@blp.get("/<slug:slug>")
@blp.response(200, OrganizationSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
def get_organization(slug):
    """One organisation by slug."""
    organization = organizations.get_organization(get_session(), slug)
    return organization, {"ETag": f'"{organization.version}"'}

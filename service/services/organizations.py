"""Use cases for organisations."""

from __future__ import annotations

import uuid
from typing import TypeGuard

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from service.data.models import Organization
from service.services.errors import InvalidFieldError, NotFoundError
from service.services.pagination import Cursor, Page, paginate
from service.services.transactions import commit_new


def create_organization(session: Session, *, slug: str, name: str) -> Organization:
    organization = Organization(slug=slug, name=name)
    session.add(organization)
    commit_new(session, Organization, slug, "An organization")
    return organization


def get_organization(session: Session, slug: str, *, scope: uuid.UUID | None) -> Organization:
    """`scope`: the organisation the caller may see (None: all). Others look as if they did not exist."""
    organization = session.scalar(_BY_SLUG, {"slug": slug})
    if not _visible(organization, scope):
        raise NotFoundError(f"No organization with slug {slug!r}.")
    return organization


def _visible(organization: Organization | None, scope: uuid.UUID | None) -> TypeGuard[Organization]:
    return organization is not None and (scope is None or organization.id == scope)


# Built once: every plan and budget request looks its organisation up, and building the statement cost more
# than running it.
_BY_SLUG = select(Organization).where(Organization.slug == bindparam("slug"))


def slug_of(session: Session, organization_id: uuid.UUID) -> str:
    return session.scalars(select(Organization.slug).where(Organization.id == organization_id)).one()


def named_in_body(session: Session, slug: str, *, scope: uuid.UUID | None) -> Organization:
    """The organisation a request body names (a 422 at #/organization when it is not one the caller sees)."""
    return in_body(session.scalar(_BY_SLUG, {"slug": slug}), slug, scope=scope)


def in_body(organization: Organization | None, slug: str, *, scope: uuid.UUID | None) -> Organization:
    """`organization`, as read by the `slug` a request body names (None: no such organisation), if the caller
    sees it: a 422 at #/organization otherwise. For use cases that read it together with something else."""
    if not _visible(organization, scope):
        raise InvalidFieldError("organization", f"No organization {slug!r}.")
    return organization


def list_organizations(
    session: Session, *, scope: uuid.UUID | None, limit: int, after: Cursor | None
) -> Page[Organization]:
    stmt = select(Organization)
    if scope is not None:
        stmt = stmt.where(Organization.id == scope)
    return paginate(session, stmt, Organization, limit, after)

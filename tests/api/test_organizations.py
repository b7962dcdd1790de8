"""Organisations: the first resource, and the list conventions every later one follows."""

from __future__ import annotations

import base64
import json

from sqlalchemy import select

from service.data.models import Organization
from tests.problems import assert_problem


def create(client, **overrides):
    body = {"slug": "acme", "name": "Acme Research", **overrides}
    response = client.post("/v1/organizations", json=body)
    assert response.status_code == 201, response.get_json()
    return response


def test_creating_an_organization_stores_it_and_says_where_it_is(client, session):
    response = create(client, slug="acme", name="Acme Research")

    assert response.headers["Location"] == "/v1/organizations/acme"
    body = response.get_json()
    assert body["slug"] == "acme"
    assert body["name"] == "Acme Research"
    assert body["created_at"].endswith("+00:00")
    stored = session.scalars(select(Organization)).one()
    assert (str(stored.id), stored.slug, stored.name) == (body["id"], "acme", "Acme Research")


def test_an_organization_is_read_back_by_slug_with_an_etag(client):
    created = create(client).get_json()
    response = client.get("/v1/organizations/acme")
    assert response.status_code == 200
    assert response.get_json() == created
    assert response.headers["ETag"] == '"1"'


def test_an_unknown_slug_is_a_404_problem(client):
    body = assert_problem(client.get("/v1/organizations/nobody"), 404)
    assert "nobody" in body["detail"]


def test_a_taken_slug_is_a_409_problem_and_the_first_organization_is_unchanged(client, session):
    create(client, name="First")
    assert_problem(client.post("/v1/organizations", json={"slug": "acme", "name": "Second"}), 409)
    assert session.scalars(select(Organization.name)).all() == ["First"]


def test_a_slug_must_be_lowercase_letters_digits_and_inner_hyphens(client):
    for slug in ["A", "Acme", "-acme", "acme-", "a" * 64, "ac me", "x"]:
        body = assert_problem(client.post("/v1/organizations", json={"slug": slug, "name": "n"}), 422)
        assert [error["pointer"] for error in body["errors"]] == ["#/slug"], slug


def test_lists_are_newest_first_in_pages_linked_by_an_opaque_cursor(client):
    for index in range(5):
        create(client, slug=f"org-{index}")

    first = client.get("/v1/organizations?limit=2")
    assert first.status_code == 200
    page = first.get_json()
    assert [o["slug"] for o in page["items"]] == ["org-4", "org-3"]
    assert page["next_cursor"]
    link = first.headers["Link"]
    assert link.endswith('>; rel="next"')
    assert f"cursor={page['next_cursor']}" in link

    second = client.get(f"/v1/organizations?limit=2&cursor={page['next_cursor']}").get_json()
    assert [o["slug"] for o in second["items"]] == ["org-2", "org-1"]
    last = client.get(f"/v1/organizations?limit=2&cursor={second['next_cursor']}")
    assert [o["slug"] for o in last.get_json()["items"]] == ["org-0"]
    assert last.get_json()["next_cursor"] is None
    assert "Link" not in last.headers


def forge(*members) -> str:
    return base64.urlsafe_b64encode(json.dumps(members).encode()).decode().rstrip("=")


def test_a_cursor_that_the_service_did_not_issue_is_a_422_problem(client):
    zero = "00000000-0000-0000-0000-000000000000"
    forged = [
        "zz",
        forge("not", "a", "pair"),
        forge(1, 2),
        forge("2026-01-01T00:00:00+00:00", 123),  # an id that is a number
        forge("2026-01-01T00:00:00+00:00", []),  # an id that is a list
        forge("9999-12-31T23:59:59-14:00", zero),  # a time that overflows in UTC
        forge("2026-01-01T00:00:00", zero),  # a time without an offset
    ]
    for cursor in forged:
        body = assert_problem(client.get(f"/v1/organizations?cursor={cursor}"), 422)
        assert body["errors"] == [{"parameter": "cursor", "detail": "Not a valid cursor."}]


def test_a_path_that_is_not_a_slug_is_a_404_before_any_query(client):
    for path in ["/v1/organizations/a%00b", "/v1/organizations/UPPER", "/v1/organizations/x"]:
        assert_problem(client.get(path), 404)

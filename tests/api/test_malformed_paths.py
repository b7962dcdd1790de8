"""A path whose id or slug is not even of its form (GET /v1/plans/not-a-uuid) is a 404 that names the resource
and what its ids look like, as the 404 of a well-formed id that names nothing names the resource; not
Werkzeug's text for a person who typed a URL."""

from __future__ import annotations

import re
import uuid

import pytest

from service.api.base import PATH_RESOURCES, path_resource
from tests.problems import assert_problem

# One malformed value for each form of id, and a well-formed one for the arguments beside it.
MALFORMED = {"uuid": "not-a-uuid", "int": "abc", "slug": "Bad_Slug"}
WELL_FORMED = {"uuid": str(uuid.uuid4()), "int": "1", "slug": "no-such-slug"}


def _api_rules(app):
    return [rule for rule in app.url_map.iter_rules() if rule.rule.startswith("/v1/") and rule.arguments]


def _arguments(rule) -> dict[str, str]:
    """The route's arguments and the kind of each (uuid, int, slug), as its rule writes them."""
    return {name: kind for kind, name in re.findall(r"<(\w+):(\w+)>", rule.rule)}


def _path(rule, values: dict[str, str]) -> str:
    path = rule.rule
    for name, kind in _arguments(rule).items():
        path = path.replace(f"<{kind}:{name}>", values.get(name) or WELL_FORMED[kind])
    assert "<" not in path, path
    return path


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        ("/v1/plans/not-a-uuid", "No plan 'not-a-uuid': a plan id is a UUID."),
        ("/v1/plans/42/usage", "No plan '42': a plan id is a UUID."),
        ("/v1/budgets/2026/ledger", "No budget '2026': a budget id is a UUID."),
        ("/v1/calibrations/latest", "No calibration 'latest': a calibration id is a UUID."),
        ("/v1/fit-jobs/job-1", "No fit job 'job-1': a fit job id is a UUID."),
        ("/v1/webhooks/hook", "No webhook 'hook': a webhook id is a UUID."),
        ("/v1/events/first", "No event 'first': an event id is a whole number."),
        ("/v1/events/-3", "No event '-3': an event id is a whole number."),
        (
            "/v1/hardware/H100_SXM",
            "No hardware profile 'H100_SXM': a hardware profile's slug is 2-63 lowercase letters, digits or "
            "inner hyphens.",
        ),
        (
            "/v1/offers/aws:us-east-1",
            "No offer 'aws:us-east-1': an offer's slug is 2-63 lowercase letters, digits or inner hyphens.",
        ),
        (
            "/v1/organizations/Acme",
            "No organization 'Acme': an organization's slug is 2-63 lowercase letters, digits or inner "
            "hyphens.",
        ),
        (
            "/v1/scaling-laws/x/frontier",
            "No scaling law 'x': a scaling law's slug is 2-63 lowercase letters, digits or inner hyphens.",
        ),
    ],
)
def test_a_malformed_id_is_a_404_naming_the_resource_and_the_form_of_its_ids(client, path, detail):
    body = assert_problem(client.get(path), 404)
    assert (body["title"], body["detail"], body["instance"]) == ("Not Found", detail, path)


def test_it_reads_as_the_404_of_a_well_formed_id_that_names_nothing(client):
    missing = str(uuid.uuid4())
    assert assert_problem(client.get(f"/v1/plans/{missing}"), 404)["detail"] == f"No plan {missing}."
    malformed = assert_problem(client.get("/v1/plans/nope"), 404)
    assert malformed["detail"].startswith("No plan 'nope': ")
    assert set(malformed) == set(assert_problem(client.get(f"/v1/plans/{missing}"), 404))


def test_the_first_malformed_id_of_a_path_is_the_one_named(client):
    path = f"/v1/plans/{uuid.uuid4()}/usage/usage-1/reverse"
    detail = assert_problem(client.post(path, json={}), 404)["detail"]
    assert detail == "No usage record 'usage-1': a usage record id is a UUID."
    path = "/v1/webhooks/hook/deliveries/delivery/retry"
    assert assert_problem(client.post(path), 404)["detail"] == "No webhook 'hook': a webhook id is a UUID."
    path = f"/v1/webhooks/{uuid.uuid4()}/deliveries/delivery/retry"
    detail = assert_problem(client.post(path), 404)["detail"]
    assert detail == "No delivery 'delivery': a delivery id is a UUID."


def test_a_long_value_is_quoted_back_cut_short(client):
    detail = assert_problem(client.get("/v1/offers/" + "x" * 5000), 404)["detail"]
    assert detail.startswith("No offer '" + "x" * 80 + "...': an offer's slug is")


def test_every_id_and_slug_of_every_route_is_named_when_malformed(app, client):
    for rule in _api_rules(app):
        method = sorted(rule.methods - {"HEAD", "OPTIONS"})[0]
        for name, kind in _arguments(rule).items():
            path = _path(rule, {name: MALFORMED[kind]})
            body = assert_problem(client.open(path, method=method), 404)
            resource = path_resource(rule.endpoint, name)
            assert body["detail"].startswith(f"No {resource} '{MALFORMED[kind]}': "), (method, path, body)


def test_every_route_argument_names_a_resource(app):
    named = {
        f"{rule.endpoint.partition('.')[0]}.{name}" for rule in _api_rules(app) for name in rule.arguments
    }
    assert all(path_resource(*key.split(".", 1)) for key in named)  # a KeyError names the one missing
    unused = set(PATH_RESOURCES) - named - {key.partition(".")[2] for key in named}
    assert unused == set(), "PATH_RESOURCES names arguments no route has"


def test_a_path_that_is_no_route_is_a_404_that_says_where_the_paths_are(client):
    body = assert_problem(client.get("/v1/plans/not-a-uuid/unknown"), 404)
    assert (
        body["detail"]
        == "Nothing is at /v1/plans/not-a-uuid/unknown: the API's paths are listed at /openapi.json."
    )


def test_without_a_key_a_malformed_path_is_a_401_as_any_other(app):
    assert_problem(app.test_client().get("/v1/plans/not-a-uuid"), 401)

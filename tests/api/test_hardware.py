"""/v1/hardware over HTTP: the built-in catalog, custom profiles, their price history and If-Match."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import func, select

from service.data.catalog import builtin_hardware
from service.data.models import HardwarePrice, HardwareProfile
from service.services.catalog import load_builtin_hardware
from tests.problems import assert_problem

OMIT = object()
BUILT_IN_SLUGS = {spec.slug for spec in builtin_hardware()}


@pytest.fixture
def catalog(session):
    load_builtin_hardware(session)


def custom_profile(**overrides) -> dict:
    """A valid POST body for a custom profile; an override of OMIT leaves that field out."""
    body = {
        "slug": "our-h100",
        "name": "Our H100",
        "vendor": "Acme Cloud",
        "peak_flops": {"bf16": 989.4e12, "fp8": 1978.9e12},
        "memory_bytes": 80 * 10**9,
        "memory_bandwidth_bytes_per_second": 3_350 * 10**9,
        "source": "our datasheet",
        "price_per_hour": "3.50",
        "currency": "USD",
        "price_as_of": "2026-05",
        "price_source": "our contract",
        **overrides,
    }
    return {name: value for name, value in body.items() if value is not OMIT}


def replacement(**overrides) -> dict:
    """A valid PUT body: the whole profile, without its slug (the path names it)."""
    return custom_profile(slug=OMIT, **overrides)


def create(client, **overrides):
    response = client.post("/v1/hardware", json=custom_profile(**overrides))
    assert response.status_code == 201, response.get_json()
    return response


def pointers(response) -> list[str]:
    return [error["pointer"] for error in assert_problem(response, 422)["errors"]]


def stored(session, slug: str) -> HardwareProfile | None:
    """The profile as the database now holds it (not as this session last saw it)."""
    session.expire_all()
    return session.scalars(select(HardwareProfile).where(HardwareProfile.slug == slug)).one_or_none()


def stored_prices(session, slug: str) -> list[tuple[Decimal, str, str | None]]:
    """The price rows of a profile, oldest first."""
    session.expire_all()
    rows = session.scalars(
        select(HardwarePrice)
        .join(HardwareProfile)
        .where(HardwareProfile.slug == slug)
        .order_by(HardwarePrice.effective_at)
    )
    return [(row.price_per_hour, row.currency, row.as_of) for row in rows]


def count(session, model) -> int:
    session.expire_all()
    return session.scalar(select(func.count()).select_from(model))


def etag_of(client, slug: str) -> str:
    response = client.get(f"/v1/hardware/{slug}")
    assert response.status_code == 200, response.get_json()
    return response.headers["ETag"]


def write(client, method: str, slug: str, body: dict | None = None, *, if_match: str | None = None):
    headers = {} if if_match is None else {"If-Match": if_match}
    return client.open(f"/v1/hardware/{slug}", method=method, json=body, headers=headers)


# --- Listing ------------------------------------------------------------------------------------------------


def test_the_built_in_catalog_is_listed_once_loaded(client, catalog):
    response = client.get("/v1/hardware?limit=100")

    assert response.status_code == 200
    body = response.get_json()
    assert {item["slug"] for item in body["items"]} == BUILT_IN_SLUGS
    assert len(body["items"]) == len(BUILT_IN_SLUGS)
    assert all(item["built_in"] for item in body["items"])
    assert body["next_cursor"] is None
    assert "Link" not in response.headers


def test_a_custom_profile_is_listed_first_as_the_newest(client, catalog):
    create(client, slug="our-h100")

    items = client.get("/v1/hardware?limit=3").get_json()["items"]

    assert items[0]["slug"] == "our-h100"
    assert items[0]["built_in"] is False


def test_the_vendor_filter_ignores_case(client, catalog):
    create(client, slug="our-h100", vendor="nVidia")
    create(client, slug="our-tpu", vendor="Acme Cloud")
    nvidia = {spec.slug for spec in builtin_hardware() if spec.vendor == "NVIDIA"}

    response = client.get("/v1/hardware?vendor=nvidia&limit=100")

    assert response.status_code == 200
    body = response.get_json()
    assert {item["slug"] for item in body["items"]} == nvidia | {"our-h100"}
    assert {item["vendor"] for item in body["items"]} == {"NVIDIA", "nVidia"}


def test_the_precision_filter_keeps_only_profiles_with_a_peak_at_that_precision(client, catalog):
    response = client.get("/v1/hardware?precision=fp8&limit=100")

    assert response.status_code == 200
    body = response.get_json()
    slugs = {item["slug"] for item in body["items"]}
    assert slugs == {spec.slug for spec in builtin_hardware() if "fp8" in spec.peak_flops}
    assert {"h100-sxm", "mi300x", "gaudi3"} <= slugs
    assert not slugs & {"v100-sxm2-32gb", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "a100-80gb"}
    assert all("fp8" in item["peak_flops"] for item in body["items"])


def test_pages_of_the_catalog_cover_every_profile_once_linked_by_a_cursor(client, catalog):
    seen: list[str] = []
    url = "/v1/hardware?limit=5"
    pages = 0
    while url:
        response = client.get(url)
        assert response.status_code == 200
        page = response.get_json()
        seen += [item["slug"] for item in page["items"]]
        pages += 1
        if page["next_cursor"]:
            assert len(page["items"]) == 5
            link = response.headers["Link"]
            assert link.startswith("</v1/hardware?")
            assert link.endswith('>; rel="next"')
            assert f"cursor={page['next_cursor']}" in link
            assert "limit=5" in link
            url = f"/v1/hardware?limit=5&cursor={page['next_cursor']}"
        else:
            assert "Link" not in response.headers
            url = None

    assert sorted(seen) == sorted(BUILT_IN_SLUGS)
    assert pages == -(-len(BUILT_IN_SLUGS) // 5)


def test_the_next_link_of_a_filtered_list_keeps_the_filter(client, catalog):
    response = client.get("/v1/hardware?vendor=nvidia&limit=2")

    link = response.headers["Link"]
    assert "vendor=nvidia" in link
    follow = client.get(link[1 : link.index(">")]).get_json()
    assert {item["vendor"] for item in follow["items"]} == {"NVIDIA"}


@pytest.mark.parametrize("query", ["precision=fp64", "precision=BF16", "limit=0", "limit=101", "cursor=zz"])
def test_bad_list_parameters_are_422_problems_naming_the_parameter(client, query):
    body = assert_problem(client.get(f"/v1/hardware?{query}"), 422)

    assert [error["parameter"] for error in body["errors"]] == [query.split("=")[0]]


def test_an_unknown_query_parameter_is_a_422_problem(client):
    body = assert_problem(client.get("/v1/hardware?vendr=NVIDIA"), 422)

    assert [error["parameter"] for error in body["errors"]] == ["vendr"]


def test_a_vendor_filter_with_a_control_character_is_a_422_problem(client):
    body = assert_problem(client.get("/v1/hardware?vendor=a%00b"), 422)

    assert [error["parameter"] for error in body["errors"]] == ["vendor"]


# --- Reading one --------------------------------------------------------------------------------------------


def test_a_built_in_profile_is_read_with_its_peaks_and_current_price(client, catalog):
    response = client.get("/v1/hardware/h100-sxm")

    assert response.status_code == 200
    body = response.get_json()
    assert body["slug"] == "h100-sxm"
    assert body["name"] == "NVIDIA H100 SXM"
    assert body["vendor"] == "NVIDIA"
    assert body["peak_flops"] == {
        "fp32": 67e12,
        "tf32": 494.7e12,
        "bf16": 989.4e12,
        "fp16": 989.4e12,
        "fp8": 1978.9e12,
    }
    assert body["memory_bytes"] == 80 * 10**9
    assert body["memory_bandwidth_bytes_per_second"] == 3_350 * 10**9
    assert body["interconnect"] == "NVLink 4"
    assert body["tdp_watts"] == 700
    assert body["price_per_hour"] == "6.88"
    assert body["currency"] == "USD"
    assert body["price_as_of"] == "2026"
    assert body["price_effective_at"].endswith("+00:00")
    assert body["built_in"] is True
    assert response.headers["ETag"] == '"1"'


def test_a_profile_without_a_price_has_null_price_fields(client, catalog):
    body = client.get("/v1/hardware/v100-sxm2-32gb").get_json()

    assert body["peak_flops"] == {"fp32": 15.7e12, "fp16": 125e12}
    assert (body["price_per_hour"], body["currency"], body["price_as_of"]) == (None, None, None)


def test_if_none_match_with_the_current_etag_is_304_and_with_another_is_200(client, catalog):
    tag = etag_of(client, "h100-sxm")

    unchanged = client.get("/v1/hardware/h100-sxm", headers={"If-None-Match": tag})
    changed = client.get("/v1/hardware/h100-sxm", headers={"If-None-Match": '"999"'})

    assert unchanged.status_code == 304
    assert unchanged.get_data() == b""
    assert unchanged.headers["ETag"] == tag
    assert changed.status_code == 200
    assert changed.get_json()["slug"] == "h100-sxm"


def test_an_unknown_slug_is_a_404_problem(client, catalog):
    body = assert_problem(client.get("/v1/hardware/h900-sxm"), 404)

    assert "h900-sxm" in body["detail"]


@pytest.mark.parametrize("path", ["/v1/hardware/H100-SXM", "/v1/hardware/x", "/v1/hardware/a%00b"])
def test_a_path_that_is_not_a_slug_is_a_404_problem(client, path):
    assert_problem(client.get(path), 404)


# --- Creating -----------------------------------------------------------------------------------------------


def test_creating_a_custom_profile_stores_it_with_its_first_price(client, session):
    response = client.post(
        "/v1/hardware",
        json=custom_profile(slug="our-h100", interconnect="NVLink 4", tdp_watts=700, note="reserved"),
    )

    assert response.status_code == 201, response.get_json()
    assert response.headers["Location"] == "/v1/hardware/our-h100"
    assert response.headers["ETag"] == '"1"'
    body = response.get_json()
    assert body["slug"] == "our-h100"
    assert body["name"] == "Our H100"
    assert body["vendor"] == "Acme Cloud"
    assert body["peak_flops"] == {"bf16": 989.4e12, "fp8": 1978.9e12}
    assert body["memory_bytes"] == 80 * 10**9
    assert (body["interconnect"], body["tdp_watts"], body["note"]) == ("NVLink 4", 700, "reserved")
    assert body["interconnect_bandwidth_bytes_per_second"] is None
    assert (body["price_per_hour"], body["currency"]) == ("3.50", "USD")
    assert (body["price_as_of"], body["price_source"]) == ("2026-05", "our contract")
    assert body["built_in"] is False
    assert body["created_at"].endswith("+00:00")
    profile = stored(session, "our-h100")
    assert (profile.name, profile.built_in, profile.peak_flops_bf16, profile.peak_flops_fp32) == (
        "Our H100",
        False,
        989.4e12,
        None,
    )
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]


def test_a_created_profile_reads_back_as_it_was_created(client):
    created = create(client)

    response = client.get("/v1/hardware/our-h100")

    assert response.get_json() == created.get_json()
    assert response.headers["ETag"] == created.headers["ETag"]


def test_a_profile_created_without_a_price_has_no_price_rows(client, session):
    response = create(client, price_per_hour=OMIT, currency=OMIT, price_as_of=OMIT, price_source=OMIT)

    body = response.get_json()
    assert (body["price_per_hour"], body["currency"], body["price_effective_at"]) == (None, None, None)
    assert stored(session, "our-h100") is not None
    assert stored_prices(session, "our-h100") == []


def test_a_price_of_zero_is_allowed_and_keeps_its_cents(client, session):
    body = create(client, price_per_hour="0", currency="EUR").get_json()

    assert (body["price_per_hour"], body["currency"]) == ("0.00", "EUR")
    assert stored_prices(session, "our-h100") == [(Decimal(0), "EUR", "2026-05")]


def test_a_price_keeps_every_decimal_it_was_given(client, session):
    body = create(client, price_per_hour="0.000123").get_json()

    assert body["price_per_hour"] == "0.000123"
    assert stored_prices(session, "our-h100")[0][0] == Decimal("0.000123")


def test_a_request_without_the_required_fields_is_a_422_problem_naming_each(client, session):
    found = pointers(client.post("/v1/hardware", json={}))

    assert set(found) == {
        "#/slug",
        "#/name",
        "#/vendor",
        "#/peak_flops",
        "#/memory_bytes",
        "#/memory_bandwidth_bytes_per_second",
        "#/source",
    }
    assert count(session, HardwareProfile) == 0


@pytest.mark.parametrize(
    ("overrides", "pointer"),
    [
        ({"name": OMIT}, "#/name"),
        ({"source": OMIT}, "#/source"),
        ({"peak_flops": OMIT}, "#/peak_flops"),
        ({"peak_flops": {}}, "#/peak_flops"),
        ({"peak_flops": {"bf17": 1e15}}, "#/peak_flops/bf17"),
        ({"peak_flops": {"bf16": -1e15}}, "#/peak_flops/bf16"),
        ({"peak_flops": {"bf16": 0}}, "#/peak_flops/bf16"),
        ({"peak_flops": {"bf16": 1e30}}, "#/peak_flops/bf16"),
        ({"peak_flops": {"bf16": "lots"}}, "#/peak_flops/bf16"),
        ({"peak_flops": 1e15}, "#/peak_flops"),
        ({"memory_bytes": 0}, "#/memory_bytes"),
        ({"memory_bytes": 80e9 + 0.5}, "#/memory_bytes"),  # an integer-valued 80e9 is an integer
        ({"memory_bytes": "80GB"}, "#/memory_bytes"),
        ({"memory_bandwidth_bytes_per_second": -1}, "#/memory_bandwidth_bytes_per_second"),
        ({"tdp_watts": 0}, "#/tdp_watts"),
        ({"currency": OMIT}, "#/currency"),
        ({"currency": None}, "#/currency"),
        ({"price_per_hour": 3.5}, "#/price_per_hour"),
        ({"price_per_hour": "-3.50"}, "#/price_per_hour"),
        ({"price_per_hour": "3.5.0"}, "#/price_per_hour"),
        ({"price_per_hour": "3.1234567"}, "#/price_per_hour"),
        ({"price_per_hour": "NaN"}, "#/price_per_hour"),
        ({"price_per_hour": OMIT}, "#/price_per_hour"),  # price_as_of and price_source without a price
        ({"currency": "ZZZ"}, "#/currency"),
        ({"currency": "usd"}, "#/currency"),
        ({"currency": "XTS"}, "#/currency"),
        ({"slug": "Our-H100"}, "#/slug"),
        ({"slug": "-our"}, "#/slug"),
        ({"slug": "our-"}, "#/slug"),
        ({"slug": "x"}, "#/slug"),
        ({"slug": "a" * 64}, "#/slug"),
        ({"slug": "our h100"}, "#/slug"),
        ({"price_as_of": "Nov 2026"}, "#/price_as_of"),
        ({"price_as_of": "2026/11/01"}, "#/price_as_of"),
        ({"name": ""}, "#/name"),
        ({"name": "bad\u0000name"}, "#/name"),
        ({"colour": "green"}, "#/colour"),
        ({"built_in": True}, "#/built_in"),
    ],
)
def test_an_invalid_profile_is_a_422_problem_pointing_at_the_field_and_stores_nothing(
    client, session, overrides, pointer
):
    response = client.post("/v1/hardware", json=custom_profile(**overrides))

    assert pointers(response) == [pointer]
    assert count(session, HardwareProfile) == 0
    assert count(session, HardwarePrice) == 0


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_peaks_are_refused(client, session, literal):
    raw = json.dumps(custom_profile(peak_flops=OMIT))[:-1] + f', "peak_flops": {{"bf16": {literal}}}}}'

    response = client.post("/v1/hardware", data=raw, content_type="application/json")

    assert pointers(response) == ["#/peak_flops/bf16"]
    assert count(session, HardwareProfile) == 0


@pytest.mark.parametrize("as_of", ["2026-13", "2026-00", "2026-02-30"])
def test_a_price_date_that_does_not_exist_is_a_422_problem(client, session, as_of):
    response = client.post("/v1/hardware", json=custom_profile(price_as_of=as_of))

    assert pointers(response) == ["#/price_as_of"]
    assert count(session, HardwareProfile) == 0


def test_a_taken_slug_is_a_409_problem_and_the_first_profile_is_unchanged(client, session):
    create(client, name="First", price_per_hour="3.50")

    response = client.post("/v1/hardware", json=custom_profile(name="Second", price_per_hour="9.99"))

    body = assert_problem(response, 409)
    assert "our-h100" in body["detail"]
    assert stored(session, "our-h100").name == "First"
    assert count(session, HardwareProfile) == 1
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]


def test_the_slug_of_a_built_in_profile_cannot_be_taken(client, session, catalog):
    response = client.post("/v1/hardware", json=custom_profile(slug="h100-sxm", name="Mine"))

    assert_problem(response, 409)
    profile = stored(session, "h100-sxm")
    assert (profile.name, profile.built_in) == ("NVIDIA H100 SXM", True)
    assert stored_prices(session, "h100-sxm") == [(Decimal("6.88"), "USD", "2026")]
    assert count(session, HardwareProfile) == len(BUILT_IN_SLUGS)


def test_no_partial_row_is_written_when_a_request_fails_halfway(client, session, monkeypatch):
    def failing_price(**_fields):
        raise RuntimeError("the price table is on fire")

    monkeypatch.setattr("service.services.hardware.HardwarePrice", failing_price)

    response = client.post("/v1/hardware", json=custom_profile())

    body = assert_problem(response, 500)
    assert "on fire" not in response.get_data(as_text=True)
    assert body["request_id"]
    assert stored(session, "our-h100") is None
    assert count(session, HardwareProfile) == 0
    assert count(session, HardwarePrice) == 0


# --- If-Match on writes -------------------------------------------------------------------------------------

WRITES = [
    pytest.param("PATCH", {"name": "Renamed"}, 200, id="PATCH"),
    pytest.param("PUT", replacement(name="Renamed"), 200, id="PUT"),
    pytest.param("DELETE", None, 204, id="DELETE"),
]


@pytest.mark.parametrize(("method", "body", "status"), WRITES)
def test_a_write_without_if_match_is_a_428_problem_and_changes_nothing(client, session, method, body, status):
    create(client)

    problem = assert_problem(write(client, method, "our-h100", body), 428)

    assert "If-Match" in problem["detail"]
    profile = stored(session, "our-h100")
    assert (profile.name, profile.version) == ("Our H100", 1)


@pytest.mark.parametrize("if_match", ["", " ", "1", "garbage", 'W/"1" "2"', '"1",'])
@pytest.mark.parametrize(("method", "body", "status"), WRITES)
def test_an_if_match_that_is_neither_star_nor_etags_is_a_400_problem_and_changes_nothing(
    client, session, method, body, status, if_match
):
    # Outside the pattern the description gives the header: not a stale ETag (412), a malformed one.
    create(client)

    problem = assert_problem(write(client, method, "our-h100", body, if_match=if_match), 400)

    assert [error["header"] for error in problem["errors"]] == ["If-Match"]
    profile = stored(session, "our-h100")
    assert (profile.name, profile.version) == ("Our H100", 1)


@pytest.mark.parametrize(("method", "body", "status"), WRITES)
def test_a_write_with_a_stale_etag_is_a_412_problem_and_changes_nothing(
    client, session, method, body, status
):
    stale = create(client).headers["ETag"]
    assert write(client, "PATCH", "our-h100", {"note": "touched"}, if_match=stale).status_code == 200

    problem = assert_problem(write(client, method, "our-h100", body, if_match=stale), 412)

    assert problem["current_etag"] == '"2"'
    profile = stored(session, "our-h100")
    assert (profile.name, profile.note, profile.version) == ("Our H100", "touched", 2)


@pytest.mark.parametrize(("method", "body", "status"), WRITES)
@pytest.mark.parametrize("if_match", ["current", "*", 'W/"0", "1"'])
def test_a_write_with_a_matching_if_match_succeeds(client, session, method, body, status, if_match):
    tag = create(client).headers["ETag"]
    header = tag if if_match == "current" else if_match

    response = write(client, method, "our-h100", body, if_match=header)

    assert response.status_code == status, response.get_json()
    profile = stored(session, "our-h100")
    if method == "DELETE":
        assert response.get_data() == b""
        assert profile is None
    else:
        assert response.headers["ETag"] == '"2"'
        assert response.get_json()["name"] == "Renamed"
        assert (profile.name, profile.version) == ("Renamed", 2)
        assert etag_of(client, "our-h100") == '"2"'


def test_a_weak_etag_never_satisfies_if_match(client, session):
    create(client)

    assert_problem(write(client, "PATCH", "our-h100", {"name": "Renamed"}, if_match='W/"1"'), 412)

    assert stored(session, "our-h100").name == "Our H100"


@pytest.mark.parametrize("if_match", ['"\xff\xfe"', '"1,2"', '"a,b", "1"'])
def test_entity_tags_rfc_9110_allows_are_evaluated_not_refused(client, session, if_match):
    # etagc takes obs-text (bytes 0x80-0xFF, Latin-1 in a header) and commas: a tag holding one is a stale
    # tag (412), or the current one beside it matches; never a malformed header (400).
    create(client)

    response = write(client, "PATCH", "our-h100", {"name": "Renamed"}, if_match=if_match)

    if if_match.endswith('"1"'):
        assert response.status_code == 200, response.get_json()
    else:
        assert_problem(response, 412)
        assert stored(session, "our-h100").name == "Our H100"


def test_writes_to_an_unknown_slug_are_404_problems(client):
    for method, body, _status in [param.values for param in WRITES]:
        assert_problem(write(client, method, "nothing-here", body, if_match="*"), 404)


# --- Changing a custom profile ------------------------------------------------------------------------------


def test_a_patch_of_the_name_keeps_everything_else_and_the_price(client, session):
    created = create(client).get_json()

    response = write(client, "PATCH", "our-h100", {"name": "Our H100 (reserved)"}, if_match='"1"')

    body = response.get_json()
    assert response.status_code == 200
    assert body["name"] == "Our H100 (reserved)"
    unchanged = {k: v for k, v in body.items() if k not in {"name", "updated_at"}}
    assert unchanged == {k: v for k, v in created.items() if k not in {"name", "updated_at"}}
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]


def test_a_patch_with_a_new_price_adds_it_to_the_history_and_keeps_the_old_one(client, session):
    create(client, price_per_hour="3.50", price_as_of="2026-05")

    response = write(
        client,
        "PATCH",
        "our-h100",
        {"price_per_hour": "2.95", "currency": "USD", "price_as_of": "2026-09"},
        if_match='"1"',
    )

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert (body["price_per_hour"], body["price_as_of"]) == ("2.95", "2026-09")
    history = client.get("/v1/hardware/our-h100/prices").get_json()
    assert [(p["price_per_hour"], p["as_of"]) for p in history["items"]] == [
        ("2.95", "2026-09"),
        ("3.50", "2026-05"),
    ]
    assert history["items"][0]["effective_at"] > history["items"][1]["effective_at"]
    assert stored_prices(session, "our-h100") == [
        (Decimal("3.50"), "USD", "2026-05"),
        (Decimal("2.95"), "USD", "2026-09"),
    ]
    assert client.get("/v1/hardware/our-h100").get_json()["price_per_hour"] == "2.95"


def test_a_patch_repeating_the_current_price_adds_no_price_row(client, session):
    create(client)

    response = write(
        client,
        "PATCH",
        "our-h100",
        {"price_per_hour": "3.500", "currency": "USD", "price_as_of": "2026-05"},
        if_match='"1"',
    )

    assert response.status_code == 200
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]


def test_a_patch_of_the_currency_alone_is_a_422_problem_not_silently_ignored(client, session):
    create(client, currency="USD")

    response = write(client, "PATCH", "our-h100", {"currency": "EUR"}, if_match='"1"')

    assert pointers(response) == ["#/price_per_hour"]
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]


def test_a_patch_correcting_only_the_price_source_is_applied(client):
    create(client, price_source="our contract")
    price = {"price_per_hour": "3.50", "currency": "USD", "price_as_of": "2026-05"}

    response = write(client, "PATCH", "our-h100", {**price, "price_source": "contract #42"}, if_match='"1"')

    assert response.get_json()["price_source"] == "contract #42"
    assert client.get("/v1/hardware/our-h100").get_json()["price_source"] == "contract #42"


def test_a_patch_of_the_peaks_replaces_all_of_them(client, session):
    create(client, peak_flops={"bf16": 989.4e12, "fp8": 1978.9e12})

    body = write(client, "PATCH", "our-h100", {"peak_flops": {"fp16": 1e15}}, if_match='"1"').get_json()

    assert body["peak_flops"] == {"fp16": 1e15}
    profile = stored(session, "our-h100")
    assert (profile.peak_flops_fp16, profile.peak_flops_bf16, profile.peak_flops_fp8) == (1e15, None, None)


@pytest.mark.parametrize(
    ("patch", "pointer"),
    [
        ({"peak_flops": {}}, "#/peak_flops"),
        ({"name": None}, "#/name"),
        ({"price_per_hour": "2.00"}, "#/currency"),
        ({"slug": "renamed"}, "#/slug"),
        ({"built_in": True}, "#/built_in"),
    ],
)
def test_an_invalid_patch_is_a_422_problem_and_changes_nothing(client, session, patch, pointer):
    create(client)

    response = write(client, "PATCH", "our-h100", patch, if_match='"1"')

    assert pointers(response) == [pointer]
    profile = stored(session, "our-h100")
    assert (profile.name, profile.slug, profile.built_in, profile.version) == (
        "Our H100",
        "our-h100",
        False,
        1,
    )
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]


def test_a_put_replaces_the_whole_profile_and_omitted_optional_fields_become_null(client, session):
    create(client, interconnect="NVLink 4", tdp_watts=700, note="reserved", peak_flops={"bf16": 1e15})
    body = replacement(
        name="Our H100 v2",
        vendor="Other Cloud",
        peak_flops={"fp8": 2e15},
        price_per_hour=OMIT,
        currency=OMIT,
        price_as_of=OMIT,
        price_source=OMIT,
    )

    response = write(client, "PUT", "our-h100", body, if_match='"1"')

    assert response.status_code == 200, response.get_json()
    result = response.get_json()
    assert (result["name"], result["vendor"], result["peak_flops"]) == (
        "Our H100 v2",
        "Other Cloud",
        {"fp8": 2e15},
    )
    assert (result["interconnect"], result["tdp_watts"], result["note"]) == (None, None, None)
    assert (result["price_per_hour"], result["currency"]) == ("3.50", "USD")
    assert response.headers["ETag"] == '"2"'
    profile = stored(session, "our-h100")
    assert (profile.interconnect, profile.tdp_watts, profile.note, profile.peak_flops_bf16) == (
        None,
        None,
        None,
        None,
    )
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]


def test_a_put_with_a_new_price_adds_it_to_the_history(client, session):
    create(client)

    response = write(
        client, "PUT", "our-h100", replacement(price_per_hour="4.10", currency="EUR"), if_match='"1"'
    )

    assert (response.get_json()["price_per_hour"], response.get_json()["currency"]) == ("4.10", "EUR")
    assert stored_prices(session, "our-h100") == [
        (Decimal("3.50"), "USD", "2026-05"),
        (Decimal("4.10"), "EUR", "2026-05"),
    ]


@pytest.mark.parametrize("missing", ["name", "vendor", "peak_flops", "memory_bytes", "source"])
def test_a_put_missing_a_required_field_is_a_422_problem_and_changes_nothing(client, session, missing):
    create(client)

    response = write(
        client, "PUT", "our-h100", replacement(**{"name": "Renamed", missing: OMIT}), if_match='"1"'
    )

    assert pointers(response) == [f"#/{missing}"]
    profile = stored(session, "our-h100")
    assert (profile.name, profile.version) == ("Our H100", 1)


def test_a_put_naming_the_slug_in_the_body_is_a_422_problem(client, session):
    create(client)

    response = write(client, "PUT", "our-h100", custom_profile(name="Renamed"), if_match='"1"')

    assert pointers(response) == ["#/slug"]
    assert stored(session, "our-h100").name == "Our H100"


# --- As installed in a cluster ------------------------------------------------------------------------------

CLUSTER = {
    "accelerators_per_node": 8,
    "scale_up_bandwidth_bytes_per_second": 450 * 10**9,
    "scale_out_bandwidth_bytes_per_second": 50 * 10**9,
    "failures_per_accelerator_hour": 1.97e-5,
}


def cluster_of(body_or_profile) -> dict:
    if isinstance(body_or_profile, dict):
        return {name: body_or_profile[name] for name in CLUSTER}
    return {name: getattr(body_or_profile, name) for name in CLUSTER}


def test_a_built_in_profile_says_how_its_reference_system_installs_it(client, catalog):
    body = client.get("/v1/hardware/h100-sxm").get_json()

    assert cluster_of(body) == CLUSTER
    assert "DGX H100" in body["source"]


def test_a_profile_created_with_its_cluster_figures_stores_and_reads_them_back(client, session):
    response = create(client, **CLUSTER)

    assert cluster_of(response.get_json()) == CLUSTER
    assert cluster_of(client.get("/v1/hardware/our-h100").get_json()) == CLUSTER
    assert cluster_of(stored(session, "our-h100")) == CLUSTER


def test_cluster_figures_not_given_are_null(client, session):
    body = create(client).get_json()

    assert cluster_of(body) == dict.fromkeys(CLUSTER)
    assert cluster_of(stored(session, "our-h100")) == dict.fromkeys(CLUSTER)


def test_cluster_figures_given_as_null_are_not_given(client, session):
    body = create(client, **dict.fromkeys(CLUSTER)).get_json()

    assert cluster_of(body) == dict.fromkeys(CLUSTER)


def test_a_failure_rate_of_zero_is_allowed(client):
    assert create(client, failures_per_accelerator_hour=0).get_json()["failures_per_accelerator_hour"] == 0


def test_a_patch_of_a_cluster_figure_changes_the_etag_and_nothing_else(client, session):
    create(client, **CLUSTER)

    response = write(
        client, "PATCH", "our-h100", {"scale_out_bandwidth_bytes_per_second": 100 * 10**9}, if_match='"1"'
    )

    assert response.status_code == 200, response.get_json()
    assert response.headers["ETag"] == '"2"'
    assert cluster_of(response.get_json()) == {**CLUSTER, "scale_out_bandwidth_bytes_per_second": 100 * 10**9}
    assert stored(session, "our-h100").scale_out_bandwidth_bytes_per_second == 100 * 10**9
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]
    assert write(client, "PATCH", "our-h100", {"name": "x"}, if_match='"1"').status_code == 412


def test_a_patch_to_null_clears_a_cluster_figure(client, session):
    create(client, **CLUSTER)

    body = write(client, "PATCH", "our-h100", {"accelerators_per_node": None}, if_match='"1"').get_json()

    assert cluster_of(body) == {**CLUSTER, "accelerators_per_node": None}
    assert stored(session, "our-h100").accelerators_per_node is None


def test_a_patch_restating_the_cluster_figures_keeps_the_etag(client):
    create(client, **CLUSTER)

    response = write(client, "PATCH", "our-h100", CLUSTER, if_match='"1"')

    assert response.headers["ETag"] == '"1"'


def test_a_put_without_the_cluster_figures_makes_them_null_and_keeps_the_price_history(client, session):
    create(client, **CLUSTER)

    response = write(client, "PUT", "our-h100", replacement(), if_match='"1"')

    assert cluster_of(response.get_json()) == dict.fromkeys(CLUSTER)
    assert response.headers["ETag"] == '"2"'
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("accelerators_per_node", 0),
        ("accelerators_per_node", -8),
        ("accelerators_per_node", 8.5),
        ("accelerators_per_node", "8"),
        ("accelerators_per_node", True),
        ("accelerators_per_node", 1_000_001),
        ("scale_up_bandwidth_bytes_per_second", -450 * 10**9),
        ("scale_up_bandwidth_bytes_per_second", 0),
        ("scale_up_bandwidth_bytes_per_second", 10**17),
        ("scale_up_bandwidth_bytes_per_second", "450e9"),
        ("scale_out_bandwidth_bytes_per_second", -1),
        ("scale_out_bandwidth_bytes_per_second", 0.5),
        ("failures_per_accelerator_hour", -1e-5),
        ("failures_per_accelerator_hour", 1),
        ("failures_per_accelerator_hour", 2.5),
        ("failures_per_accelerator_hour", "1e-5"),
    ],
)
def test_an_invalid_cluster_figure_is_a_422_problem_naming_it(client, session, field, value):
    response = client.post("/v1/hardware", json=custom_profile(**{field: value}))

    assert pointers(response) == [f"#/{field}"]
    assert count(session, HardwareProfile) == 0


@pytest.mark.parametrize("field", list(CLUSTER))
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_cluster_figure_is_a_422_problem_naming_it(client, session, field, literal):
    raw = json.dumps(custom_profile())[:-1] + f', "{field}": {literal}}}'

    response = client.post("/v1/hardware", data=raw, content_type="application/json")

    assert pointers(response) == [f"#/{field}"]
    assert count(session, HardwareProfile) == 0


def test_an_invalid_cluster_figure_in_a_patch_changes_nothing(client, session):
    create(client, **CLUSTER)

    response = write(client, "PATCH", "our-h100", {"failures_per_accelerator_hour": -1}, if_match='"1"')

    assert pointers(response) == ["#/failures_per_accelerator_hour"]
    profile = stored(session, "our-h100")
    assert (cluster_of(profile), profile.version) == (CLUSTER, 1)


# --- Built-in profiles are read-only ------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "body", "status"), WRITES)
def test_a_built_in_profile_cannot_be_changed_or_deleted(client, session, catalog, method, body, status):
    tag = etag_of(client, "h100-sxm")

    problem = assert_problem(write(client, method, "h100-sxm", body, if_match=tag), 409)

    assert "built in" in problem["detail"]
    profile = stored(session, "h100-sxm")
    assert (profile.name, profile.built_in, profile.version) == ("NVIDIA H100 SXM", True, 1)
    assert stored_prices(session, "h100-sxm") == [(Decimal("6.88"), "USD", "2026")]


# --- Deleting -----------------------------------------------------------------------------------------------


def create_budget_allowing(client, *slugs: str):
    organization = client.post("/v1/organizations", json={"slug": "acme", "name": "Acme Research"})
    assert organization.status_code == 201, organization.get_json()
    budget = client.post(
        "/v1/budgets",
        json={
            "organization": "acme",
            "name": "Q3 pretraining",
            "amount": "1000.00",
            "currency": "USD",
            "period_start": "2026-07-01T00:00:00+00:00",
            "period_end": "2026-10-01T00:00:00+00:00",
            "allowed_hardware": list(slugs),
        },
    )
    assert budget.status_code == 201, budget.get_json()
    return budget


def test_a_profile_a_budget_allows_cannot_be_deleted(client, session):
    create(client)
    create_budget_allowing(client, "our-h100")

    problem = assert_problem(write(client, "DELETE", "our-h100", if_match='"1"'), 409)

    assert "budget" in problem["detail"]
    assert problem["budgets"] == 1
    assert stored(session, "our-h100") is not None
    assert stored_prices(session, "our-h100") == [(Decimal("3.50"), "USD", "2026-05")]


def test_deleting_an_unused_profile_removes_it_and_its_prices(client, session):
    create(client)
    write(client, "PATCH", "our-h100", {"price_per_hour": "2.95", "currency": "USD"}, if_match='"1"')
    create(client, slug="kept-gpu")

    response = write(client, "DELETE", "our-h100", if_match='"2"')

    assert response.status_code == 204
    assert response.get_data() == b""
    assert stored(session, "our-h100") is None
    assert stored_prices(session, "our-h100") == []
    assert count(session, HardwarePrice) == 1  # kept-gpu's
    assert_problem(client.get("/v1/hardware/our-h100"), 404)
    assert_problem(client.get("/v1/hardware/our-h100/prices"), 404)


# --- Price history ------------------------------------------------------------------------------------------


def test_the_prices_of_an_unknown_slug_are_a_404_problem(client):
    body = assert_problem(client.get("/v1/hardware/nothing-here/prices"), 404)

    assert "nothing-here" in body["detail"]


def test_the_prices_of_a_profile_without_a_price_are_an_empty_list(client):
    create(client, price_per_hour=OMIT, currency=OMIT, price_as_of=OMIT, price_source=OMIT)

    body = client.get("/v1/hardware/our-h100/prices").get_json()

    assert body == {"items": [], "next_cursor": None}


def test_the_price_history_is_newest_first_in_pages(client):
    create(client, price_per_hour="1.00")
    for version, price in enumerate(["2.00", "3.00", "4.00", "5.00"], start=1):
        response = write(
            client, "PATCH", "our-h100", {"price_per_hour": price, "currency": "USD"}, if_match=f'"{version}"'
        )
        assert response.status_code == 200, response.get_json()

    first = client.get("/v1/hardware/our-h100/prices?limit=2")
    page = first.get_json()
    assert [p["price_per_hour"] for p in page["items"]] == ["5.00", "4.00"]
    assert first.headers["Link"].startswith("</v1/hardware/our-h100/prices?")
    assert f"cursor={page['next_cursor']}" in first.headers["Link"]
    second = client.get(f"/v1/hardware/our-h100/prices?limit=2&cursor={page['next_cursor']}").get_json()
    assert [p["price_per_hour"] for p in second["items"]] == ["3.00", "2.00"]
    last = client.get(f"/v1/hardware/our-h100/prices?limit=2&cursor={second['next_cursor']}")
    assert [p["price_per_hour"] for p in last.get_json()["items"]] == ["1.00"]
    assert last.get_json()["next_cursor"] is None
    assert "Link" not in last.headers


def test_the_built_in_price_history_names_its_source(client, catalog):
    body = client.get("/v1/hardware/h100-sxm/prices").get_json()

    assert len(body["items"]) == 1
    price = body["items"][0]
    assert (price["price_per_hour"], price["currency"], price["as_of"]) == ("6.88", "USD", "2026")
    assert price["source"].startswith("AWS p5.48xlarge")
    effective_at = datetime.fromisoformat(price["effective_at"])
    assert abs(datetime.now(UTC) - effective_at) < timedelta(minutes=5)


# --- Planning on custom hardware ----------------------------------------------------------------------------


def test_an_allocation_on_a_custom_profile_uses_its_price(client):
    create(client, slug="our-h100", price_per_hour="3.50", currency="USD")

    response = client.post("/v1/allocations", json={"flops": 1e22, "hardware": "our-h100", "accelerators": 8})

    assert response.status_code == 200, response.get_json()
    estimate = response.get_json()["estimate"]
    assert estimate["hardware"]["slug"] == "our-h100"
    assert (estimate["price_per_hour"], estimate["currency"]) == ("3.50", "USD")
    hours = Decimal(repr(estimate["accelerator_hours"]))
    assert Decimal(estimate["cost"]) == (hours * Decimal("3.50")).quantize(Decimal("0.01"))


def test_an_allocation_after_a_price_change_uses_the_new_price(client):
    create(client, price_per_hour="3.50")
    write(client, "PATCH", "our-h100", {"price_per_hour": "2.25", "currency": "USD"}, if_match='"1"')

    response = client.post("/v1/allocations", json={"flops": 1e22, "hardware": "our-h100", "accelerators": 8})

    assert response.get_json()["estimate"]["price_per_hour"] == "2.25"

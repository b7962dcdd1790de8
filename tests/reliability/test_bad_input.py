"""Hostile input, sent over HTTP to the real server: each request must get a clean 4xx answer.

Clean means a status in 400-499, `application/problem+json`, a body whose `status` is the HTTP status and
which carries a `detail`, and, for a validation failure (422), an `errors` entry that names the offending
field (pointer, parameter or header). Never a 5xx, never a dropped connection, never an HTML error page.
SQL metacharacters in free text may instead be stored verbatim (2xx): "O'Brien; DROP TABLE x" is a name.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator

import pytest
import requests

from tests.reliability.conftest import AUTH

pytestmark = pytest.mark.reliability

PROBLEM = "application/problem+json"
JSON = "application/json"
LOCATORS = ("pointer", "parameter", "header")
ORG = "hostile"
START_AT = "2027-02-01T00:00:00Z"
MIB = 1024 * 1024
TEN_MB = 10 * 1000 * 1000


# --- Helpers ---------------------------------------------------------------------------------------------


def send(
    server,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    content_type: str | None = JSON,
    headers: dict | None = None,
    **kwargs,
) -> requests.Response:
    """One request with the admin key; the body as given, byte for byte."""
    sent = {**AUTH, **({"Content-Type": content_type} if content_type else {}), **(headers or {})}
    return requests.request(method, f"{server.base}{path}", data=body, headers=sent, timeout=120, **kwargs)


def send_verbatim(server, method: str, path: str) -> requests.Response:
    """A GET whose path goes out as written: requests would otherwise resolve `..` segments itself."""
    prepared = requests.Request(method, f"{server.base}/", headers=AUTH).prepare()
    prepared.url = f"{server.base}{path}"
    with requests.Session() as session:
        return session.send(prepared, timeout=60)


def as_json(document: dict, **raw: bytes) -> bytes:
    """`document` as JSON, with the members named in `raw` set to those bytes (literals json cannot write)."""
    marked = {**document, **{name: f"@{name}@" for name in raw}}
    encoded = json.dumps(marked).encode()
    for name, literal in raw.items():
        encoded = encoded.replace(f'"@{name}@"'.encode(), literal)
    return encoded


def _names(where: str, field: str) -> bool:
    return where == field or where.startswith(field.rstrip("/") + "/")


def assert_clean_4xx(
    response: requests.Response, field: str | None = None, status: int | None = None
) -> dict:
    """A problem with a 4xx status; a 422 (or any problem listing errors) names `field` when it is given."""
    shown = f"{response.status_code} {response.headers.get('Content-Type')}: {response.text[:600]}"
    assert 400 <= response.status_code < 500, shown
    if status is not None:
        assert response.status_code == status, shown
    assert response.headers.get("Content-Type") == PROBLEM, shown
    body = response.json()
    assert body["status"] == response.status_code, body
    assert isinstance(body.get("detail"), str), body
    assert body["detail"], body
    assert body.get("request_id") == response.headers.get("X-Request-ID"), body
    if response.status_code == 422 or (field is not None and "errors" in body):
        located = [entry[key] for entry in body.get("errors") or [] for key in LOCATORS if key in entry]
        assert located, f"no error entry names a field: {body}"
        if field is not None:
            assert any(_names(where, field) for where in located), f"{field} is not named: {body}"
    return body


def at(document, pointer: str):
    """The member of `document` at a JSON pointer such as #/labels/team."""
    for token in pointer.removeprefix("#/").split("/"):
        document = document[token.replace("~1", "/").replace("~0", "~")]
    return document


def fresh_slug(prefix: str = "x") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# --- The world the cases need ----------------------------------------------------------------------------


def budget_body(**changes) -> dict:
    return {
        "organization": ORG,
        "name": "Hostile budget",
        "amount": "1000000.00",
        "currency": "USD",
        "period_start": "2027-01-01T00:00:00Z",
        "period_end": "2029-01-01T00:00:00Z",
        **changes,
    }


def plan_body(**changes) -> dict:
    return {
        "organization": ORG,
        "hardware": "h100-sxm",
        "accelerators": 8,
        "params": 1e8,
        "tokens": 2e9,
        "start_at": START_AT,
        **changes,
    }


def hardware_body(**changes) -> dict:
    return {
        "slug": fresh_slug("hw"),
        "name": "Hostile accelerator",
        "vendor": "Hostile",
        "peak_flops": {"bf16": 1e15},
        "memory_bytes": 80_000_000_000,
        "memory_bandwidth_bytes_per_second": 3_350_000_000_000,
        "source": "a test",
        **changes,
    }


@pytest.fixture(scope="module")
def world(shared_server) -> dict:
    """An organisation, a budget and a plan, made through the API."""
    shared_server.call("POST", "/v1/organizations", 201, json={"slug": ORG, "name": "Hostile"})
    budget = shared_server.call("POST", "/v1/budgets", 201, json=budget_body())
    plan = shared_server.call(
        "POST", "/v1/plans", 201, json=plan_body(budget_id=budget["id"], labels={"team": "alpha"})
    )
    return {"budget": budget, "plan": plan}


@pytest.fixture
def server(shared_server, world):
    """The shared server, with the world made."""
    return shared_server


def revise_path(world) -> str:
    return f"/v1/plans/{world['plan']['id']}/revise"


# --- 1. Huge and non-finite numbers ----------------------------------------------------------------------

NUMBER_LITERALS = {
    "1e309": b"1e309",
    "-1e309": b"-1e309",
    "NaN": b"NaN",
    "Infinity": b"Infinity",
    "-Infinity": b"-Infinity",
    "10**400": b"1" + b"0" * 400,
    "-10**400": b"-1" + b"0" * 400,
    "-0": b"-0",
    "-0.0": b"-0.0",
    "1e-400": b"1e-400",
}

# (path, the body around the number, the member that holds it)
NUMBER_TARGETS = {
    "allocation-pf_days": ("/v1/allocations", {}, "pf_days"),
    "allocation-flops": ("/v1/allocations", {}, "flops"),
    "allocation-accelerators": ("/v1/allocations", {"pf_days": 6000, "hardware": "h100-sxm"}, "accelerators"),
    "estimate-params": (
        "/v1/estimates",
        {"tokens": 2e12, "hardware": "h100-sxm", "accelerators": 8},
        "params",
    ),
    "plan-params": ("/v1/plans", {k: v for k, v in plan_body().items() if k != "params"}, "params"),
    "plan-accelerators": (
        "/v1/plans",
        {k: v for k, v in plan_body().items() if k != "accelerators"},
        "accelerators",
    ),
    "budget-amount": ("/v1/budgets", {k: v for k, v in budget_body().items() if k != "amount"}, "amount"),
    "budget-max_flops": ("/v1/budgets", budget_body(), "max_flops"),
}


@pytest.mark.parametrize("literal", list(NUMBER_LITERALS.values()), ids=list(NUMBER_LITERALS))
@pytest.mark.parametrize("target", list(NUMBER_TARGETS.values()), ids=list(NUMBER_TARGETS))
def test_huge_and_non_finite_numbers_are_422_naming_the_field(server, target, literal):
    path, around, member = target
    response = send(server, "POST", path, as_json(around, **{member: literal}))
    assert_clean_4xx(response, f"#/{member}", status=422)


QUERY_NUMBERS = {
    "1e309": "1e309",
    "-1e309": "-1e309",
    "NaN": "NaN",
    "Infinity": "Infinity",
    "10**400": "1" + "0" * 400,
    "4000-digits": "9" * 4000,
    "-0": "-0",
    "0x10": "0x10",
}

QUERY_NUMBER_TARGETS = {
    "plans-limit": ("/v1/plans", {}, "limit"),
    "organizations-limit": ("/v1/organizations", {}, "limit"),
    "isoflop-flops": ("/v1/scaling-laws/chinchilla-2022/isoflop", {}, "flops"),
    "isoflop-points": ("/v1/scaling-laws/chinchilla-2022/isoflop", {"flops": "1e21"}, "points"),
    "frontier-min_flops": ("/v1/scaling-laws/chinchilla-2022/frontier", {"max_flops": "1e24"}, "min_flops"),
}


@pytest.mark.parametrize("number", list(QUERY_NUMBERS.values()), ids=list(QUERY_NUMBERS))
@pytest.mark.parametrize("target", list(QUERY_NUMBER_TARGETS.values()), ids=list(QUERY_NUMBER_TARGETS))
def test_huge_and_non_finite_numbers_in_the_query_are_422_naming_the_parameter(server, target, number):
    path, others, name = target
    response = send(server, "GET", path, params={**others, name: number})
    assert_clean_4xx(response, name, status=422)


TOO_MANY_DIGITS = b"9" * 5000  # beyond Python's limit on converting decimal strings to int (4300 digits)


@pytest.mark.parametrize(
    ("path", "around", "member"),
    [
        pytest.param(*NUMBER_TARGETS["allocation-accelerators"], id="allocation-accelerators"),
        pytest.param(*NUMBER_TARGETS["plan-params"], id="plan-params"),
        pytest.param("/v1/scaling-laws", {"organization": ORG, "name": "Digits"}, "runs", id="fit-runs"),
    ],
)
def test_an_integer_literal_too_long_for_python_to_convert_is_a_clean_4xx(server, path, around, member):
    response = send(server, "POST", path, as_json(around, **{member: TOO_MANY_DIGITS}))
    assert_clean_4xx(response, f"#/{member}")


# --- 2. Deep nesting -------------------------------------------------------------------------------------

DEEP = 100_000
BODY_PATHS = [
    "/v1/organizations",
    "/v1/budgets",
    "/v1/plans",
    "/v1/allocations",
    "/v1/scaling-laws",
    "revise",
]


def deep_json(depth: int, kind: str) -> bytes:
    opening, closing = (b"[", b"]") if kind == "array" else (b'{"a":', b"}")
    return opening * depth + b"1" + closing * depth


@pytest.mark.parametrize("kind", ["array", "object"])
@pytest.mark.parametrize("path", BODY_PATHS)
def test_a_body_nested_100_000_levels_deep_is_a_clean_4xx(server, world, path, kind):
    path = revise_path(world) if path == "revise" else path
    assert_clean_4xx(send(server, "POST", path, deep_json(DEEP, kind)))


LABEL_TARGETS = {
    "plan": ("/v1/plans", plan_body()),
    "budget": ("/v1/budgets", budget_body()),
    "revise": ("revise", {}),
}


@pytest.mark.parametrize("depth", [100, 500, 800, 900, 950, 1000, 2000])
@pytest.mark.parametrize("target", list(LABEL_TARGETS.values()), ids=list(LABEL_TARGETS))
def test_labels_nested_hundreds_of_levels_deep_are_a_clean_4xx(server, world, target, depth):
    path, around = target
    path = revise_path(world) if path == "revise" else path
    response = send(
        server, "POST", path, as_json(around, labels=b'{"team":' + deep_json(depth, "object") + b"}")
    )
    assert_clean_4xx(response, "#/labels")


# --- 3. Bodies over the limit ----------------------------------------------------------------------------


def ten_megabytes_of_json() -> bytes:
    return b'{"slug": "big", "name": "' + b"x" * TEN_MB + b'"}'


def chunks(total: int = TEN_MB) -> Iterator[bytes]:
    """A generator body: requests sends it with Transfer-Encoding: chunked and no Content-Length."""
    yield b'{"slug": "big", "name": "'
    piece = b"x" * 65536
    for _ in range(total // len(piece) + 1):
        yield piece
    yield b'"}'


@pytest.mark.parametrize(
    "path", ["/v1/organizations", "/v1/budgets", "/v1/plans", "/v1/allocations", "revise"]
)
def test_a_10_mb_body_is_413(server, world, path):
    path = revise_path(world) if path == "revise" else path
    assert_clean_4xx(send(server, "POST", path, ten_megabytes_of_json()), status=413)


@pytest.mark.parametrize(
    "path", ["/v1/organizations", "/v1/budgets", "/v1/plans", "/v1/allocations", "revise"]
)
def test_a_10_mb_chunked_body_without_content_length_is_413(server, world, path):
    path = revise_path(world) if path == "revise" else path
    assert_clean_4xx(send(server, "POST", path, chunks()), status=413)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_training_runs_over_16_mib_are_413(server, chunked):
    total = 17 * MIB
    body = chunks(total) if chunked else b'{"name": "' + b"x" * total + b'"}'
    assert_clean_4xx(send(server, "POST", "/v1/scaling-laws", body), status=413)


def test_a_10_mb_body_that_is_not_json_is_a_clean_4xx(server):
    response = send(server, "POST", "/v1/organizations", b"x" * TEN_MB, content_type="text/plain")
    assert response.status_code in (413, 415)
    assert_clean_4xx(response)


# --- 4. Invalid UTF-8 ------------------------------------------------------------------------------------

BAD_BYTES = {
    "ff-fe": b"\xff\xfe",
    "lone-continuation": b"\x80",
    "overlong-slash": b"\xc0\xaf",
    "truncated-sequence": b"\xe2\x82",
    "encoded-surrogate": b"\xed\xa0\x80",
}

UTF8_TARGETS = {
    "organization-slug": ("/v1/organizations", {"name": "x"}, "slug"),
    "organization-name": ("/v1/organizations", {"slug": "utf8-test"}, "name"),
    "budget-name": ("/v1/budgets", budget_body(), "name"),
    "plan-name": ("/v1/plans", plan_body(), "name"),
    "allocation-law": ("/v1/allocations", {"pf_days": 1}, "law"),
    "fit-name": ("/v1/scaling-laws", {"organization": ORG, "runs": []}, "name"),
    "revise-name": ("revise", {}, "name"),
}


@pytest.mark.parametrize("bad", list(BAD_BYTES.values()), ids=list(BAD_BYTES))
@pytest.mark.parametrize("target", list(UTF8_TARGETS.values()), ids=list(UTF8_TARGETS))
def test_invalid_utf8_in_a_json_body_is_400_or_422_naming_the_field(server, world, target, bad):
    path, around, member = target
    path = revise_path(world) if path == "revise" else path
    response = send(server, "POST", path, as_json(around, **{member: b'"' + bad + b'"'}))
    # 400 where the body is decoded as UTF-8; a JSON decoder that lets an encoded surrogate through
    # (json.loads on bytes decodes with surrogatepass) leaves it to the field, which refuses it.
    assert response.status_code in (400, 422), response.text
    assert_clean_4xx(response, f"#/{member}")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\xef\xbb\xbf" + json.dumps({"slug": "bom", "name": "x"}).encode(), id="utf8-bom"),
        pytest.param(json.dumps({"slug": "utf16", "name": "x"}).encode("utf-16"), id="utf16"),
        pytest.param(json.dumps({"slug": "utf32", "name": "x"}).encode("utf-32"), id="utf32"),
    ],
)
def test_a_json_body_in_another_encoding_is_a_clean_4xx(server, body):
    assert_clean_4xx(send(server, "POST", "/v1/organizations", body))


@pytest.mark.parametrize(
    ("path", "around", "member"),
    [
        pytest.param("/v1/organizations", {"slug": "surrogate"}, "name", id="organization-name"),
        pytest.param("/v1/budgets", budget_body(), "name", id="budget-name"),
        pytest.param("/v1/plans", plan_body(), "name", id="plan-name"),
        pytest.param("/v1/hardware", hardware_body(), "vendor", id="hardware-vendor"),
        pytest.param("/v1/plans", plan_body(), "labels", id="label-key"),
        pytest.param("/v1/organizations", {"slug": "surrogate", "name": "x"}, "(a member)", id="member-name"),
    ],
)
def test_an_escaped_lone_surrogate_is_422_naming_the_field(server, path, around, member):
    surrogate = b'"a\\ud800b"'
    if member == "labels":
        body = as_json(around, labels=b"{" + surrogate + b': "x"}')
    elif member == "(a member)":
        body = json.dumps(around).encode()[:-1] + b", " + surrogate + b": 1}"
    else:
        body = as_json(around, **{member: surrogate})
    response = send(server, "POST", path, body)
    assert_clean_4xx(response, None if member == "(a member)" else f"#/{member}", status=422)


@pytest.mark.parametrize(
    ("path", "query", "parameter"),
    [
        pytest.param("/v1/plans", "organization=%FF%FE", "organization", id="plans-organization"),
        pytest.param("/v1/plans", "hardware=%C0%AF", "hardware", id="plans-hardware"),
        pytest.param("/v1/plans", "status=%FF", "status", id="plans-status"),
        pytest.param("/v1/plans", "label=%FF:x", "label", id="plans-label-key"),
        pytest.param("/v1/plans", "limit=%FF", "limit", id="plans-limit"),
        pytest.param("/v1/plans", "cursor=%FF%FE", "cursor", id="plans-cursor"),
        pytest.param("/v1/plans", "budget_id=%FF", "budget_id", id="plans-budget_id"),
        pytest.param("/v1/plans", "created_from=2027-01-01T00:00:00%FF", "created_from", id="plans-created"),
        pytest.param("/v1/budgets", "organization=%ED%A0%80", "organization", id="budgets-organization"),
        pytest.param("/v1/scaling-laws", "kind=%FF", "kind", id="laws-kind"),
        pytest.param("/v1/plans/compare", "ids=%FF,%FE", "ids", id="compare-ids"),
        pytest.param("/v1/plans", "%FF=1", None, id="parameter-name"),
    ],
)
def test_invalid_utf8_in_a_query_value_is_422_naming_the_parameter(server, path, query, parameter):
    response = send(server, "GET", f"{path}?{query}")
    assert_clean_4xx(response, parameter, status=422)


@pytest.mark.parametrize("query", ["vendor=%FF%FE", "label=team:%FF%FE"], ids=["vendor", "label-value"])
def test_invalid_utf8_in_a_free_text_filter_finds_nothing_or_is_refused(server, query):
    path = "/v1/hardware" if query.startswith("vendor") else "/v1/plans"
    response = send(server, "GET", f"{path}?{query}")
    if response.status_code == 200:
        assert response.json()["items"] == []
    else:
        assert_clean_4xx(response, query.split("=")[0])


def test_invalid_utf8_in_the_idempotency_key_is_400_naming_the_header(server):
    response = send(
        server,
        "POST",
        "/v1/plans",
        json.dumps(plan_body()).encode(),
        headers={"Idempotency-Key": b"\xff\xfe"},
    )
    assert_clean_4xx(response, "Idempotency-Key", status=400)
    assert response.json()["errors"], response.text


def test_invalid_utf8_in_the_authorization_header_is_401(server):
    response = send(server, "GET", "/v1/plans", headers={"Authorization": b"Bearer \xff\xfe"})
    assert_clean_4xx(response, status=401)


def test_invalid_utf8_in_the_content_type_is_415(server):
    body = json.dumps({"slug": "ctype", "name": "x"}).encode()
    response = send(server, "POST", "/v1/organizations", body, content_type=b"application/json\xff")
    assert_clean_4xx(response, status=415)


def test_invalid_utf8_in_if_match_is_412(server, world):
    response = send(
        server,
        "PATCH",
        f"/v1/budgets/{world['budget']['id']}",
        b'{"name": "renamed"}',
        headers={"If-Match": b'"\xff\xfe"'},
    )
    assert_clean_4xx(response, status=412)


def test_an_unusable_request_id_is_replaced_not_echoed(server):
    response = send(server, "GET", "/v1/organizations/nobody-here", headers={"X-Request-ID": b"\xff\xfe<x>"})
    body = assert_clean_4xx(response, status=404)
    assert body["request_id"].isalnum()


# --- 5. Wrong content types ------------------------------------------------------------------------------

CONTENT_TYPE_CASES = {
    "text-plain": ("text/plain", b'{"slug": "ctype", "name": "x"}'),
    "form-urlencoded": ("application/x-www-form-urlencoded", b"slug=ctype&name=x"),
    "xml": ("application/xml", b'<?xml version="1.0"?><organization><slug>ctype</slug></organization>'),
    "xml-entity-bomb": (
        "text/xml",
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;">]><x>&b;</x>',
    ),
    "csv": ("text/csv", b"slug,name\nctype,x\n"),
    "no-content-type": (None, b'{"slug": "ctype", "name": "x"}'),
    "latin-1-charset": (
        "application/json; charset=latin-1",
        '{"slug": "ctype", "name": "Café"}'.encode("latin-1"),
    ),
    "octet-stream": ("application/octet-stream", b'{"slug": "ctype", "name": "x"}'),
}
CONTENT_TYPE_PATHS = ["/v1/organizations", "/v1/budgets", "/v1/plans", "/v1/allocations", "revise"]


@pytest.mark.parametrize("case", list(CONTENT_TYPE_CASES.values()), ids=list(CONTENT_TYPE_CASES))
@pytest.mark.parametrize("path", CONTENT_TYPE_PATHS)
def test_a_body_that_is_not_json_is_415(server, world, path, case):
    content_type, body = case
    path = revise_path(world) if path == "revise" else path
    response = send(server, "POST", path, body, content_type=content_type)
    # Declared JSON in another charset: JSON is UTF-8 (RFC 8259), so its Latin-1 bytes are malformed.
    expected = 400 if content_type and content_type.startswith(JSON) else 415
    assert_clean_4xx(response, status=expected)


@pytest.mark.parametrize("path", CONTENT_TYPE_PATHS)
def test_a_multipart_upload_to_an_operation_that_takes_json_is_415(server, world, path):
    path = revise_path(world) if path == "revise" else path
    files = {"runs": ("runs.csv", b"params,tokens,loss\n1e7,1e9,3.5\n", "text/csv")}
    response = requests.post(
        f"{server.base}{path}", headers=AUTH, data={"slug": "multi"}, files=files, timeout=60
    )
    assert_clean_4xx(response, status=415)


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "text/csv", None])
def test_training_runs_in_a_media_type_other_than_json_or_multipart_are_415(server, content_type):
    body = b"params,tokens,loss\n1e7,1e9,3.5\n"
    response = send(server, "POST", "/v1/scaling-laws", body, content_type=content_type)
    assert_clean_4xx(response, status=415)


@pytest.mark.parametrize(
    "body",
    [b"null", b"[]", b'"a string"', b"42", b"true", b"[{}]"],
    ids=["null", "array", "string", "number", "boolean", "array-of-object"],
)
@pytest.mark.parametrize("path", ["/v1/organizations", "/v1/plans", "/v1/scaling-laws", "revise"])
def test_json_that_is_not_an_object_is_a_clean_4xx(server, world, path, body):
    path = revise_path(world) if path == "revise" else path
    response = send(server, "POST", path, body)
    assert_clean_4xx(response, "#")


@pytest.mark.parametrize("body", [b"", b"{", b'{"slug": "a",}', b"{'slug': 'a'}", b'{"slug": "a"} {}'])
def test_empty_or_malformed_json_is_a_clean_4xx(server, body):
    response = send(server, "POST", "/v1/organizations", body)
    assert response.status_code in (400, 422), response.text
    assert_clean_4xx(response, "#/slug" if response.status_code == 422 else None)


# --- 6. SQL metacharacters and NUL bytes in every string field ----------------------------------------

SQL_VALUES = {
    "or-1-equals-1": "' OR '1'='1",
    "drop-table": "'; DROP TABLE plans; --",
    "double-quote-or": '" OR ""="',
    "like-wildcard-comment": "%' --",
    "nul-byte": "\x00",
    "nul-inside": "a\x00b",
    "obrien": "O'Brien; DROP TABLE x",
    "union-select": "x' UNION SELECT key_id, secret_hash FROM api_keys --",
    "backslash-quote": "\\'; SELECT pg_sleep(5); --",
}

# (path, a body holding the value, where it is: the pointer a refusal names and, unless a fourth member says
# otherwise, where a success stores it)
BODY_FIELDS: dict[str, tuple] = {
    "organization-slug": ("/v1/organizations", lambda v: {"slug": v, "name": "x"}, "#/slug"),
    "organization-name": ("/v1/organizations", lambda v: {"slug": fresh_slug("sql"), "name": v}, "#/name"),
    "budget-name": ("/v1/budgets", lambda v: budget_body(name=v), "#/name"),
    "budget-organization": ("/v1/budgets", lambda v: budget_body(organization=v), "#/organization"),
    "budget-currency": ("/v1/budgets", lambda v: budget_body(currency=v), "#/currency"),
    "budget-allowed-hardware": (
        "/v1/budgets",
        lambda v: budget_body(allowed_hardware=[v]),
        "#/allowed_hardware",
    ),
    "budget-label-key": ("/v1/budgets", lambda v: budget_body(labels={v: "x"}), "#/labels"),
    "budget-label-value": ("/v1/budgets", lambda v: budget_body(labels={"team": v}), "#/labels/team"),
    "plan-organization": ("/v1/plans", lambda v: plan_body(organization=v), "#/organization"),
    "plan-hardware": ("/v1/plans", lambda v: plan_body(hardware=v), "#/hardware"),
    "plan-name": ("/v1/plans", lambda v: plan_body(name=v), "#/name"),
    "plan-label-key": ("/v1/plans", lambda v: plan_body(labels={v: "x"}), "#/labels"),
    "plan-label-value": ("/v1/plans", lambda v: plan_body(labels={"team": v}), "#/labels/team"),
    "plan-law": (
        "/v1/plans",
        lambda v: {**plan_body(params=None, tokens=None), "pf_days": 1, "law": v},
        "#/law",
    ),
    "plan-inline-hardware-name": (
        "/v1/plans",
        lambda v: plan_body(hardware={"name": v, "peak_flops": {"bf16": 1e15}, "memory_bytes": 8e10}),
        "#/hardware/name",
        "#/inputs/hardware/name",  # a plan names stored hardware by slug; its inputs hold inline hardware
    ),
    "allocation-law": ("/v1/allocations", lambda v: {"pf_days": 1, "law": v}, "#/law"),
    "allocation-hardware": (
        "/v1/allocations",
        lambda v: {"pf_days": 1, "hardware": v, "accelerators": 8},
        "#/hardware",
    ),
    "allocation-precision": (
        "/v1/allocations",
        lambda v: {"pf_days": 1, "hardware": "h100-sxm", "accelerators": 8, "precision": v},
        "#/precision",
    ),
    "hardware-slug": ("/v1/hardware", lambda v: hardware_body(slug=v), "#/slug"),
    "hardware-name": ("/v1/hardware", lambda v: hardware_body(name=v), "#/name"),
    "hardware-vendor": ("/v1/hardware", lambda v: hardware_body(vendor=v), "#/vendor"),
    "hardware-source": ("/v1/hardware", lambda v: hardware_body(source=v), "#/source"),
    "key-name": ("/v1/keys", lambda v: {"name": v, "role": "viewer", "organization": ORG}, "#/name"),
}


def _without_nones(body: dict) -> dict:
    return {name: value for name, value in body.items() if value is not None}


@pytest.mark.parametrize("value", list(SQL_VALUES.values()), ids=list(SQL_VALUES))
@pytest.mark.parametrize("target", list(BODY_FIELDS.values()), ids=list(BODY_FIELDS))
def test_sql_metacharacters_in_a_string_field_are_refused_naming_it_or_stored_verbatim(server, target, value):
    path, make, pointer, *stored_at = target
    response = send(server, "POST", path, json.dumps(_without_nones(make(value))).encode())
    if response.status_code >= 300:
        assert_clean_4xx(response, pointer, status=422)
        return
    assert response.status_code in (200, 201), response.text
    stored_at = stored_at[0] if stored_at else pointer
    assert at(response.json(), stored_at) == value
    if "Location" in response.headers and path != "/v1/keys":  # keys are listed, not read one by one
        stored = send(server, "GET", response.headers["Location"])
        assert stored.status_code == 200, stored.text
        assert at(stored.json(), stored_at) == value


def _items_where(check: Callable[[dict, str], bool]) -> Callable[[dict, str], None]:
    def verify(body: dict, value: str) -> None:
        assert all(check(item, value) for item in body["items"]), body  # the filter was not widened

    return verify


REPORT_WINDOW = {"from": "2027-01-01T00:00:00Z", "to": "2028-01-01T00:00:00Z"}

# (path, query holding the value, the parameter, how a 200 must look: None when only a refusal is right)
QUERY_FIELDS: dict[str, tuple[str, Callable[[str], dict], str, Callable | None]] = {
    "plans-organization": ("/v1/plans", lambda v: {"organization": v}, "organization", None),
    "plans-hardware": ("/v1/plans", lambda v: {"hardware": v}, "hardware", None),
    "plans-status": ("/v1/plans", lambda v: {"status": v}, "status", None),
    "plans-budget-id": ("/v1/plans", lambda v: {"budget_id": v}, "budget_id", None),
    "plans-label-key": ("/v1/plans", lambda v: {"label": f"{v}:alpha"}, "label", None),
    "plans-label-value": (
        "/v1/plans",
        lambda v: {"label": f"team:{v}"},
        "label",
        _items_where(lambda item, v: item["labels"].get("team") == v),
    ),
    "plans-created-from": ("/v1/plans", lambda v: {"created_from": v}, "created_from", None),
    "plans-cursor": ("/v1/plans", lambda v: {"cursor": v}, "cursor", None),
    "plans-compare-ids": ("/v1/plans/compare", lambda v: {"ids": f"{uuid.uuid4()},{v}"}, "ids", None),
    "budgets-organization": ("/v1/budgets", lambda v: {"organization": v}, "organization", None),
    "hardware-vendor": (
        "/v1/hardware",
        lambda v: {"vendor": v},
        "vendor",
        _items_where(lambda item, v: item["vendor"].lower() == v.lower()),
    ),
    "hardware-precision": ("/v1/hardware", lambda v: {"precision": v}, "precision", None),
    "laws-organization": ("/v1/scaling-laws", lambda v: {"organization": v}, "organization", None),
    "reports-organization": (
        "/v1/reports/costs",
        lambda v: {**REPORT_WINDOW, "organization": v},
        "organization",
        None,
    ),
    "reports-hardware": ("/v1/reports/costs", lambda v: {**REPORT_WINDOW, "hardware": v}, "hardware", None),
    "reports-group-by": ("/v1/reports/costs", lambda v: {**REPORT_WINDOW, "group_by": v}, "group_by", None),
    "reports-group-by-label": (
        "/v1/reports/costs",
        lambda v: {**REPORT_WINDOW, "group_by": f"label:{v}"},
        "group_by",
        None,
    ),
    "reports-format": ("/v1/reports/costs", lambda v: {**REPORT_WINDOW, "format": v}, "format", None),
}


@pytest.mark.parametrize("value", list(SQL_VALUES.values()), ids=list(SQL_VALUES))
@pytest.mark.parametrize("target", list(QUERY_FIELDS.values()), ids=list(QUERY_FIELDS))
def test_sql_metacharacters_in_a_query_filter_are_refused_naming_it_or_match_nothing_else(
    server, target, value
):
    path, make, parameter, verify = target
    response = send(server, "GET", path, params=make(value))
    if response.status_code == 200 and verify is not None:
        verify(response.json(), value)
    else:
        assert_clean_4xx(response, parameter, status=422)


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param(_cursor(b'["2027-01-01T00:00:00+00:00", "\' OR 1=1 --"]'), id="sql-in-id"),
        pytest.param(_cursor(b'["\' OR 1=1 --", "00000000-0000-0000-0000-000000000000"]'), id="sql-in-time"),
        pytest.param(
            _cursor(b'["9999-12-31T23:59:59-14:00", "' + str(uuid.uuid4()).encode() + b'"]'), id="overflow"
        ),
        pytest.param(_cursor(b"[1, 2]"), id="numbers"),
        pytest.param(_cursor(b'{"a": 1, "b": 2}'), id="object"),
        pytest.param(_cursor(b"[" * 2400), id="deeply-nested"),  # within gunicorn's 4094-byte request line
        pytest.param(_cursor(b'["\x00", "\x00"]'), id="nul"),
        pytest.param(_cursor(b"\xff\xfe\x00"), id="binary"),
    ],
)
def test_a_forged_cursor_is_422_naming_it(server, cursor):
    assert_clean_4xx(send(server, "GET", "/v1/plans", params={"cursor": cursor}), "cursor", status=422)


def test_the_tables_still_work_after_the_sql_corpus(server, world):
    for path in ("/v1/organizations", "/v1/plans", "/v1/budgets", "/v1/hardware", "/v1/keys"):
        response = send(server, "GET", path, params={"limit": 100})
        assert response.status_code == 200, response.text
        assert response.json()["items"], path
    organization = send(server, "GET", f"/v1/organizations/{ORG}")
    assert organization.status_code == 200, organization.text
    plan = send(server, "GET", f"/v1/plans/{world['plan']['id']}")
    assert plan.status_code == 200, plan.text
    assert plan.json()["labels"] == {"team": "alpha"}
    hostile = {"slug": fresh_slug("after"), "name": "'; DROP TABLE organizations; --"}
    assert send(server, "POST", "/v1/organizations", json.dumps(hostile).encode()).status_code == 201
    listed = send(server, "GET", "/v1/organizations", params={"limit": 100}).json()["items"]
    assert {"slug": hostile["slug"], "name": hostile["name"]} in [
        {"slug": item["slug"], "name": item["name"]} for item in listed
    ]
    created = send(server, "POST", "/v1/plans", json.dumps(plan_body(name="after the corpus")).encode())
    assert created.status_code == 201, created.text


# --- 7. Path traversal and odd slugs ---------------------------------------------------------------------

TRAVERSALS = {
    "organization-encoded-slashes": "/v1/organizations/..%2F..%2Fetc%2Fpasswd",
    "hardware-encoded-dots": "/v1/hardware/%2e%2e",
    "hardware-encoded-dots-and-slash": "/v1/hardware/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "law-dots-slash": "/v1/scaling-laws/..%2f",
    "law-traversal-then-route": "/v1/scaling-laws/chinchilla-2022%2f..%2f..%2fetc%2fpasswd/isoflop",
    "budget-raw-dots": "/v1/budgets/../../x",
    "budget-raw-dots-to-passwd": "/v1/budgets/../../../../../../etc/passwd",
    "plan-not-a-uuid": "/v1/plans/not-a-uuid",
    "plan-uuid-with-sql": "/v1/plans/00000000-0000-0000-0000-000000000000'%20OR%20'1'='1",
    "plan-uuid-traversal": "/v1/plans/..%2f..%2fv1%2fkeys",
    "backslashes": "/v1/hardware/..%5c..%5cwindows%5cwin.ini",
    "nul-in-slug": "/v1/organizations/acme%00",
    "invalid-utf8-slug": "/v1/organizations/%FF%FE",
    "unicode-slug": "/v1/organizations/acm%C3%A9",
    "homoglyph-slug": "/v1/hardware/h100-%D1%95xm",
    "emoji-slug": "/v1/scaling-laws/%F0%9F%92%A3",
    "fullwidth-dots": "/v1/organizations/%EF%BC%8E%EF%BC%8E%EF%BC%8Fetc",
    "uppercase-slug": "/v1/organizations/HOSTILE",
    "slug-with-sql": "/v1/organizations/hostile'%20OR%20'1'='1",
    "long-slug-3000": "/v1/organizations/" + "a" * 3000,
    "long-slug-10000": "/v1/organizations/" + "a" * 10_000,
    "docs-static-encoded": "/docs/static/..%2f..%2f..%2f..%2fetc%2fpasswd",
    "docs-static-raw": "/docs/static/../../../../../etc/passwd",
    "docs-static-double-encoded": "/docs/static/%252e%252e%252f%252e%252e%252fetc%252fpasswd",
    "docs-static-absolute": "/docs/static//etc/passwd",
}


@pytest.mark.parametrize("path", list(TRAVERSALS.values()), ids=list(TRAVERSALS))
def test_path_traversal_and_odd_slugs_are_a_clean_4xx_never_a_file(server, path):
    response = send_verbatim(server, "GET", path)
    assert "root:" not in response.text
    assert "[fonts]" not in response.text
    assert_clean_4xx(response)


# Refused by gunicorn before the app sees them (RFC 9110 field values; limit_request_field_size and
# limit_request_fields): see KNOWN_DEFECTS.
PROTOCOL_ABUSE = {
    "nul-in-a-header": {"X-Note": b"a\x00b"},
    "control-character-in-a-header": {"X-Note": b"a\x01b"},
    "header-over-8190-bytes": {"X-Note": "x" * 9000},
    "over-100-headers": {f"X-Note-{n}": "x" for n in range(101)},
}


@pytest.mark.parametrize("headers", list(PROTOCOL_ABUSE.values()), ids=list(PROTOCOL_ABUSE))
def test_malformed_headers_are_a_clean_4xx(server, headers):
    assert_clean_4xx(send(server, "GET", "/v1/organizations", headers=headers))

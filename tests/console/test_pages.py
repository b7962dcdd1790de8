"""The web console over HTTP (Flask's test client): signing in and out, the planner and its errors, saving
plans once, history and compare, budgets, the scaling-law frontier, the cost report and its CSV, and the
guards a browser session needs (form tokens, same origin, no open redirect, the cookie never opening the API).
The browser drives the same pages end to end in tests/e2e/test_console_browser.py."""

from __future__ import annotations

import csv
import html
import io
import re
import uuid
import xml.etree.ElementTree as ET
from datetime import date
from decimal import Decimal
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
from sqlalchemy import select

from service.console.charts import format_number
from service.console.figures import STEP_PARTS
from service.console.formatting import gigabytes, percent
from service.console.forms import ADVANCED, DEFAULT_QUESTIONS, SECTIONS, report_query
from service.console.views import MAX_FITTED_LAWS_CHARTED, SIZING_TEXTS
from service.core.laws import PUBLISHED_LAWS
from service.data.models import Organization, UsageDay
from service.schemas.fields import numeral
from service.services import reports as reports_service
from service.services import spend as spend_service
from service.services.catalog import load_builtin_hardware
from service.web import auth
from service.web.auth import CONSOLE_COOKIE
from tests.api.test_laws import store_law
from tests.builders import year_budget_body
from tests.conftest import bearer
from tests.console.test_charts import marker

ORIGIN = {"Origin": "http://localhost"}
SVG = "{http://www.w3.org/2000/svg}"
DENSE_LAWS = [law for law in PUBLISHED_LAWS.values() if law.moe is None]
PLANNER_FORM = {
    "budget_kind": "pf_days",
    "budget": "6000",
    "hardware": "h100-sxm",
    "accelerators": "1024",
    "law": "chinchilla-2022",
}
SHAPE = {"layers": "64", "d_model": "7168", "heads": "56", "sequence_length": "4096"}  # about 39B parameters
# A small mixture of experts with latent attention: DeepSeek-V2-Lite's shape (15.7B parameters, 2.4B active).
MOE_SHAPE = {
    "layers": "27",
    "d_model": "2048",
    "heads": "16",
    "head_dim": "128",
    "sequence_length": "4096",
    "activation": "swiglu",
    "ffn": "10944",
    "vocabulary": "102400",
    "experts": "64",
    "experts_per_token": "6",
    "shared_experts": "2",
    "expert_ffn": "1408",
    "dense_layers": "1",
    "kv_lora_rank": "512",
    "rope_head_dim": "64",
}


@pytest.fixture
def world(client, session):
    """Organisation acme with a budget of 5,000,000.00 USD for 2026 (admin `client` made them)."""
    load_builtin_hardware(session)
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    budget = client.post("/v1/budgets", json=year_budget_body())
    assert budget.status_code == 201
    return budget.get_json()


@pytest.fixture
def browser(app, issue_key, world):
    """A test client signed in to the console as a planner of acme."""
    return signed_in(app, issue_key("planner", "acme"))


def signed_in(app, key: str):
    browser = app.test_client()
    response = browser.post("/sign-in", data={"key": key, "next": "/"}, headers=ORIGIN)
    assert response.status_code == 302, response.get_data(as_text=True)
    return browser


def csrf(page: str) -> str:
    return re.search(r'name="csrf_token" value="([0-9a-f]+)"', page).group(1)


def hidden_fields(page: str, form_action: str) -> dict[str, str]:
    """The hidden inputs of the form posting to `form_action` on `page`."""
    start = page.index(f'action="{form_action}"')
    form = page[start : page.index("</form>", start)]
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))


def svg(page: str, chart_id: str) -> ET.Element:
    """The chart `chart_id` on `page`, parsed (which also proves it well-formed)."""
    start = page.index(f'aria-labelledby="{chart_id}-title')
    start = page.rindex("<svg", 0, start)
    return ET.fromstring(page[start : page.index("</svg>", start) + len("</svg>")])


def save(browser, form=PLANNER_FORM, **extra):
    planner = browser.get("/", query_string=form).get_data(as_text=True)
    fields = {**hidden_fields(planner, "/plans"), **extra}
    return browser.post("/plans", data=fields, headers=ORIGIN)


# --- signing in ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/plans", "/budgets", "/laws", "/reports/costs", "/reports/costs.csv"])
def test_signed_out_pages_send_the_browser_to_sign_in_and_back(app, path):
    response = app.test_client().get(path)
    assert response.status_code == 302
    location = urlsplit(response.headers["Location"])
    assert location.path == "/sign-in"
    assert parse_qs(location.query)["next"] == [path]


def test_signing_in_keeps_the_key_in_an_httponly_strict_session_cookie(app, issue_key, world):
    browser = app.test_client()
    key = issue_key("viewer", "acme")
    response = browser.post("/sign-in", data={"key": key, "next": "/plans?status=draft"}, headers=ORIGIN)
    assert response.status_code == 302
    assert response.headers["Location"] == "/plans?status=draft"
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith(f"{CONSOLE_COOKIE}={key};")
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert "Path=/" in cookie
    assert "Expires" not in cookie
    assert "Max-Age" not in cookie
    assert browser.get("/plans").status_code == 200


@pytest.mark.parametrize("key", ["", "nonsense", "cpk_unknown0_" + "x" * 32])
def test_a_key_that_is_not_valid_is_refused_on_the_form(app, key):
    response = app.test_client().post("/sign-in", data={"key": key}, headers=ORIGIN)
    assert response.status_code == 422
    assert "Set-Cookie" not in response.headers
    page = response.get_data(as_text=True)
    assert 'aria-invalid="true"' in page
    assert "Enter a key." in page if not key else "That API key is not valid" in page


# What a browser's URL parser (WHATWG URL) ignores in a Location before resolving it: C0 controls and spaces
# at either end, tabs and newlines anywhere; and it reads a backslash as a slash in an http(s) URL.
_C0_OR_SPACE = "".join(map(chr, range(0x21)))


def where_a_browser_goes(location: str, base: str = "http://localhost/sign-in") -> tuple[str, str]:
    """(scheme, host) a browser on `base` is sent to by `location`."""
    cleaned = location.strip(_C0_OR_SPACE).translate({ord(c): None for c in "\t\n\r"}).replace("\\", "/")
    target = urlsplit(urljoin(base, cleaned))
    return target.scheme, target.netloc


ELSEWHERE = [
    "https://evil.example/",
    "//evil.example/x",
    "///evil.example",
    "/\\evil.example",
    "\\\\evil.example",
    "\\/evil.example",
    "/\t/evil.example",
    "/\n/evil.example",
    "/\r/evil.example",
    "/\r\n/evil.example",
    "\t//evil.example",
    "/\t\\evil.example",
    " //evil.example",
    "\x00//evil.example",
    "\x1f/\\evil.example",
    "https:evil.example",
    "https:/evil.example",
    "HTTP://evil.example",
    "javascript:alert(1)",
    " javascript:alert(1)",
    "java\tscript:alert(1)",
    "data:text/html,<p>hi",
    "evil.example",
    "\u3000//evil.example",  # an ideographic space is not stripped: not a path at all
    "\uff0f\uff0fevil.example",  # fullwidth solidi
    "",
]


@pytest.mark.parametrize("target", ELSEWHERE)
def test_sign_in_sends_anything_but_a_path_on_this_site_to_the_planner(app, issue_key, target):
    key = issue_key("viewer", "acme")
    response = app.test_client().post("/sign-in", data={"key": key, "next": target}, headers=ORIGIN)
    assert response.status_code == 302
    assert response.headers["Location"] == "/"


@pytest.mark.parametrize(
    "target",
    [
        "/plans?status=draft",
        "/%2F%2Fevil.example",
        "/%09/evil.example",
        "/%5Cevil.example",
        "/..//evil.example",
        "/plans?next=//evil.example#//evil.example",
        "/pl\u00e4ns",
        "/plans\\x",
        "/pl\tans",
    ],
)
def test_sign_in_returns_to_a_path_on_this_site_however_it_is_spelled(app, issue_key, target):
    key = issue_key("viewer", "acme")
    response = app.test_client().post("/sign-in", data={"key": key, "next": target}, headers=ORIGIN)
    assert response.status_code == 302
    location = response.headers["Location"]
    assert location.startswith("/")
    assert not location.startswith(("//", "/\\"))
    assert where_a_browser_goes(location) == ("http", "localhost")


@pytest.mark.parametrize(
    "target",
    ["/\r\nSet-Cookie: planted=1", "/plans\n", "\r\n", "/a\x00b", "\x00", "/a\x7fb", "/" + "a" * 100_000],
)
def test_sign_in_answers_any_next_with_a_page_or_a_redirect_never_a_500(app, issue_key, target):
    page = app.test_client().get("/sign-in", query_string={"next": target})
    assert page.status_code == 200
    key = issue_key("viewer", "acme")
    response = app.test_client().post("/sign-in", data={"key": key, "next": target}, headers=ORIGIN)
    assert response.status_code == 302
    assert "planted" not in response.headers.get("Set-Cookie", "")
    assert where_a_browser_goes(response.headers["Location"]) == ("http", "localhost")


def test_sign_in_from_another_site_is_refused(app, issue_key, world):
    response = app.test_client().post(
        "/sign-in", data={"key": issue_key("viewer", "acme")}, headers={"Origin": "https://evil.example"}
    )
    assert response.status_code == 422
    assert "Set-Cookie" not in response.headers


def test_too_many_failed_sign_ins_from_one_address_get_a_page_saying_when_to_retry(app_with, issue_key):
    app = app_with(auth_failures_per_minute=3)
    valid = issue_key("viewer", "acme")
    assert signed_in(app, valid)
    wrong = {"key": "cpk_guess0000_" + "x" * 43}
    assert [app.test_client().post("/sign-in", data=wrong, headers=ORIGIN).status_code for _ in range(3)] == [
        422
    ] * 3
    refused = app.test_client().post("/sign-in", data=wrong, headers=ORIGIN)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.mimetype == "text/html"
    page = refused.get_data(as_text=True)
    assert "Too many failed" in page
    assert 'name="key"' in page  # the form, to try again later
    assert "Set-Cookie" not in refused.headers
    assert signed_in(app, valid)  # a key in use from the same address still signs in


def test_a_revoked_key_signs_the_browser_out(app, client, issue_key, world):
    key = issue_key("planner", "acme")
    browser = signed_in(app, key)
    key_uuid = next(
        item["id"]
        for item in client.get("/v1/keys").get_json()["items"]
        if key.split("_")[1] == item["key_id"]
    )
    assert client.delete(f"/v1/keys/{key_uuid}").status_code == 204
    response = browser.get("/plans")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/sign-in")
    assert f"{CONSOLE_COOKIE}=;" in response.headers["Set-Cookie"]  # forgotten


def test_signing_out_forgets_the_key(browser):
    page = browser.get("/").get_data(as_text=True)
    response = browser.post("/sign-out", data={"csrf_token": csrf(page)}, headers=ORIGIN)
    assert response.status_code == 302
    assert browser.get("/").status_code == 302


def test_the_console_cookie_never_opens_the_api(browser):
    """Otherwise any site could make a signed-in browser call the API (CSRF): it takes only the header."""
    assert browser.get("/v1/plans").status_code == 401


# --- the planner ---------------------------------------------------------------------------------------


def api_allocation(client, form: dict[str, str], **members) -> dict:
    """What POST /v1/allocations answers for the planner form `form` (its numerals as JSON numbers, money as
    a decimal string) with the further JSON `members`."""
    body = {name: numeral(value) for name, value in form.items() if name not in ("budget_kind", "budget")}
    kind = form["budget_kind"]
    body |= {kind: form["budget"] if kind == "cost" else numeral(form["budget"])}
    if "cost" in form:
        body["cost"] = form["cost"]
    response = client.post("/v1/allocations", json=body | members)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_the_planner_shows_what_the_api_allocates(browser, client):
    response = browser.get("/", query_string=PLANNER_FORM)
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    api = api_allocation(client, PLANNER_FORM)
    assert f'data-figure="params">{format_number(api["params"])}<' in page
    assert f'data-figure="tokens">{format_number(api["tokens"])}<' in page
    assert f"{Decimal(api['estimate']['cost']):,.2f} USD" in page
    assert f"{api['predicted_loss']:.3f}" in page
    assert "nan" not in page.lower().replace("nanoseconds", "")


# At a given MFU, the memory of the plans before the cluster model: with no layout searched, this plan does
# not fit, and the page says so and what to change.
UNSHARDED_FORM = {**PLANNER_FORM, "mfu": "0.4"}


def test_the_planner_says_memory_in_gigabytes_as_its_warnings_do(browser, client):
    page = html.unescape(browser.get("/", query_string=UNSHARDED_FORM).get_data(as_text=True))
    memory = api_allocation(client, UNSHARDED_FORM)["estimate"]["memory"]
    assert not memory["fits"]  # so that the page warns of it too, in its own words
    assert f"{memory['total_bytes'] / 1e9:,.1f} GB</p>" in page
    assert f"of {memory['capacity_bytes'] / 1e9:,.1f} GB" in page
    assert f"{memory['total_bytes'] / 1e9:.1f} GB per accelerator" in page  # the warning
    assert "GiB" not in page


def selected(page: str, menu_id: str) -> str:
    """The value of the option the menu `menu_id` has selected (as a browser shows it: the first if none)."""
    start = page.index(f'<select id="{menu_id}"')
    menu = page[start : page.index("</select>", start)]
    chosen = re.findall(r'<option value="([^"]*)" selected>', menu)
    assert len(chosen) <= 1
    return chosen[0] if chosen else re.search(r'<option value="([^"]*)"', menu).group(1)


def field_value(page: str, name: str) -> str:
    """What the input `name` holds, or the option its menu shows."""
    found = re.search(rf'<input id="{name}" name="{name}" type="text" value="([^"]*)"', page)
    return html.unescape(found.group(1)) if found else selected(page, name)


def sections(page: str) -> dict[str, tuple[bool, set[str]]]:
    """Each folded section of the planner: whether it renders open, and the fields it holds."""
    found = {}
    for match in re.finditer(
        r'<details class="section" id="([^"]+)"([^>]*)>(.*?)</details>', page, re.DOTALL
    ):
        names = set(re.findall(r'<(?:input|select) id="[^"]+" name="([^"]+)"', match.group(3)))
        found[match.group(1)] = (" open" in match.group(2), names)
    return found


@pytest.mark.parametrize("mode", sorted(ADVANCED))
def test_the_planner_asks_its_question_first_and_folds_the_rest_under_advanced(browser, mode):
    """Until a question is asked the form holds the default one, every other field folded, all closed."""
    page = browser.get("/", query_string={} if mode == "plan" else {"mode": mode}).get_data(as_text=True)
    for name, value in DEFAULT_QUESTIONS[mode].items():
        assert field_value(page, name) == value, name
    folded = sections(page)
    assert list(folded) == list(ADVANCED[mode])
    for section, (opened, names) in folded.items():
        assert names == set(SECTIONS[section]), section
        assert not opened, section
    assert '<h2 id="result-heading">The answer</h2>' in page


def test_a_question_asked_keeps_what_was_asked_not_the_defaults(browser):
    page = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    assert field_value(page, "days") == ""  # not the default question's 60 days: this one gave none
    assert field_value(page, "budget_kind") == "pf_days"


@pytest.mark.parametrize(
    ("change", "section"),
    [
        ({"accelerator_hours": "900000"}, "limits"),
        ({"law": "", "tokens_per_param": "40"}, "rule"),
        ({"precision": "fp8"}, "cluster"),
        ({"zero_stage": "1"}, "layout"),
        ({"sequence_parallel": "false"}, "layout"),
        ({**SHAPE}, "shape"),
        ({"checkpoint_write_bytes_per_second": "50e9"}, "reliability"),
    ],
)
def test_a_section_holding_a_value_renders_open_and_the_others_closed(browser, change, section):
    page = browser.get("/", query_string={**PLANNER_FORM, **change}).get_data(as_text=True)
    assert {name for name, (opened, _) in sections(page).items() if opened} == {section}


@pytest.mark.parametrize(
    ("change", "opened"),
    [
        ({"micro_batch": "0"}, {"layout"}),
        ({"restart_seconds": "-1"}, {"reliability"}),
        ({**SHAPE, "experts": "64"}, {"shape", "mixture"}),  # experts_per_token is missing: beside it
        (
            {"zero_stage": "0", "tensor_parallel": "1", "pipeline_parallel": "1", "recomputation": "none"},
            {"layout"},
        ),
    ],
)
def test_a_section_holding_an_error_renders_open(browser, change, opened):
    response = browser.get("/", query_string={**PLANNER_FORM, **change})
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    assert {name for name, (shown, _) in sections(page).items() if shown} == opened


def test_an_error_in_a_section_left_blank_opens_it_too(browser):
    """A blank field can hold an error (one another field needs): its section opens to show it."""
    response = browser.get("/", query_string={**PLANNER_FORM, **SHAPE, "experts": "64"})
    page = response.get_data(as_text=True)
    assert re.search(r'<p class="error" id="experts_per_token-error">', page)
    assert sections(page)["mixture"][0]


ESTIMATE_FORM = {"mode": "estimate", "params": "7e10", "tokens": "1.4e12", "hardware": "h100-sxm"}


@pytest.mark.parametrize(
    "extra", [{"accelerators": "1024"}, {"days": "30"}, {"accelerators": "512", "zero_stage": "1"}]
)
def test_the_estimate_mode_shows_what_the_api_estimates(browser, client, extra):
    response = browser.get("/", query_string={**ESTIMATE_FORM, **extra})
    assert response.status_code == 200
    page = html.unescape(response.get_data(as_text=True))
    body = {"params": 7e10, "tokens": 1.4e12, "hardware": "h100-sxm"}
    body |= {name: numeral(value) for name, value in extra.items() if name != "zero_stage"}
    if "zero_stage" in extra:
        body["layout"] = {"zero_stage": 1}
    api = client.post("/v1/estimates", json=body).get_json()
    assert f'data-figure="days">{api["days"]:,.1f} days<' in page
    assert f'data-figure="cost_exact">{Decimal(api["cost"]):,.2f} USD<' in page
    assert f'data-figure="accelerator_hours">{format_number(api["accelerator_hours"])}<' in page
    assert f'data-figure="accelerators">{api["accelerators"]:,}<' in page
    assert f'data-figure="mfu">MFU {percent(api["mfu"])}<' in page
    assert f"{gigabytes(api['memory']['total_bytes'])}</p>" in page
    assert layout_rows(page)[0][1:4] == [
        str(api["performance"]["layout"][name])
        for name in ("tensor_parallel", "pipeline_parallel", "data_parallel")
    ]
    assert '<h2 id="result-heading">Estimate</h2>' in page
    assert 'name="mode" value="estimate"' in page  # the form asks the same question again


def test_a_model_already_chosen_is_saved_as_a_plan_on_the_accelerators_its_deadline_chose(browser, client):
    page = browser.get("/", query_string={**ESTIMATE_FORM, "days": "30"}).get_data(as_text=True)
    shown = int(re.search(r'data-figure="accelerators">([\d,]+)<', page).group(1).replace(",", ""))
    response = save(browser, {**ESTIMATE_FORM, "days": "30"}, name="70B in a month")
    assert response.status_code == 303, response.get_data(as_text=True)
    plan = client.get("/v1/plans/" + response.headers["Location"].rsplit("/", 1)[1]).get_json()
    assert plan["name"] == "70B in a month"
    assert (plan["inputs"]["params"], plan["inputs"]["tokens"]) == (7e10, 1.4e12)
    assert plan["inputs"]["accelerators"] == shown
    estimate = client.post(
        "/v1/estimates", json={"params": 7e10, "tokens": 1.4e12, "hardware": "h100-sxm", "days": 30}
    ).get_json()
    assert plan["result"]["estimate"]["days"] == pytest.approx(estimate["days"])
    assert plan["cost"] == estimate["cost"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"tokens": ""}, "tokens", "Missing data"),
        ({"params": "-1"}, "params", "greater than"),
        ({"params": "", "tokens": "lots"}, "tokens", "Not a valid number"),
        ({"days": "30", "accelerators": "64"}, "days", "give one or the other"),
        ({"hardware": "no-such-chip"}, "hardware", "no-such-chip"),
        ({"law": "no-such-law"}, "law", "No scaling law 'no-such-law'"),
        ({"micro_batch": "0"}, "micro_batch", "greater than or equal to 1"),
    ],
)
def test_bad_estimate_input_is_shown_beside_its_field(browser, change, field, message):
    page = error_beside(browser.get("/", query_string={**ESTIMATE_FORM, **change}), field, message)
    assert '<h2 id="result-heading">Estimate</h2>' not in page


def test_a_saved_form_of_an_unknown_mode_is_refused_by_name_and_saves_nothing(browser, client):
    fields = {**hidden_fields(browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True), "/plans")}
    response = browser.post("/plans", data={**fields, "mode": "guess"}, headers=ORIGIN)
    assert response.status_code == 400
    assert "mode must be one of: plan, estimate" in response.get_data(as_text=True)
    assert client.get("/v1/plans").get_json()["items"] == []


def test_an_unknown_mode_is_named_and_the_budget_question_shown(browser):
    response = browser.get("/", query_string={"mode": "guess", "budget": "6000"})
    assert response.status_code == 422
    page = html.unescape(response.get_data(as_text=True))
    assert '<a href="#mode">mode</a>: Choose one of: plan, estimate.' in page
    assert '<h2 id="result-heading">The answer</h2>' in page


def test_the_planner_starts_from_the_apis_default_rule_of_20_tokens_per_parameter(browser, client):
    empty_form = browser.get("/").get_data(as_text=True)
    assert selected(empty_form, "law") == ""

    planned = browser.get("/", query_string={"budget_kind": "pf_days", "budget": "6000", "law": ""})
    api = client.post("/v1/allocations", json={"pf_days": 6000}).get_json()
    page = planned.get_data(as_text=True)
    assert api["method"] == "fixed-ratio"
    assert f'<span class="tag">{api["method"]}</span>' in page
    assert f'data-figure="params">{format_number(api["params"])}<' in page


def test_the_isoflop_chart_marks_the_optimum_at_its_lowest_point(browser):
    page = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    chart = svg(page, "isoflop")
    assert chart.find(f"{SVG}title").text.startswith("IsoFLOP profile at 5.2e23 FLOPs")
    labels = [text.text for text in chart.iter(f"{SVG}text")]
    assert "Compute-optimal" in labels
    assert "Model size N (parameters)" in labels


def test_a_fixed_ratio_plan_is_marked_apart_from_the_optimum(browser):
    form = {**PLANNER_FORM, "law": "", "tokens_per_param": "200"}
    page = browser.get("/", query_string=form).get_data(as_text=True)
    labels = [text.text for text in svg(page, "isoflop").iter(f"{SVG}text")]
    assert {"Compute-optimal", "This plan"} <= set(labels)
    assert "Losses from chinchilla-2022" in page


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"budget": "-5"}, "budget", "greater than"),
        ({"budget": "lots"}, "budget", "Not a valid number"),
        ({"accelerators": "0"}, "accelerators", "greater than or equal to 1"),
        ({"law": "no-such-law"}, "law", "No scaling law 'no-such-law'"),
        ({"budget_kind": "cost", "budget": "100", "currency": "EUR"}, "currency", "EUR"),
        ({"budget_kind": "days", "budget": "30", "days": "20"}, "days", "once"),
        ({"days": "-1"}, "days", "greater than"),
        ({"cost": "lots", "currency": "USD"}, "cost", "decimal"),
        ({"zero_stage": "4"}, "zero_stage", "less than or equal to 3"),
        ({"tensor_parallel": "16", **SHAPE}, "tensor_parallel", "Must divide the heads (56)"),
        ({"sequence_parallel": "maybe"}, "sequence_parallel", "Not a valid boolean"),
        ({"precision": "fp4"}, "precision", "Must be one of"),
        ({**SHAPE, "heads": "57"}, "heads", "Must divide d_model"),
        ({"layers": "64"}, "d_model", "Missing data"),
        ({**SHAPE, "kv_heads": "5"}, "kv_heads", "Must divide heads"),
        ({**SHAPE, "activation": "relu"}, "activation", "Must be one of: gelu, swiglu"),
        ({**SHAPE, "pipeline_parallel": "128"}, "pipeline_parallel", "Cannot exceed the layers (64)"),
        ({"data_parallel": "3"}, "data_parallel", "must divide the accelerators (1024)"),
        ({"micro_batch": "3", "data_parallel": "128"}, "micro_batch", "Must divide the batch of a replica"),
        ({"micro_batch": "0"}, "micro_batch", "greater than or equal to 1"),
        ({"global_batch": "lots"}, "global_batch", "Not a valid integer"),
        ({"flash_attention": "maybe"}, "flash_attention", "Not a valid boolean"),
        ({"restart_seconds": "-1"}, "restart_seconds", "greater than or equal to 0"),
        ({"checkpoint_write_bytes_per_second": "0"}, "checkpoint_write_bytes_per_second", "greater than 0"),
        ({"accelerators": "", "max_accelerators": "0"}, "max_accelerators", "greater than or equal to 1"),
        # A mixture of experts and latent attention: the API's pointer is the field the error is beside.
        ({**SHAPE, "experts_per_token": "8"}, "experts", "Needs experts (a mixture-of-experts shape)"),
        ({**SHAPE, "experts": "64"}, "experts_per_token", "Required with experts"),
        ({**MOE_SHAPE, "capacity_factor": "0.5"}, "capacity_factor", "greater than or equal to 1"),
        ({**MOE_SHAPE, "kv_heads": "8"}, "kv_heads", "no key/value heads of its own"),
        ({**SHAPE, "q_lora_rank": "1536"}, "kv_lora_rank", "Needs kv_lora_rank"),
        ({"expert_parallel": "4"}, "expert_parallel", "Needs a mixture-of-experts shape (experts)"),
        ({"expert_overlap": "maybe"}, "expert_overlap", "Not a valid boolean"),
    ],
)
def test_bad_input_is_shown_beside_its_field(browser, change, field, message):
    error_beside(browser.get("/", query_string={**PLANNER_FORM, **change}), field, message)


def error_beside(response, field: str, message: str) -> str:
    """The page of a refused form, having checked that it names `field` with `message` beside it."""
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    error = re.search(rf'<p class="error" id="{field}-error">([^<]*)</p>', page)
    assert error is not None, page
    assert message in html.unescape(error.group(1))
    assert re.search(rf'id="{field}"[^>]*aria-invalid="true"', page)
    return page


def test_a_money_limit_and_a_deadline_plan_together_as_the_api_plans_them(browser, client):
    form = {**PLANNER_FORM, "budget_kind": "cost", "budget": "2,500,000", "currency": "USD", "days": "10"}
    page = browser.get("/", query_string=form).get_data(as_text=True)
    api = client.post(
        "/v1/allocations",
        json={
            "cost": "2500000",
            "currency": "USD",
            "days": 10,
            "hardware": "h100-sxm",
            "accelerators": 1024,
            "law": "chinchilla-2022",
        },
    ).get_json()
    assert {limit["kind"] for limit in api["limits"]} == {"cost", "days"}
    assert f'data-figure="params">{format_number(api["params"])}<' in page
    binding = next(limit["kind"] for limit in api["limits"] if limit["binding"])
    assert re.search(rf"{binding} \([^)]*\) <strong>binds</strong>", page)


def test_every_further_limit_goes_with_a_compute_budget(browser, client):
    limits = {"cost": "900000", "currency": "USD", "days": "30", "accelerator_hours": "500000"}
    page = browser.get("/", query_string={**PLANNER_FORM, **limits}).get_data(as_text=True)
    api = api_allocation(client, {**PLANNER_FORM, **limits})
    assert {limit["kind"] for limit in api["limits"]} == {"pf_days", "cost", "days", "accelerator_hours"}
    assert f'data-figure="params">{format_number(api["params"])}<' in page


def memory_card(page: str) -> str:
    start = page.index("<h3>Memory per accelerator</h3>")
    return page[start : page.index("</div>", start)]


def test_a_large_plan_fits_once_the_form_shards_it_and_shapes_it_as_the_api_does(browser, client):
    layout = {"zero_stage": "1", "tensor_parallel": "8", "recomputation": "selective", "micro_batch": "1"}
    form = {**PLANNER_FORM, **layout, **SHAPE, "precision": "bf16", "sequence_parallel": "true"}
    page = browser.get("/", query_string=form).get_data(as_text=True)
    shape = {name: int(value) for name, value in SHAPE.items()} | {"micro_batch": 1}
    fixed = {name: numeral(value) for name, value in layout.items()} | {"sequence_parallel": True}
    api = api_allocation(client, {**PLANNER_FORM, "precision": "bf16"}, shape=shape, layout=fixed)
    memory = api["estimate"]["memory"]
    assert memory["fits"]
    assert memory["activations_bytes"] > 0  # the shape counted
    card = memory_card(page)
    assert f"{memory['total_bytes'] / 1e9:,.1f} GB" in card
    assert "does not fit" not in card


def test_the_advice_on_a_plan_that_does_not_fit_points_at_fields_the_form_has(browser):
    page = browser.get("/", query_string=UNSHARDED_FORM).get_data(as_text=True)
    card = memory_card(page)
    assert "does not fit" in card
    pointed = re.findall(r'href="#([a-z_]+)"', card)
    assert {"zero_stage", "tensor_parallel"} <= set(pointed)
    for field in pointed:
        assert re.search(rf'<label for="{field}">', page), field
        assert re.search(rf'<(input|select) id="{field}"', page), field
    # The API's own advice, in the warnings, names the same fields by their labels.
    labels = {"ZeRO stage", "Tensor parallelism", "Activation recomputation"}
    assert all(re.search(rf'<label for="[a-z_]+">{label}</label>', page) for label in labels)


def layout_rows(page: str) -> list[list[str]]:
    """The cells of the layout table's rows (the chosen layout's first), as the page shows them."""
    start = page.index('<table class="list layouts"')
    body = page[page.index("<tbody>", start) : page.index("</tbody>", start)]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)
    return [[html.unescape(cell) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)] for row in rows]


def shown_layout(
    name: str, layout: dict, step: float, mfu: float, memory: float, *, experts: bool = False
) -> list[str]:
    """A row of the layout table as the page should show a layout the API gives (of a mixture of experts,
    with its expert-parallel degree and whether its all-to-all overlaps)."""
    degrees = ("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch", "interleave")
    by_expert = [str(layout["expert_parallel"]), "on" if layout["expert_overlap"] else "off"]
    return [
        name,
        *(str(layout[field]) for field in degrees[:3]),
        *(by_expert if experts else []),
        *(str(layout[field]) for field in degrees[3:]),
        layout["recomputation"],
        str(layout["zero_stage"]),
        format_number(step),
        percent(mfu),
        gigabytes(memory),
    ]


FIGURES = ("layout", "step_seconds", "mfu", "memory_bytes")  # of each alternative, in a row's order


def test_the_planner_shows_the_chosen_layout_beside_its_alternatives_as_the_api_gives_them(browser, client):
    page = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    performance = api_allocation(client, PLANNER_FORM)["estimate"]["performance"]
    alternatives = performance["alternatives"]
    assert alternatives  # so that there is something beside the chosen layout
    assert layout_rows(page) == [
        shown_layout(
            "Chosen",
            performance["layout"],
            performance["step_seconds"],
            performance["mfu"],
            performance["memory_bytes"],
        ),
        *(
            shown_layout(f"Alternative {number}", *(other[key] for key in FIGURES))
            for number, other in enumerate(alternatives, start=1)
        ),
    ]
    text = html.unescape(page)
    assert f"MFU {percent(performance['mfu'])}" in text
    assert f"HFU {percent(performance['hfu'])}" in text
    assert f'data-figure="useful_fraction">{percent(performance["goodput"]["useful_fraction"])}<' in page
    assert f"{performance['goodput']['interruptions']:.1f} interruptions expected" in text
    assert performance["goodput"]["run_overhead_source"] == "default"
    efficiency = performance["hardware_efficiency"]
    shown = re.search(r'data-figure="hardware_efficiency">(.*?)</span>', page).group(1)
    assert shown == (
        f"GEMM {percent(efficiency['gemm'])}, attention {percent(efficiency['attention'])} of peak "
        f"({efficiency['provenance']})"
    )
    lost = percent(performance["goodput"]["run_overhead"])
    assert f"{lost} lost besides, as published whole runs lose" in text
    assert "as given" in re.search(r'id="cluster-card">(.*?)</div>', page).group(1)  # 1024, not chosen


def test_the_planner_shows_the_runs_interval_and_the_framework_as_the_api_gives_them(browser, client):
    page = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    estimate = api_allocation(client, PLANNER_FORM)["estimate"]
    low, high = estimate["intervals"]["days"]
    assert f'data-figure="days_interval">{low:.1f}\u2013{high:.1f} days<' in page
    assert 'data-figure="framework">generic<' in page
    assert "80% interval" in html.unescape(page)
    if estimate["intervals"]["cost"]:
        assert 'data-figure="cost_interval">' in page


def test_a_blank_accelerators_field_lets_the_planner_choose_and_the_page_says_so(browser, client):
    form = {**PLANNER_FORM, "accelerators": ""}
    page = browser.get("/", query_string=form).get_data(as_text=True)
    api = api_allocation(client, {name: value for name, value in form.items() if value})
    estimate = api["estimate"]
    sizing = estimate["performance"]["sizing"]
    assert sizing["chosen_by"] == "cost"
    assert f'data-figure="accelerators">{estimate["accelerators"]:,}<' in page
    card = re.search(r'id="cluster-card">(.*?)</div>', page).group(1)
    assert SIZING_TEXTS["cost"] in card
    assert f"of {sizing['counts_tried']} counts tried" in card
    assert f'data-figure="params">{format_number(api["params"])}<' in page
    # Saved, the plan names the count the planner chose.
    assert hidden_fields(page, "/plans")["accelerators"] == str(estimate["accelerators"])
    response = save(browser, form, name="chosen")
    assert response.status_code == 303, response.get_data(as_text=True)
    plan = client.get(f"/v1{response.headers['Location']}").get_json()
    assert plan["inputs"]["accelerators"] == estimate["accelerators"]
    assert plan["params"] == pytest.approx(api["params"])


def test_with_a_deadline_the_budget_chooses_the_accelerators_and_the_page_says_so(browser, client):
    form = {**PLANNER_FORM, "accelerators": "", "days": "60", "max_accelerators": "4096"}
    page = browser.get("/", query_string=form).get_data(as_text=True)
    api = api_allocation(client, {name: value for name, value in form.items() if value})
    sizing = api["estimate"]["performance"]["sizing"]
    assert sizing["chosen_by"] == "budget"
    card = re.search(r'id="cluster-card">(.*?)</div>', page).group(1)
    assert SIZING_TEXTS["budget"] in card
    assert "up to 4,096" in card
    assert f'data-figure="accelerators">{api["estimate"]["accelerators"]:,}<' in page
    labels = [text.text for text in svg(page, "cluster-days").iter(f"{SVG}text")]
    assert "Deadline" in labels


def test_a_layout_field_given_is_kept_in_the_form_and_in_the_layout_chosen(browser, client):
    given = {"pipeline_parallel": "4", "zero_stage": "1", "recomputation": "selective"}
    page = browser.get("/", query_string={**PLANNER_FORM, **given}).get_data(as_text=True)
    assert re.search(r'id="pipeline_parallel" name="pipeline_parallel" type="text" value="4"', page)
    assert selected(page, "zero_stage") == "1"
    assert selected(page, "recomputation") == "selective"
    layout = {"pipeline_parallel": 4, "zero_stage": 1, "recomputation": "selective"}
    performance = api_allocation(client, PLANNER_FORM, layout=layout)["estimate"]["performance"]
    assert {name: performance["layout"][name] for name in layout} == layout
    chosen = layout_rows(page)[0]
    assert chosen[2] == "4"
    assert chosen[6:8] == ["selective", "1"]
    assert chosen == shown_layout(
        "Chosen",
        performance["layout"],
        performance["step_seconds"],
        performance["mfu"],
        performance["memory_bytes"],
    )


MOE_RUN = {**PLANNER_FORM, "budget": "600", "accelerators": "256"}  # a small run: a fast search
MOE_FORM = {**MOE_RUN, **MOE_SHAPE}
GIVEN_EP = {"expert_parallel": 8, "expert_overlap": False}


def test_a_mixture_of_experts_is_planned_as_the_api_plans_it_with_its_active_parameters(browser, client):
    given = {"expert_parallel": "8", "expert_overlap": "false"}
    page = browser.get("/", query_string={**MOE_FORM, **given}).get_data(as_text=True)
    shape = {name: value if name == "activation" else int(value) for name, value in MOE_SHAPE.items()}
    api = api_allocation(client, MOE_RUN, shape=shape, layout=GIVEN_EP)
    performance = api["estimate"]["performance"]
    modelled = performance["shape"]
    assert modelled["active_params"] < modelled["params"] / 3  # so that the two differ on the page
    card = html.unescape(re.search(r'id="experts-card">(.*?)</div>', page).group(1))
    assert f'data-figure="active_params">{format_number(modelled["active_params"])}<' in card
    assert "64 experts, 6 per token + 2 shared" in card
    assert f"on {modelled['moe_layers']} of {modelled['layers']} layers" in card
    assert {name: performance["layout"][name] for name in GIVEN_EP} == GIVEN_EP
    rows = layout_rows(page)
    assert rows[0] == shown_layout("Chosen", *(performance[key] for key in FIGURES), experts=True)
    assert rows[0][4:6] == ["8", "off"]
    assert rows[1:] == [
        shown_layout(f"Alternative {number}", *(other[key] for key in FIGURES), experts=True)
        for number, other in enumerate(performance["alternatives"], start=1)
    ]
    text = html.unescape(page)
    assert "expert parallelism 8 with its all-to-all not overlapped" in text
    assert f"latent attention, key/value rank {modelled['kv_lora_rank']}" in text
    assert performance["breakdown"]["expert_parallel"] > 0  # not overlapped: exposed
    assert f"Expert all-to-all {format_number(performance['breakdown']['expert_parallel'])} s" in text


@pytest.mark.parametrize(
    "cluster", [{}, {"hardware": "", "accelerators": ""}], ids=["on a cluster", "allocation only"]
)
def test_a_mixture_of_experts_a_law_sizes_shows_the_active_parameters_it_allocates(browser, client, cluster):
    form = {**MOE_RUN, "law": "krajewski-2024-g8", **cluster}
    page = browser.get("/", query_string=form).get_data(as_text=True)
    api = api_allocation(client, {name: value for name, value in form.items() if value})
    assert api["active_params"] < api["params"]
    card = html.unescape(re.search(r'id="experts-card">(.*?)</div>', page).group(1))
    assert f'data-figure="active_params">{format_number(api["active_params"])}<' in card
    assert (
        f"of {format_number(api['params'])}: {api['experts']} experts, {api['experts_per_token']} per token"
        in card
    )


def test_a_dense_plan_shows_no_experts(browser):
    page = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    assert 'id="experts-card"' not in page
    assert ">EP<" not in page


def test_a_mixture_of_experts_plan_is_saved_with_its_shape_and_expert_layout(browser, client):
    form = {**MOE_FORM, "expert_parallel": "8", "mtp_depth": "1"}
    response = save(browser, form, name="moe")
    assert response.status_code == 303, response.get_data(as_text=True)
    inputs = client.get(f"/v1{response.headers['Location']}").get_json()["inputs"]
    assert inputs["layout"] == {"expert_parallel": 8}
    assert inputs["shape"]["experts"] == 64
    assert inputs["shape"]["mtp_depth"] == 1


def test_a_layout_no_accelerator_can_hold_is_named_beside_the_layout_fields(browser):
    unsharded = {"zero_stage": "0", "tensor_parallel": "1", "pipeline_parallel": "1", "recomputation": "none"}
    response = browser.get("/", query_string={**PLANNER_FORM, **unsharded})
    assert response.status_code == 422
    page = html.unescape(response.get_data(as_text=True))
    error = re.search(r'<p class="error" id="layout-error">([^<]*)</p>', page)
    assert error is not None
    assert "No layout of 1024 accelerators fits 80 GB" in error.group(1)
    assert re.search(r'<details class="section" id="layout" aria-describedby="layout-error" open>', page)
    assert 'href="#layout">layout</a>' in page  # from the list of errors at the top of the form


def test_a_given_mfu_paces_the_run_without_the_cluster_model_and_the_page_says_so(browser):
    page = browser.get("/", query_string=UNSHARDED_FORM).get_data(as_text=True)
    assert 'data-figure="mfu">MFU 40.0%<' in page
    assert "as given: the cluster model does not pace this run" in page
    assert '<table class="list layouts"' not in page
    assert 'id="step-breakdown"' not in page
    assert 'id="cluster-days"' not in page
    chosen = browser.get("/", query_string={**UNSHARDED_FORM, "accelerators": ""}).get_data(as_text=True)
    card = re.search(r'id="cluster-card">(.*?)</div>', chosen).group(1)
    assert "chosen by the planner; the MFU given sets their pace" in card


def test_the_step_is_drawn_by_part_each_in_its_colour_with_its_seconds(browser, client):
    page = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    performance = api_allocation(client, PLANNER_FORM)["estimate"]["performance"]
    chart = svg(page, "step-breakdown")
    spent = {name: seconds for name, seconds in performance["breakdown"].items() if seconds > 0}
    entries = chart.findall(f".//{SVG}g[@class='legend-entry']")
    labels = [entry.find(f"{SVG}text").text for entry in entries]
    assert labels == [
        f"{STEP_PARTS[name]} {format_number(seconds)} s ({seconds / performance['step_seconds']:.0%})"
        for name, seconds in spent.items()
    ]
    parts = chart.findall(f".//{SVG}rect[@class='part']")
    assert len(parts) == len(spent)
    assert len({part.get("fill") for part in parts}) == len(parts)
    widths = [float(part.get("width")) for part in parts]
    compute = list(spent).index("compute")
    assert widths[compute] == max(widths)  # this run computes for most of its step


def test_days_and_cost_are_drawn_against_the_accelerators_with_the_plan_marked(browser, client):
    page = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    estimate = api_allocation(client, PLANNER_FORM)["estimate"]
    for chart_id in ("cluster-days", "cluster-cost"):
        chart = svg(page, chart_id)
        labels = [text.text for text in chart.iter(f"{SVG}text")]
        assert "This plan: 1,024" in labels
        assert "Accelerators" in labels
        line = chart.find(f".//{SVG}g[@class='series']/{SVG}polyline")
        assert len(line.get("points").split()) > 10  # the counts the planner tries
    caption = html.unescape(page[page.index("Fastest on") :].split("</p>", 1)[0])
    assert re.match(
        r"Fastest on [\d,]+ accelerators \([\d,.]+ days\); cheapest on [\d,]+ \([\d,.]+ USD\)", caption
    )
    assert f"{Decimal(estimate['cost']):,.2f} USD" in page


# --- saving plans --------------------------------------------------------------------------------------


def test_saving_a_plan_stores_it_once_even_when_the_form_is_sent_twice(browser, client, world):
    first = save(browser, name="38B for FY26", budget_id=world["id"])
    assert first.status_code == 303
    plan_path = first.headers["Location"]
    again = save(browser)  # another render: another form, another plan
    assert again.headers["Location"] != plan_path
    planner = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    fields = {**hidden_fields(planner, "/plans"), "name": "twice"}
    once = browser.post("/plans", data=fields, headers=ORIGIN)
    twice = browser.post("/plans", data=fields, headers=ORIGIN)  # a double click
    assert once.headers["Location"] == twice.headers["Location"]
    names = [plan["name"] for plan in client.get("/v1/plans").get_json()["items"]]
    assert sorted(name or "" for name in names) == ["", "38B for FY26", "twice"]
    page = browser.get(plan_path).get_data(as_text=True)
    assert "38B for FY26" in page
    assert world["id"] in page


def test_a_saved_plan_keeps_the_limits_layout_and_shape_it_was_planned_with(browser, client):
    layout = {
        "zero_stage": "1",
        "tensor_parallel": "8",
        "recomputation": "selective",
        "sequence_parallel": "false",
    }
    form = {**PLANNER_FORM, "cost": "3000000", "currency": "USD", "days": "60", **layout, **SHAPE}
    response = save(browser, form, name="sharded")
    assert response.status_code == 303, response.get_data(as_text=True)
    inputs = client.get(f"/v1{response.headers['Location']}").get_json()["inputs"]
    assert {name: inputs[name] for name in ("cost", "currency", "days")} == {
        "cost": "3000000.00",
        "currency": "USD",
        "days": 60,
    }
    # In the layout, not under the deprecated top-level names.
    assert inputs["layout"] == {
        "zero_stage": 1,
        "tensor_parallel": 8,
        "recomputation": "selective",
        "sequence_parallel": False,
    }
    assert all(inputs.get(name) is None for name in layout)
    assert inputs["shape"] == {name: int(value) for name, value in SHAPE.items()} | {
        "micro_batch": 1,
        "dropout": False,
    }


def test_forms_without_their_token_or_from_elsewhere_change_nothing(browser, client):
    planner = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    fields = hidden_fields(planner, "/plans")
    forged = {**fields, "csrf_token": "0" * 64}
    assert browser.post("/plans", data=forged, headers=ORIGIN).status_code == 400
    assert browser.post("/plans", data=fields, headers={"Origin": "https://evil.example"}).status_code == 400
    assert browser.post("/plans", data=fields).status_code == 400  # neither Origin nor Referer
    assert client.get("/v1/plans").get_json()["items"] == []


def test_a_viewer_may_plan_but_not_save(app, issue_key, world, client):
    viewer = signed_in(app, issue_key("viewer", "acme"))
    page = viewer.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    assert "Save as plan" not in page
    response = viewer.post("/plans", data={**PLANNER_FORM, "csrf_token": csrf(page)}, headers=ORIGIN)
    assert response.status_code == 403
    assert response.mimetype == "text/html"
    assert "may not do this" in response.get_data(as_text=True)
    assert client.get("/v1/plans").get_json()["items"] == []


def test_committing_from_the_plan_page_charges_the_budget_once(browser, client, world):
    plan_path = save(browser, name="commit me", budget_id=world["id"]).headers["Location"]
    page = browser.get(plan_path).get_data(as_text=True)
    form = hidden_fields(page, f"{plan_path}/commit")
    first = browser.post(f"{plan_path}/commit", data=form, headers=ORIGIN)
    second = browser.post(f"{plan_path}/commit", data=form, headers=ORIGIN)  # a double click
    assert first.status_code == second.status_code == 303
    assert first.headers["Location"] == second.headers["Location"] == plan_path
    assert "status-committed" in browser.get(plan_path).get_data(as_text=True)
    plan = client.get(f"/v1{plan_path}").get_json()
    assert client.get(f"/v1/budgets/{world['id']}").get_json()["committed"] == plan["cost"]
    ledger = client.get(f"/v1/budgets/{world['id']}/ledger").get_json()["items"]
    assert len(ledger) == 1
    again = browser.post(f"{plan_path}/commit", data={"csrf_token": csrf(page)}, headers=ORIGIN)
    assert again.status_code == 409  # a new attempt: said on the plan page, not a bare problem
    assert "commit me" in again.get_data(as_text=True)


def test_a_large_commit_waits_for_finance_who_approve_it_on_the_plan_page(
    app, browser, client, issue_key, world
):
    """The budget asks approval above 1.00 USD: the planner's commit leaves the plan pending, the budget page
    lists it, a finance key's approval (a double click: once) commits it, and a rejection needs a note."""
    etag = client.get(f"/v1/budgets/{world['id']}").headers["ETag"]
    asked = client.patch(
        f"/v1/budgets/{world['id']}", json={"approval_above": "1.00"}, headers={"If-Match": etag}
    )
    assert asked.status_code == 200
    plan_path = save(browser, name="big run", budget_id=world["id"]).headers["Location"]
    page = browser.get(plan_path).get_data(as_text=True)
    browser.post(f"{plan_path}/commit", data=hidden_fields(page, f"{plan_path}/commit"), headers=ORIGIN)
    waiting = browser.get(plan_path).get_data(as_text=True)
    assert "status-pending_approval" in waiting
    assert "for a finance or admin key to approve or reject it" in waiting
    assert f'action="{plan_path}/decide"' not in waiting  # a planner does not decide
    budget_page = browser.get(f"/budgets/{world['id']}").get_data(as_text=True)
    assert "Waiting for approval" in budget_page
    assert "big run" in budget_page
    assert client.get(f"/v1/budgets/{world['id']}").get_json()["committed"] == "0.00"

    finance = signed_in(app, issue_key("finance", "acme"))
    page = finance.get(plan_path).get_data(as_text=True)
    form = hidden_fields(page, f"{plan_path}/decide")
    unexplained = finance.post(f"{plan_path}/decide", data={**form, "decision": "reject"}, headers=ORIGIN)
    assert unexplained.status_code == 422
    assert "Say why in the note" in unexplained.get_data(as_text=True)
    decision = {**form, "decision": "approve", "note": "Roadmap item 4."}
    first = finance.post(f"{plan_path}/decide", data=decision, headers=ORIGIN)
    second = finance.post(f"{plan_path}/decide", data=decision, headers=ORIGIN)  # a double click
    assert first.status_code == second.status_code == 303

    approved = finance.get(plan_path).get_data(as_text=True)
    assert "status-committed" in approved
    assert "Roadmap item 4." in approved
    plan = client.get(f"/v1{plan_path}").get_json()
    assert client.get(f"/v1/budgets/{world['id']}").get_json()["committed"] == plan["cost"]
    assert len(client.get(f"/v1/budgets/{world['id']}/ledger").get_json()["items"]) == 1


def test_a_forged_idempotency_key_is_refused(browser):
    planner = browser.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    fields = {**hidden_fields(planner, "/plans"), "idempotency_key": "x" * 300}
    assert browser.post("/plans", data=fields, headers=ORIGIN).status_code == 400


# --- history and compare -------------------------------------------------------------------------------


def test_history_filters_and_compares_plans(browser, world):
    first = save(browser, name="on budget", budget_id=world["id"]).headers["Location"].rsplit("/", 1)[1]
    second = save(browser, name="off budget").headers["Location"].rsplit("/", 1)[1]
    everything = browser.get("/plans").get_data(as_text=True)
    assert "on budget" in everything
    assert "off budget" in everything
    filtered = browser.get("/plans", query_string={"budget_id": world["id"]}).get_data(as_text=True)
    assert "on budget" in filtered
    assert "off budget" not in filtered
    none_yet = browser.get("/plans", query_string={"created_to": "2020-01-01"}).get_data(as_text=True)
    assert "No plans match" in none_yet
    compared = browser.get(f"/plans/compare?ids={first}&ids={second}")
    assert compared.status_code == 200
    page = compared.get_data(as_text=True)
    assert page.index("on budget") < page.index("off budget")
    assert "Nothing differs" in page  # same inputs, same outputs: the name is not an input


def test_comparing_fewer_than_two_plans_explains_why(browser):
    response = browser.get("/plans/compare")
    assert response.status_code == 422
    assert response.mimetype == "text/html"
    assert "ids" in response.get_data(as_text=True)


# --- budgets, laws, costs --------------------------------------------------------------------------------


def test_the_budget_page_shows_utilisation_and_burn(browser, client, world):
    plan_path = save(browser, name="burn", budget_id=world["id"]).headers["Location"]
    page = browser.get(plan_path).get_data(as_text=True)
    browser.post(f"{plan_path}/commit", data={"csrf_token": csrf(page)}, headers=ORIGIN)
    budget = browser.get(f"/budgets/{world['id']}").get_data(as_text=True)
    burn = svg(budget, "burn")
    labels = [text.text for text in burn.iter(f"{SVG}text")]
    assert "Amount" in labels
    assert "2026-01" in labels
    # The forecast's band, drawn across the period and stated beside the estimate at completion.
    forecast = client.get(f"/v1/budgets/{world['id']}/forecast").get_json()
    low, high = forecast["intervals"]["estimate_at_completion"]
    assert float(low) < float(forecast["estimate_at_completion"]) < float(high)
    assert "Estimate at completion (80% band)" in labels
    assert len(list(burn.iter(f"{SVG}polygon"))) == 1
    band = re.search(r'data-figure="forecast_band">(.*?)<', budget).group(1)
    assert band == f"{float(low):,.2f} USD\u2013{float(high):,.2f} USD"
    assert svg(budget, "utilization") is not None
    utilization = client.get(f"/v1/budgets/{world['id']}").get_json()["utilization"]
    assert utilization > 0
    assert f"({100 * utilization:.1f}%)" in budget
    assert "<td>commit</td>" in budget  # its ledger entry, naming its plan rather than its id
    assert f'<a href="{plan_path}">burn</a>' in budget
    # The plan's page names its budget.
    assert f'<a href="/budgets/{world["id"]}">FY26 pretraining</a>' in browser.get(plan_path).get_data(
        as_text=True
    )
    p50 = client.get(f"/v1/budgets/{world['id']}/forecast").get_json()["intervals"][
        "estimate_at_completion_p50"
    ]
    assert re.search(r'data-figure="forecast_p50">(.*?)<', budget).group(1) == f"{float(p50):,.2f} USD"
    listing = browser.get("/budgets").get_data(as_text=True)
    assert "FY26 pretraining" in listing


def test_a_running_plan_shows_its_run_and_its_budget_where_it_is_heading(browser, client, world):
    plan_path = save(browser, name="flagship", budget_id=world["id"]).headers["Location"]
    page = browser.get(plan_path).get_data(as_text=True)
    browser.post(f"{plan_path}/commit", data={"csrf_token": csrf(page)}, headers=ORIGIN)
    plan = client.get(f"/v1{plan_path}").get_json()
    hours = plan["accelerator_hours"] / 10
    usage = {
        "reporter": "slurm",
        "period_start": "2026-01-05T00:00:00Z",
        "period_end": "2026-01-06T00:00:00Z",
    }
    usage |= {
        "accelerator_hours": hours,
        "tokens": plan["tokens"] / 20,
    }  # a tenth of the cost for a twentieth
    assert client.post(f"/v1{plan_path}/usage", json=usage).status_code == 201

    run = browser.get(plan_path).get_data(as_text=True)
    budget = browser.get(f"/budgets/{world['id']}").get_data(as_text=True)

    running = client.get(f"/v1{plan_path}").get_json()
    assert "<h2>Run</h2>" in run
    assert "(5.0%)" in run  # of the tokens trained
    assert f"{Decimal(running['estimate_at_completion']):,.2f} USD" in run
    assert "<td>usage</td><td>slurm</td>" in run
    assert "Cancel plan" not in run  # a running plan completes or fails
    assert f"Spent</dt><dd>{Decimal(running['actual_cost']):,.2f} USD" in budget
    assert "<h2>Running plans</h2>" in budget
    assert ">flagship</a>" in budget


def test_the_frontier_draws_a_fitted_law_with_its_bootstrap_band(browser, session):
    store_law(session)  # acme-sweep, 20 bootstrap fits
    page = browser.get("/laws").get_data(as_text=True)
    for figure in ("params", "tokens"):
        chart = svg(page, f"frontier-{figure}")
        labels = [text.text for text in chart.iter(f"{SVG}text")]
        assert "acme-sweep (band: 95% bootstrap interval)" in labels
        assert "chinchilla-2022" in labels
        assert chart.find(f".//{SVG}polygon") is not None  # the band


def test_the_frontier_draws_every_law_in_a_colour_dashes_and_a_marker_of_its_own_and_names_it(
    browser, session
):
    """Every published law and as many fitted ones as the page charts (the newest five); the fitted ones
    coincide, as laws fitted to the same runs do, and are told apart all the same."""
    slugs = [f"acme-sweep-{number}" for number in range(MAX_FITTED_LAWS_CHARTED)]
    for slug in slugs:
        store_law(session, slug=slug)
    page = browser.get("/laws").get_data(as_text=True)
    for figure in ("params", "tokens"):
        chart = svg(page, f"frontier-{figure}")
        lines = [group.find(f"{SVG}polyline") for group in chart.findall(f".//{SVG}g[@class='series']")]
        markers = [group.find(f"{SVG}path") for group in chart.findall(f".//{SVG}g[@class='points']")]
        assert len(lines) == len(markers) == len(DENSE_LAWS) + MAX_FITTED_LAWS_CHARTED
        assert len({line.get("stroke") for line in lines}) == len(lines)
        assert len({line.get("stroke-dasharray") for line in lines}) == len(lines)  # one solid: None
        assert len({marker(path) for path in markers}) == len(markers)
        entries = chart.findall(f".//{SVG}g[@class='legend-entry']")
        legend = [
            "".join(entry.itertext()).removesuffix(" (band: 95% bootstrap interval)") for entry in entries
        ]
        assert legend == [law.slug for law in DENSE_LAWS] + slugs[::-1]  # the newest fitted first


def test_the_laws_page_shows_each_dense_published_laws_note_and_leaves_moe_laws_off_its_frontier(browser):
    page = html.unescape(browser.get("/laws").get_data(as_text=True))

    for law in DENSE_LAWS:
        assert law.note in page
    assert "krajewski-2024" not in page


def test_the_laws_page_shows_what_a_fitted_law_warns_of(browser, session):
    warning = {
        "code": "influential_runs",
        "message": "2 runs are far off the fitted law and sway it: run 36 (params 5e+09, tokens 6e+08, ...).",
        "details": {"runs": [{"index": 36}, {"index": 37}]},
    }
    store_law(session, warnings=[warning])
    store_law(session, slug="acme-clean")  # no warnings: nothing said of it
    page = browser.get("/laws").get_data(as_text=True)
    [listed] = re.findall(r'<div class="warnings".*?</div>', page, flags=re.S)
    assert "acme-sweep" in listed
    assert "acme-clean" not in listed
    assert "<code>influential_runs</code>" in listed
    assert html.escape(warning["message"]) in listed


def test_the_frontier_range_is_validated(browser):
    response = browser.get("/laws", query_string={"min_flops": "1e25", "max_flops": "1e20"})
    assert "Must be greater than min_flops." in response.get_data(as_text=True)


def a_march_plan_committed(client, world) -> dict:
    """A plan of acme starting on 1 March 2026, committed to the world's budget."""
    plan = {"organization": "acme", "pf_days": 60, "hardware": "h100-sxm", "accelerators": 64}
    plan |= {"budget_id": world["id"], "start_at": "2026-03-01T00:00:00Z"}
    created = client.post("/v1/plans", json=plan).get_json()
    assert client.post(f"/v1/plans/{created['id']}/commit").status_code == 200
    return created


def test_the_cost_report_page_puts_totals_first_and_folds_the_empty_periods(browser, client, world):
    a_march_plan_committed(client, world)
    args = {"from": "2026-01-01", "to": "2027-01-01", "granularity": "month", "measure": "both"}

    page = browser.get("/reports/costs", query_string=args).get_data(as_text=True)

    assert page.index("<h2>Totals</h2>") < page.index('<table class="list">')
    shown, folded = page.split("<details>")
    assert "<td>2026-03-01</td>" in shown  # the plan's month, in the table
    assert "<td>2026-01-01</td>" not in shown
    assert "periods with nothing planned or spent" in folded
    assert "<td>2026-01-01</td>" in folded


def test_the_cost_report_page_and_its_csv_agree_with_the_api(browser, client, world):
    plan_path = save(browser, name="report me", budget_id=world["id"]).headers["Location"]
    page = browser.get(plan_path).get_data(as_text=True)
    browser.post(f"{plan_path}/commit", data={"csrf_token": csrf(page)}, headers=ORIGIN)
    plan = client.get(f"/v1{plan_path}").get_json()
    year = plan["start_at"][:4]
    args = {"from": f"{year}-01-01", "to": f"{int(year) + 1}-01-01", "granularity": "none", "grouped": "1"}
    report = browser.get("/reports/costs", query_string={**args, "group_budget": "1"}).get_data(as_text=True)
    assert f"{Decimal(plan['cost']):,.2f}" in report
    assert f'<a href="/budgets/{world["id"]}">FY26 pretraining</a>' in report  # named, not just an id
    download = browser.get("/reports/costs.csv", query_string={**args, "group_budget": "1"})
    assert download.mimetype == "text/csv"
    assert "attachment" in download.headers["Content-Disposition"]
    api_csv = client.get(
        "/v1/reports/costs",
        query_string={
            "from": f"{year}-01-01T00:00:00Z",
            "to": f"{int(year) + 1}-01-01T00:00:00Z",
            "group_by": "budget",
            "measure": "both",
            "format": "csv",
        },
    )
    assert download.get_data(as_text=True) == api_csv.get_data(as_text=True)
    rows = list(csv.DictReader(io.StringIO(download.get_data(as_text=True))))
    cost = f"{Decimal(plan['cost']):.2f}"
    assert [(row["budget"], row["budget_name"], row["planned_cost"]) for row in rows] == [
        (world["id"], "FY26 pretraining", cost)
    ]


def test_the_cost_report_page_shows_the_report_of_the_apis_own_query_and_says_so_in_its_form(
    browser, client, world
):
    """A report's query as the API takes it (instants, group_by, filters) is that report on the page, and the
    form shows each part of it, ready to change rather than silently dropped or shown blank."""
    plan = {"organization": "acme", "pf_days": 60, "hardware": "h100-sxm", "accelerators": 64}
    plan |= {"budget_id": world["id"], "labels": {"team": "alpha"}, "start_at": "2026-03-01T00:00:00Z"}
    assert client.post("/v1/plans", json=plan).status_code == 201
    query = {
        "from": "2026-02-01T00:00:00Z",
        "to": "2026-05-01T00:00:00+00:00",
        "granularity": "none",
        "group_by": "label:team,hardware",
        "status": "draft",
        "organization": "acme",
        "hardware": "h100-sxm",
        "budget_id": world["id"],
    }
    api = client.get("/v1/reports/costs", query_string=query).get_json()
    assert [row["label:team"] for row in api["rows"]] == ["alpha"]

    response = browser.get("/reports/costs", query_string=query)
    assert response.status_code == 200
    page = html.unescape(response.get_data(as_text=True))
    assert '<th scope="col">label:team</th>' in page
    assert f"{Decimal(api['rows'][0]['cost']):,.2f}" in page
    assert re.search(r'id="from" name="from" type="date" value="2026-02-01"', page)
    assert re.search(r'id="to" name="to" type="date" value="2026-05-01"', page)
    assert re.search(r'id="group_label" name="group_label" value="team"', page)
    assert re.search(r'name="group_hardware" value="1" checked', page)
    assert not re.search(r'name="group_budget" value="1" checked', page)
    menus = ("status", "granularity", "organization", "hardware", "budget_id")
    assert [selected(page, menu) for menu in menus] == ["draft", "none", "acme", "h100-sxm", world["id"]]


def test_the_cost_report_charts_each_months_planned_beside_its_actual_and_says_so_in_words(
    browser, client, session, world
):
    body = {"organization": "acme", "pf_days": 60, "hardware": "h100-sxm", "accelerators": 64}
    body |= {"budget_id": world["id"], "start_at": "2026-02-10T00:00:00Z"}
    plan = client.post("/v1/plans", json=body).get_json()
    assert client.post(f"/v1/plans/{plan['id']}/commit").status_code == 200
    organization_id = session.scalar(select(Organization.id).where(Organization.slug == "acme"))
    session.add_all(
        UsageDay(
            plan_id=uuid.UUID(plan["id"]),
            day=date(2026, month, 15),
            organization_id=organization_id,
            accelerator_hours=100.0,
            cost=Decimal(cost),
            currency="USD",
        )
        for month, cost in ((2, "1000.00"), (3, "250.50"))
    )
    session.commit()

    response = browser.get("/reports/costs", query_string={"from": "2026-01-01", "to": "2026-05-01"})

    assert response.status_code == 200
    page = response.get_data(as_text=True)
    chart = svg(page, "planned-actual-usd")
    assert chart.get("role") == "img"
    assert chart.find(f"{SVG}title").text == "Planned against actual by month, USD"
    description = chart.find(f"{SVG}desc").text
    assert "from 2026-01 to 2026-04" in description
    assert f"In all {Decimal(plan['cost']):,.2f} USD planned and 1,250.50 USD spent" in description
    bars = {
        kind: [rect.get("data-period") for rect in chart.iter(f"{SVG}rect") if rect.get("class") == kind]
        for kind in ("planned", "actual")
    }
    assert bars == {"planned": ["2026-02"], "actual": ["2026-02", "2026-03"]}
    ticks = [text.text for text in chart.iter(f"{SVG}text") if text.get("class") == "x-tick"]
    assert ticks == ["2026-01", "2026-02", "2026-03", "2026-04"]  # a month without spend is there too
    legend = [text.text for text in chart.iter(f"{SVG}text") if text.get("class") is None]
    assert legend[:3] == ["planned (pale)", "actual (solid)", "FY26 pretraining"]  # the budget, by name
    assert '<th scope="col" class="num">variance cost</th>' in page
    assert f"{Decimal('1250.50') - Decimal(plan['cost']):,.2f}" in page  # the variance, in the totals


def test_the_planned_only_report_is_the_estimates_it_always_was_and_draws_no_chart(browser, client, world):
    query = {"from": "2026-01-01", "to": "2026-05-01", "measure": "planned"}

    page = browser.get("/reports/costs", query_string=query).get_data(as_text=True)

    assert "planned-actual" not in page
    assert selected(page, "measure") == "planned"
    assert selected(page, "status") == ""  # committed, for planned only
    assert "No plans in this window." in page


def test_the_report_defaults_to_this_year_by_month_and_budget():
    from datetime import UTC, datetime  # noqa: PLC0415

    query = report_query({}, now=datetime(2026, 5, 1, tzinfo=UTC))
    assert query == {
        "from": "2026-01-01T00:00:00+00:00",
        "to": "2027-01-01T00:00:00+00:00",
        "granularity": "month",
        "measure": "both",
        "group_by": "budget",
    }


# --- pages in general ----------------------------------------------------------------------------------


def test_errors_are_pages_with_the_problem_and_its_request_id(browser):
    response = browser.get("/plans/00000000-0000-0000-0000-000000000000")
    assert response.status_code == 404
    assert response.mimetype == "text/html"
    page = response.get_data(as_text=True)
    assert "No plan 00000000-0000-0000-0000-000000000000." in page
    assert response.headers["X-Request-ID"] in page


@pytest.mark.parametrize(
    "path", ["/", "/?mode=estimate", "/plans", "/budgets", "/laws", "/reports/costs", "/sign-in"]
)
def test_every_page_is_locked_down_and_labels_its_inputs(browser, path):
    response = browser.get(path)
    assert response.status_code == 200
    assert "script-src" not in response.headers["Content-Security-Policy"]  # default-src 'none': no scripts
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Cache-Control"] == "no-store"
    page = response.get_data(as_text=True)
    assert "<script" not in page
    assert '="&#34;' not in page
    assert "=&#34;" not in page
    labelled = set(re.findall(r'<label for="([^"]+)"', page))
    inputs = re.findall(r'<(?:input|select)(?![^>]*type="(?:hidden|checkbox)")[^>]*\bid="([^"]+)"', page)
    assert set(inputs) <= labelled, set(inputs) - labelled
    assert 'lang="en"' in page
    assert 'href="#main"' in page


def test_the_style_sheet_is_served_here(app):
    response = app.test_client().get("/console/static/console.css")
    assert response.status_code == 200
    assert response.mimetype == "text/css"


def test_a_signed_in_browsers_style_sheet_does_not_wait_on_its_keys_lookup(app, monkeypatch):
    """A page's styles come whatever the database is doing: the key in the cookie is looked up for pages,
    not for the public stylesheet."""
    client = app.test_client()
    client.set_cookie(CONSOLE_COOKIE, "cpk_someone_signed-in-secret-0123456789")
    monkeypatch.setattr(auth, "admit", lambda key: pytest.fail("the stylesheet looked its key up"))
    response = client.get("/console/static/console.css")
    assert response.status_code == 200
    assert response.mimetype == "text/css"


def test_an_api_key_in_the_header_does_not_sign_a_browser_in(app, issue_key, world):
    response = app.test_client().get("/", headers=bearer(issue_key("planner", "acme")))
    assert response.status_code == 302


def test_an_admin_chooses_the_organisation_a_plan_belongs_to(app, issue_key, world, client):
    admin = signed_in(app, issue_key("admin"))
    planner = admin.get("/", query_string=PLANNER_FORM).get_data(as_text=True)
    assert '<option value="acme">Acme</option>' in planner
    fields = {**hidden_fields(planner, "/plans"), "organization": "acme", "name": "admin's"}
    response = admin.post("/plans", data=fields, headers=ORIGIN)
    assert response.status_code == 303
    assert client.get(f"/v1{response.headers['Location']}").get_json()["organization"] == "acme"


NASTY = [
    "nan",
    "inf",
    "-inf",
    "1e999",
    "-0",
    "",
    " ",
    "<script>x</script>",
    "x" * 5000,
    "1,2,3",
    "null",
    "%00",
]
PAGES = {
    "/": [
        "mode",
        "budget_kind",
        "budget",
        "currency",
        "hardware",
        "accelerators",
        "mfu",
        "precision",
        "cost",
        "days",
        "accelerator_hours",
        "max_accelerators",
        "zero_stage",
        "tensor_parallel",
        "pipeline_parallel",
        "data_parallel",
        "context_parallel",
        "global_batch",
        "interleave",
        "sequence_parallel",
        "recomputation",
        "flash_attention",
        "expert_parallel",
        "expert_overlap",
        "layers",
        "heads",
        "kv_heads",
        "experts",
        "capacity_factor",
        "ffn",
        "activation",
        "vocabulary",
        "micro_batch",
        "checkpoint_write_bytes_per_second",
        "restart_seconds",
        "law",
        "tokens_per_param",
        "unique_tokens",
        "inference_tokens",
    ],
    "/plans": ["status", "budget_id", "hardware", "label", "created_from", "created_to", "cursor"],
    "/plans/compare": ["ids"],
    "/budgets": ["cursor"],
    "/laws": ["min_flops", "max_flops"],
    "/reports/costs": [
        "from",
        "to",
        "granularity",
        "measure",
        "status",
        "group_label",
        "group_by",
        "organization",
        "budget_id",
        "hardware",
    ],
    "/reports/costs.csv": ["from", "to", "granularity", "measure", "group_label", "group_by"],
    "/?mode=estimate": ["mode", "params", "tokens", "days", "hardware", "accelerators", "law", "zero_stage"],
}
# The form each planner's question starts from, to which one nasty value is given at a time.
ASKED = {"/": PLANNER_FORM, "/?mode=estimate": ESTIMATE_FORM}


@pytest.mark.parametrize("path", sorted(PAGES))
def test_no_query_makes_a_page_fail_or_show_nan(browser, path):
    for name in PAGES[path]:
        for value in NASTY:
            args = {**ASKED[path], name: value} if path in ASKED else {name: value}
            response = browser.get(path.partition("?")[0], query_string=args)
            assert response.status_code < 500, (name, value)
            page = response.get_data(as_text=True)
            assert "<script>x" not in page, (name, value)  # escaped wherever it is echoed
            if response.mimetype == "text/html" and response.status_code == 200:
                assert not re.search(r">\s*-?(nan|inf)\s*<", page, re.IGNORECASE), (name, value)


@pytest.mark.parametrize(
    ("change", "method"),
    [
        ({"budget_kind": "flops", "budget": "1e23"}, "compute-optimal"),
        ({"budget_kind": "cost", "budget": "2,000,000.00", "currency": "USD"}, "compute-optimal"),
        ({"budget_kind": "days", "budget": "30"}, "compute-optimal"),
        ({"budget_kind": "target_loss", "budget": "2.0", "law": "sardana-2024"}, "compute-optimal"),
        (
            {"budget_kind": "target_loss", "budget": "2", "law": "sardana-2024", "inference_tokens": "2e12"},
            "inference-aware",
        ),
        ({"unique_tokens": "1e11", "law": "muennighoff-2023-c4"}, "data-constrained"),
        ({"law": "", "tokens_per_param": "20"}, "fixed-ratio"),
    ],
)
def test_every_kind_of_budget_and_rule_plans(browser, client, change, method):
    response = browser.get("/", query_string={**PLANNER_FORM, **change})
    assert response.status_code == 200, response.get_data(as_text=True)
    page = response.get_data(as_text=True)
    assert f'<span class="tag">{method}</span>' in page
    assert svg(page, "isoflop") is not None


def test_a_bad_history_filter_is_named_on_the_history_page(browser):
    response = browser.get("/plans", query_string={"label": "no-colon", "created_from": "yesterday"})
    assert response.status_code == 422
    page = html.unescape(response.get_data(as_text=True))
    assert "Must be key:value" in page
    assert 'href="#created_from">created from</a>' in page
    assert '<form method="get" action="/plans"' in page  # the filters stay, to be corrected


def test_a_data_constrained_plan_is_drawn_on_the_repeated_data_curve_at_its_minimum(browser):
    form = {**PLANNER_FORM, "unique_tokens": "1e11", "law": "muennighoff-2023-c4"}
    chart = svg(browser.get("/", query_string=form).get_data(as_text=True), "isoflop")
    labels = [text.text for text in chart.iter(f"{SVG}text")]
    assert {"Compute-optimal, unlimited data", "This plan", "100B unique tokens, repeated"} <= set(labels)
    repeated = chart.find(f".//{SVG}g[@data-series='1']/{SVG}polyline")
    heights = [float(point.split(",")[1]) for point in repeated.get("points").split()]
    plan_mark = chart.findall(f".//{SVG}circle[@class='marker']")[-1]  # markers in order: optimum, plan
    # Lower loss is drawn lower (a larger SVG y): no point of the repeated-data curve is below the plan.
    assert float(plan_mark.get("cy")) >= max(heights) - 0.5


def test_a_person_over_the_rate_limit_gets_a_page_saying_when_to_retry(app_with, issue_key, client, world):
    limited = app_with(rate_limit_per_minute=60, rate_limit_burst=2)
    browser = signed_in(limited, issue_key("viewer", "acme"))
    answers = [browser.get("/plans") for _ in range(4)]
    refused = [response for response in answers if response.status_code == 429]
    assert refused, [response.status_code for response in answers]
    assert refused[0].mimetype == "text/html"
    assert int(refused[0].headers["Retry-After"]) >= 1
    assert "429 Too Many Requests" in refused[0].get_data(as_text=True)


def test_the_cost_report_download_streams_past_the_row_cap_as_the_api_does(
    browser, client, world, monkeypatch
):
    # Issue 50: the console's CSV is the API's streamed file, not the JSON report (refused past MAX_ROWS).
    created = a_march_plan_committed(client, world)
    for module in (reports_service, spend_service):
        monkeypatch.setattr(module, "MAX_ROWS", 5, raising=False)
    args = {"from": "2026-01-01", "to": "2027-01-01", "granularity": "day", "measure": "both"}

    download = browser.get("/reports/costs.csv", query_string=args)

    assert download.status_code == 200, download.get_data(as_text=True)[:300]
    rows = list(csv.DictReader(io.StringIO(download.get_data(as_text=True))))
    assert len(rows) == 365  # every day of 2026, past the cap of 5
    assert sum(Decimal(row["planned_cost"] or "0") for row in rows) == Decimal(created["cost"])

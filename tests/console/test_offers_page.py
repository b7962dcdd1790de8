"""The console's comparison of offers: the question first, the same answer as POST /v1/comparisons, the
frontier drawn, and bad input beside its field."""

from __future__ import annotations

import re

import pytest

from tests.api.test_comparisons import OFFERS
from tests.console.test_pages import ORIGIN, csrf, hidden_fields, signed_in, svg, world  # noqa: F401 (fixture)

QUESTION = {"params": "7e9", "tokens": "1.4e11", "days": "10"}


@pytest.fixture
def browser(app, client, issue_key, world):  # noqa: F811
    for offer in OFFERS:
        assert (
            client.post("/v1/offers", json={"source": "test", "currency": "USD", **offer}).status_code == 201
        )
    return signed_in(app, issue_key("planner", "acme"))


def test_the_page_opens_on_the_question_alone(browser):
    page = browser.get("/comparisons").get_data(as_text=True)
    assert 'name="params"' in page
    assert 'value="h100-sxm"' in page  # the hardware some offer is of
    assert "comparison-frontier" not in page


def test_the_page_ranks_the_offers_as_the_api_does_and_draws_the_frontier(browser, client):
    page = browser.get("/comparisons", query_string=QUESTION).get_data(as_text=True)
    api = client.post("/v1/comparisons", json={"params": 7e9, "tokens": 1.4e11, "days": 10}).get_json()
    shown = re.findall(r'<th scope="row"><code>([a-z0-9-]+)</code>', page)
    assert shown == [row["offer"] for row in api["offers"]]
    chart = svg(page, "comparison-frontier")
    marks = [
        text.text for text in chart.iter("{http://www.w3.org/2000/svg}text") if (text.text or "").isdigit()
    ]
    assert set(marks) >= {str(row["rank"]) for row in api["offers"]}
    assert "★" in page


def test_only_the_pricings_checked_are_compared(browser):
    page = browser.get("/comparisons", query_string={**QUESTION, "pricing": "spot"}).get_data(as_text=True)
    assert re.findall(r'<th scope="row"><code>([a-z0-9-]+)</code>', page) == ["aws-h100-spot"]
    assert 'value="spot" checked' in page


def test_bad_input_is_said_beside_its_field_with_a_422(browser):
    response = browser.get("/comparisons", query_string={"params": "7e9", "days": "10"})
    assert response.status_code == 422
    assert 'href="#tokens"' in response.get_data(as_text=True)


def _save(browser, offers, question=QUESTION):
    page = browser.get("/comparisons", query_string=question).get_data(as_text=True)
    return browser.post(
        "/comparisons/plans",
        data={**hidden_fields(page, "/comparisons/plans"), "offer": offers},
        headers=ORIGIN,
    )


def test_the_offers_checked_are_saved_once_as_draft_plans_of_the_rows_run(browser, client):
    api = client.post("/v1/comparisons", json={"params": 7e9, "tokens": 1.4e11, "days": 10}).get_json()
    rows = {row["offer"]: row for row in api["offers"]}
    page = browser.get("/comparisons", query_string=QUESTION).get_data(as_text=True)
    boxes = re.findall(r'name="offer" value="([a-z0-9-]+)" form="save-plans"[^>]* checked>', page)
    assert boxes == [row["offer"] for row in api["offers"]]  # every row checked to begin with
    chosen = ["aws-h100", "aws-h100-spot"]
    data = {**hidden_fields(page, "/comparisons/plans"), "offer": chosen}

    response = browser.post("/comparisons/plans", data=data, headers=ORIGIN)
    again = browser.post("/comparisons/plans", data=data, headers=ORIGIN)  # a double click

    assert response.status_code == 303
    assert again.headers["Location"] == response.headers["Location"]
    assert response.headers["Location"].startswith("/plans?label=comparison:")
    tag = response.headers["Location"].split(":")[-1]
    saved = client.get("/v1/plans", query_string={"label": f"comparison:{tag}"}).get_json()["items"]
    assert sorted(plan["labels"]["offer"] for plan in saved) == chosen
    for summary in saved:
        plan = client.get(f"/v1/plans/{summary['id']}").get_json()
        row = rows[plan["labels"]["offer"]]
        assert plan["status"] == "draft"
        assert plan["organization"] == "acme"
        assert plan["result"]["estimate"]["accelerators"] == row["accelerators"]
        assert plan["result"]["estimate"]["days"] == pytest.approx(row["days"], rel=1e-9)


def test_saving_with_no_offer_checked_says_so_and_saves_nothing(browser, client):
    response = _save(browser, [])

    assert response.status_code == 422
    assert "Check at least one offer" in response.get_data(as_text=True)
    assert client.get("/v1/plans").get_json()["items"] == []


def test_a_viewer_sees_the_comparison_without_the_save_form_and_cannot_save(app, client, issue_key, browser):
    viewer = signed_in(app, issue_key("viewer", "acme"))
    page = viewer.get("/comparisons", query_string=QUESTION).get_data(as_text=True)
    assert 'id="save-plans"' not in page

    data = {**QUESTION, "offer": ["aws-h100"], "csrf_token": csrf(page)}
    response = viewer.post("/comparisons/plans", data=data, headers=ORIGIN)

    assert response.status_code == 403

"""Issue 50: a budget's forecast pages its running plans (`limit`, `cursor`, `next_cursor` and a Link
header, newest started first, as every list does), while its own figures stay those of every plan charged
to it, on every page."""

from __future__ import annotations

import pytest

from tests.api.test_plans import create_plan, make_budget, transition
from tests.api.test_plans import world as world  # noqa: PLC0414 -- the fixture, re-exported
from tests.api.test_usage import BUDGET_PERIOD, hours, report
from tests.problems import assert_problem

TOTALS = ("committed", "spent", "estimate_at_completion", "variance_at_completion", "intervals")


@pytest.fixture
def budget(client, world):
    return make_budget(client, **BUDGET_PERIOD, amount="5000.00")


@pytest.fixture
def running(client, budget) -> list[str]:
    """Three running plans, started on 2, 3 and 4 November (a tenth of their tokens trained for 25.00), and a
    committed one that has not started."""
    plan_ids = []
    for day in (2, 3, 4):
        plan = create_plan(client, budget_id=budget["id"])
        assert transition(client, plan["id"], "commit").status_code == 200
        assert report(client, plan["id"], **hours(day, 0, 1)).status_code == 201
        plan_ids.append(plan["id"])
    waiting = create_plan(client, budget_id=budget["id"])
    assert transition(client, waiting["id"], "commit").status_code == 200
    return plan_ids


def forecast(client, budget_id: str, **params):
    return client.get(f"/v1/budgets/{budget_id}/forecast", query_string=params)


def test_the_forecast_pages_its_running_plans_newest_started_first(client, budget, running):
    first = forecast(client, budget["id"], limit=2)
    assert first.status_code == 200, first.get_json()
    page = first.get_json()
    assert [run["plan_id"] for run in page["running"]] == [running[2], running[1]]
    assert page["next_cursor"]
    link = first.headers["Link"]
    assert link.endswith('>; rel="next"')
    assert f"cursor={page['next_cursor']}" in link

    second = client.get(link[1 : link.index(">")])
    assert second.status_code == 200, second.get_json()
    last = second.get_json()
    assert [run["plan_id"] for run in last["running"]] == [running[0]]
    assert last["next_cursor"] is None
    assert "Link" not in second.headers


def test_the_budgets_figures_are_every_plans_on_every_page(client, budget, running):
    whole = forecast(client, budget["id"], limit=100).get_json()
    assert len(whole["running"]) == 3
    # Three runs heading to 250.00 each and one plan not started (its cost, 500.00).
    assert whole["estimate_at_completion"] == "1250.00"
    assert whole["spent"] == "75.00"
    for limit in (1, 2):
        page = forecast(client, budget["id"], limit=limit).get_json()
        assert {name: page[name] for name in TOTALS} == {name: whole[name] for name in TOTALS}


def test_a_forecast_without_limit_gives_the_first_page_of_the_default_size(client, budget, running):
    page = forecast(client, budget["id"]).get_json()
    assert len(page["running"]) == 3
    assert page["next_cursor"] is None


@pytest.mark.parametrize(("params", "pointer"), [({"limit": 0}, "limit"), ({"cursor": "not-ours"}, "cursor")])
def test_a_bad_limit_or_cursor_is_a_422_naming_it(client, budget, params, pointer):
    problem = assert_problem(forecast(client, budget["id"], **params), 422)
    assert [error["parameter"] for error in problem["errors"]] == [pointer]

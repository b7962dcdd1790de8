"""The web console in headless Chromium against the real server (gunicorn, both databases): sign in, make a
plan, see its IsoFLOP chart, save it, commit it, find it in history, compare, look at the budget and the
frontier, download the cost report's CSV, sign out. Each page is saved as a screenshot under
SCREENSHOT_DIR (default test-artifacts/screenshots/<database>/), and so is the command line at work.

Needs Debian's `chromium` (or CHROMIUM_PATH) and the `playwright` package; `.ci/run` installs both. Without
them each test is skipped with the reason, counted apart in the summary line ("skipped: no browser"), and a
run with REQUIRE_BROWSER_TESTS set (as `.ci/run` sets it) fails.
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import os
import shutil
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import requests
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.console.charts import format_number
from service.core.laws import PUBLISHED_LAWS
from service.data.models import FittedLaw
from service.infra.config import Config
from service.infra.db import create_db_engine
from tests.api.test_laws import fit_body
from tests.builders import year_budget_body
from tests.commands import ROOT
from tests.console.test_charts import crosses, marker
from tests.e2e.conftest import AUTH

CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import Page, expect, sync_playwright
except ImportError:  # reported below
    Page = sync_playwright = None


@pytest.fixture(autouse=True)
def _browser():
    """Each test is skipped, by name, when the browser is missing: the summary line then counts them
    (tests/conftest.py), and a run that must include them (REQUIRE_BROWSER_TESTS, set by .ci/run) fails."""
    if sync_playwright is None:
        pytest.skip("browser tests need the playwright and axe-playwright-python packages (make install)")
    if CHROMIUM is None:
        pytest.skip("browser tests need chromium (apt-get install chromium, or set CHROMIUM_PATH)")


LAPTOP = {"width": 1366, "height": 768}  # the laptop screen the README says the layout fits
FULL_HD = {"width": 1920, "height": 1080}


@pytest.fixture
def shots(request, server_database_url):
    """Saves numbered full-page screenshots for this test and database, and checks each page against
    axe-core's accessibility rules (WCAG 2.x A and AA among them): any violation fails the test."""
    backend = "postgresql" if server_database_url.startswith("postgresql") else "sqlite"
    directory = Path(os.environ.get("SCREENSHOT_DIR") or ROOT / "test-artifacts" / "screenshots") / backend
    directory.mkdir(parents=True, exist_ok=True)
    taken = []

    def shoot(page, name: str, *, audit: bool = True, full_page: bool = True) -> Path:
        path = directory / f"{len(taken) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        taken.append(path)
        if audit:
            results = Axe().run(page)
            assert results.violations_count == 0, f"{name}: {results.generate_report()}"
        return path

    return shoot


@pytest.fixture
def acme(server, server_database_url):
    """Organisation acme, a planner key, a 2026 budget and a fitted law with bootstrap fits (via the API), and
    three laws of other sweeps: nine laws on the frontier, with the published ones."""
    base, _, _ = server

    def post(path, body):
        response = requests.post(base + path, json=body, headers=AUTH, timeout=120)
        assert response.status_code in (200, 201), response.text
        return response.json()

    post("/v1/organizations", {"slug": "acme", "name": "Acme"})
    key = post("/v1/keys", {"role": "planner", "organization": "acme", "name": "ML lead"})["key"]
    budget = post("/v1/budgets", year_budget_body())
    post("/v1/scaling-laws", fit_body(bootstrap={"samples": 20, "seed": 7}))
    store_other_sweeps(server_database_url, "acme-sweep", ("code", "math", "multilingual"))
    return {"base": base, "key": key, "budget": budget}


def store_other_sweeps(database_url: str, fitted: str, names: tuple[str, ...]) -> None:
    """Laws like the fitted law `fitted`, each older and with another data exponent (beta), straight into the
    server's database: a fit takes seconds of the server's time, these none."""
    engine = create_db_engine(Config(database_url=database_url))
    try:
        with Session(engine) as session:
            law = session.scalars(select(FittedLaw).where(FittedLaw.slug == fitted)).one()
            for number, name in enumerate(names, start=1):
                columns = {column.key: getattr(law, column.key) for column in FittedLaw.__table__.columns}
                columns |= {"id": uuid.uuid4(), "slug": f"{name}-sweep", "name": f"{name.title()} sweep"}
                columns["created_at"] = law.created_at - timedelta(days=number)  # older, in a stable order
                columns |= {"beta": law.beta * (1 + 0.04 * number), "bootstrap": None, "bootstrap_laws": []}
                session.add(FittedLaw(**columns))
            session.commit()
    finally:
        engine.dispose()


@pytest.fixture
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


def test_a_person_plans_saves_finds_and_reports_a_run(browser, acme, shots, tmp_path):
    context = browser.new_context(viewport=LAPTOP, accept_downloads=True)
    journey = Journey(context.new_page(), acme["base"], acme["key"], shots)
    sign_in(journey)
    make_a_plan(journey)
    let_the_planner_choose_the_cluster(journey)
    see_bad_input_named(journey)
    plan = save_and_commit(journey)
    save_a_second_plan(journey)
    filter_history_and_compare(journey)
    see_the_budget(journey, plan)
    see_the_frontier(journey)
    download_the_cost_report(journey, plan, acme["budget"]["id"], tmp_path)
    sign_out(journey)
    context.close()


def signed_in_page(browser, acme: dict, *, viewport=LAPTOP, **options) -> Page:
    """A new browser window signed in to the console, on the planner."""
    page = browser.new_context(viewport=viewport, **options).new_page()
    page.goto(acme["base"] + "/sign-in")
    page.get_by_label("API key").fill(acme["key"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Plan a training run")).to_be_visible()
    return page


def laid_out(page: Page, script: str, argument: object = None) -> object:
    """What `script` measures of the page as the browser lays it out with its stylesheet. A click that
    submits a form returns once the new page's document is there, and a script may lay it out before the
    stylesheet has come: unstyled, as a loaded machine showed (cards one under another, a line height of
    NaN). The load event comes after the stylesheet."""
    page.wait_for_load_state("load")
    return page.evaluate(script, argument)


def api_answer(acme: dict, path: str, body: dict) -> dict:
    response = requests.post(
        acme["base"] + path, json=body, headers={"Authorization": f"Bearer {acme['key']}"}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.json()


# The answer's key figures, which must be in sight as soon as it comes.
KEY_FIGURES = ("params", "tokens", "days", "cost")
BOTTOMS = """names => Object.fromEntries(names.map(name =>
  [name, document.querySelector(`[data-figure="${name}"]`).getBoundingClientRect().bottom]))"""


def test_the_default_question_is_answered_above_the_fold(browser, acme, shots):
    """The planner opens on its question (money, hardware, deadline) with everything else folded under
    Advanced; pressing Plan answers it with the API's figures, and at 1366 by 768 the answer's model size,
    tokens, days and cost are in sight without scrolling, its charts legible with no label on a line."""
    page = signed_in_page(browser, acme)
    expect(page.get_by_label("Budget in")).to_have_value("cost")
    expect(page.get_by_label("Amount")).to_have_value("5,000,000")
    expect(page.get_by_label("Currency")).to_have_value("USD")
    expect(page.get_by_label("Hardware")).to_have_value("h100-sxm")
    expect(page.get_by_label("Deadline (days)")).to_have_value("60")
    expect(page.locator("details.section")).to_have_count(7)
    expect(page.locator("details.section[open]")).to_have_count(0)
    expect(page.get_by_label("Tensor parallelism")).to_be_hidden()
    plan = page.get_by_role("button", name="Plan", exact=True)
    box = plan.bounding_box()
    assert box["y"] + box["height"] <= LAPTOP["height"]  # the question whole, above the fold
    plan.click()

    expect(page.get_by_role("heading", name="Allocation")).to_be_visible()
    assert page.evaluate("window.scrollY") == 0
    bottoms = laid_out(page, BOTTOMS, list(KEY_FIGURES))
    assert max(bottoms.values()) <= LAPTOP["height"], bottoms
    api = api_answer(
        acme, "/v1/allocations", {"cost": "5000000", "currency": "USD", "hardware": "h100-sxm", "days": 60}
    )
    expect(page.locator("[data-figure=params]")).to_have_text(format_number(api["params"]))
    expect(page.locator("[data-figure=tokens]")).to_have_text(format_number(api["tokens"]))
    expect(page.locator("[data-figure=days]")).to_have_text(f"{api['estimate']['days']:,.1f} days")
    expect(page.locator("[data-figure=cost_exact]")).to_have_text(
        f"{Decimal(api['estimate']['cost']):,.2f} USD"
    )
    shots(page, "question", full_page=False)  # the laptop's screen as it first shows the answer
    assert_charts_legible(page, charts=len(PLANNER_CHARTS))
    assert laid_out(page, LAYOUTS_FIT), "the layout table scrolls sideways in the answer's column"
    shots(page, "question-answered")


def test_a_model_already_chosen_is_estimated_as_the_api_estimates_it(browser, acme, shots):
    """The planner's other question, a tab away and without script: a model's parameters and tokens, the
    hardware and a deadline give the days, cost, accelerator-hours, MFU, memory and layout that
    POST /v1/estimates gives, the key figures above the fold."""
    page = signed_in_page(browser, acme)
    page.get_by_role("link", name="I already have a model").click()
    expect(page.get_by_role("link", name="I already have a model")).to_have_attribute("aria-current", "page")
    expect(page.get_by_label("Parameters")).to_have_value("7e10")
    expect(page.get_by_label("Training tokens")).to_have_value("1.4e12")
    page.get_by_label("Deadline (days)").fill("45")
    page.get_by_role("button", name="Estimate", exact=True).click()

    expect(page.get_by_role("heading", name="Estimate", exact=True)).to_be_visible()
    api = api_answer(
        acme, "/v1/estimates", {"params": 7e10, "tokens": 1.4e12, "hardware": "h100-sxm", "days": 45}
    )
    expect(page.locator("[data-figure=days]")).to_have_text(f"{api['days']:,.1f} days")
    expect(page.locator("[data-figure=cost_exact]")).to_have_text(f"{Decimal(api['cost']):,.2f} USD")
    expect(page.locator("[data-figure=accelerator_hours]")).to_have_text(
        format_number(api["accelerator_hours"])
    )
    expect(page.locator("[data-figure=accelerators]")).to_have_text(f"{api['accelerators']:,}")
    expect(page.locator("[data-figure=mfu]")).to_have_text(f"MFU {100 * api['mfu']:.1f}%")
    expect(page.get_by_text(f"of {api['memory']['capacity_bytes'] / 1e9:,.1f} GB: fits")).to_be_visible()
    chosen = page.locator("table.layouts tr.chosen td")
    expect(chosen.nth(0)).to_have_text(str(api["performance"]["layout"]["tensor_parallel"]))
    assert laid_out(page, LAYOUTS_FIT), "the layout table scrolls sideways in the answer's column"
    bottoms = laid_out(page, BOTTOMS, ["days", "cost", "accelerators", "mfu"])
    assert max(bottoms.values()) <= LAPTOP["height"], bottoms
    assert_charts_legible(page, charts=3)  # the step by part, days and cost against the accelerators
    shots(page, "estimate")
    page.get_by_label("Plan name").fill("70B in 45 days")
    page.get_by_role("button", name="Save as plan").click()
    expect(page.get_by_role("heading", name="70B in 45 days")).to_be_visible()
    expect(page.get_by_text(f"{Decimal(api['cost']):,.2f} USD").first).to_be_visible()  # the run estimated


# A dense model's layout table, its eleven columns, fits the answer's column: nothing hides past its edge.
LAYOUTS_FIT = """() => (region => region.scrollWidth <= region.clientWidth)(
  document.querySelector('table.layouts').closest('.scroll'))"""

# Of every card of the answer: whether each of its parts is as wide as its text, and each figure one line.
CARDS_FIT = """() => [...document.querySelectorAll('.card')].map(card => ({
  title: card.querySelector('h3').textContent,
  overflowing: [card, ...card.querySelectorAll('*')]
    .filter(part => part.scrollWidth > part.clientWidth && getComputedStyle(part).display !== 'inline')
    .map(part => part.outerHTML.slice(0, 80)),
  lines: (figure => figure.getClientRects().length && figure.getBoundingClientRect().height
    / parseFloat(getComputedStyle(figure).lineHeight))(card.querySelector('.figure')),
}))"""


def test_a_thirty_million_cost_fits_its_card_on_every_screen(browser, acme, shots):
    page = signed_in_page(browser, acme)
    page.get_by_label("Amount").fill("30,000,000")
    page.get_by_role("button", name="Plan", exact=True).click()
    expect(page.get_by_role("heading", name="Allocation")).to_be_visible()
    cost = Decimal(
        page.locator("[data-figure=cost_exact]").inner_text().removesuffix(" USD").replace(",", "")
    )
    assert cost > 20_000_000  # spent, mostly: the deadline binds before the money
    for viewport in (LAPTOP, {"width": 1024, "height": 768}, FULL_HD, {"width": 390, "height": 844}):
        page.set_viewport_size(viewport)
        cards = laid_out(page, CARDS_FIT)
        assert len(cards) >= 8
        for card in cards:
            assert card["overflowing"] == [], (viewport, card)
            assert card["lines"] < 1.5, (viewport, card)  # the figure on one line
    page.set_viewport_size(LAPTOP)
    shots(page, "planner-30m")


def test_the_planner_works_with_javascript_off(browser, acme):
    """The page has no script: with JavaScript off an Advanced section opens and the form plans."""
    page = signed_in_page(browser, acme, java_script_enabled=False)
    page.get_by_text("Parallel layout", exact=True).click()
    page.get_by_label("ZeRO stage").select_option("1")
    page.get_by_role("button", name="Plan", exact=True).click()
    expect(page.get_by_role("heading", name="Allocation")).to_be_visible()
    expect(page.locator("details#layout")).to_have_attribute("open", "")
    expect(page.locator("table.layouts tr.chosen td").nth(6)).to_have_text("1")


# Of every chart on the page as the browser lays it out, each scrolled into view: its box; the boxes of its
# labels and of its legend entries (line, marker and text as one); its frame and horizontal reference lines;
# each series' line (its points, computed colour and dash pattern), its markers (the first one's outline and
# fill, and how many of them are on top where they are drawn: seen, not under another line or marker); the
# computed colour of each part of a bar.
CHARTS = """() => [...document.querySelectorAll('svg.chart')].map(svg => {
  svg.scrollIntoView({block: 'center'});
  const box = element => {
    const r = element.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom];
  };
  const onScreen = (element, point) => {
    const p = svg.createSVGPoint();
    [p.x, p.y] = point;
    const at = p.matrixTransform(element.getScreenCTM());
    return [at.x, at.y];
  };
  const labels = [...svg.querySelectorAll('text')].filter(text => !text.closest('.legend-entry'));
  const items = [...labels, ...svg.querySelectorAll('.legend-entry')];
  const frame = svg.querySelector('rect.frame');
  return {
    id: svg.id,
    box: box(svg),
    items: items.map(item => ({text: item.textContent, box: box(item)})),
    legend: [...svg.querySelectorAll('.legend-entry')].map(entry => entry.textContent),
    frame: frame && box(frame),
    references: [...svg.querySelectorAll('line.reference')].map(box),
    series: [...svg.querySelectorAll('g.series')].map(group => {
      const line = group.querySelector('polyline');
      const marks = [...svg.querySelectorAll(`g.points[data-series="${group.dataset.series}"] path`)];
      const seen = marks.filter(mark => {
        const r = mark.getBoundingClientRect();
        return document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2) === mark;
      });
      return {
        stroke: line && getComputedStyle(line).stroke,
        dashes: line && getComputedStyle(line).strokeDasharray,
        points: line ? [...line.points].map(point => onScreen(line, [point.x, point.y])) : [],
        d: marks[0].getAttribute('d'),
        fill: marks[0].getAttribute('fill'),
        seen: seen.length,
      };
    }),
    parts: [...svg.querySelectorAll('rect.part')].map(part => getComputedStyle(part).fill),
  };
})"""
SLACK = 0.5  # of a pixel: rounding where the browser places text


def overlap(a: list[float], b: list[float]) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > SLACK and min(a[3], b[3]) - max(a[1], b[1]) > SLACK


def inside(inner: list[float], outer: list[float]) -> bool:
    return all(inner[i] >= outer[i] - SLACK for i in (0, 1)) and all(
        inner[i] <= outer[i] + SLACK for i in (2, 3)
    )


def assert_charts_legible(page: Page, charts: int) -> None:
    """The page's charts, at the laptop's 1366 by 768 and at 1920 by 1080: no label or legend entry runs into
    another or out of its picture, and no label lies on a plotted line; each horizontal line lies inside the
    frame rather than on its border; every series has a colour, a dash pattern and a marker of its own, some
    of its markers in sight (a line that coincides with another still shows), and its name in the legend
    when there is more than one; every part of a bar has a colour of its own."""
    for viewport in (LAPTOP, FULL_HD):
        page.set_viewport_size(viewport)
        drawn = laid_out(page, CHARTS)
        assert len(drawn) == charts
        for chart in drawn:
            where = f"{chart['id']} at {viewport['width']}x{viewport['height']}"
            for item in chart["items"]:
                assert inside(item["box"], chart["box"]), (where, item)
            for a, b in itertools.combinations(chart["items"], 2):
                assert not overlap(a["box"], b["box"]), (where, a, b)
            segments = [pair for series in chart["series"] for pair in itertools.pairwise(series["points"])]
            for item in chart["items"]:
                assert not any(crosses(segment, item["box"]) for segment in segments), (where, item)
            for line in chart["references"]:
                assert chart["frame"][1] + 3 <= line[1] <= line[3] <= chart["frame"][3] - 3, (where, line)
            strokes = [series["stroke"] for series in chart["series"]]
            dashes = [series["dashes"] for series in chart["series"]]
            shapes = [
                marker(ET.Element("path", d=series["d"], fill=series["fill"])) for series in chart["series"]
            ]
            assert len(set(strokes)) == len(strokes), (where, strokes)
            assert len(set(dashes)) == len(dashes), (where, dashes)
            assert len(set(shapes)) == len(shapes), (where, shapes)
            assert all(series["seen"] for series in chart["series"]), (where, chart["series"])
            if len(chart["series"]) > 1:
                assert len(chart["legend"]) == len(chart["series"]), (where, chart["legend"])
            assert len(set(chart["parts"])) == len(chart["parts"]), (where, chart["parts"])
    page.set_viewport_size(LAPTOP)
    page.evaluate("window.scrollTo(0, 0)")


@dataclass
class Journey:
    page: Page
    base: str
    key: str
    shots: Callable

    def api(self, method: str, path: str, **kwargs) -> dict:
        headers = {"Authorization": f"Bearer {self.key}"}
        return requests.request(method, self.base + path, headers=headers, timeout=30, **kwargs).json()


def sign_in(journey: Journey) -> None:
    """Signed out, the console asks for a key, and comes back to where it was going."""
    page, base = journey.page, journey.base
    page.goto(base + "/plans")
    expect(page).to_have_url(base + "/sign-in?next=/plans")
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    journey.shots(page, "sign-in")
    page.get_by_label("API key").fill("cpk_wrong0000_" + "x" * 32)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    page.get_by_label("API key").fill(journey.key)
    page.get_by_label("API key").press("Enter")  # the keyboard alone signs in
    expect(page).to_have_url(base + "/plans")
    expect(page.get_by_text("No plans match")).to_be_visible()


# The planner's charts: the step by part, days and cost against the accelerator count, the IsoFLOP profile.
PLANNER_CHARTS = ("step-breakdown", "cluster-days", "cluster-cost", "isoflop")


def make_a_plan(journey: Journey) -> None:
    """The planner: 6000 PF-days on 1024 H100s at ZeRO stage 3 under the Chinchilla law, as the API allocates
    them; the layout the cluster model chooses at stage 3 fits in memory, and the page shows it beside its
    alternatives, with the step by part and the run against the accelerator count."""
    page = journey.page
    page.get_by_role("link", name="Planner", exact=True).click()
    page.get_by_label("Budget in").select_option("pf_days")
    page.get_by_label("Amount").fill("6,000")
    page.get_by_label("Hardware").select_option("h100-sxm")
    page.get_by_label("Accelerators", exact=True).fill("1024")
    page.get_by_label("Deadline (days)").fill("")
    expect(page.get_by_label("ZeRO stage")).to_be_hidden()  # folded under Advanced until asked for
    page.get_by_text("Parallel layout", exact=True).click()
    page.get_by_label("ZeRO stage").select_option("3")
    page.get_by_label("Scaling law").select_option("chinchilla-2022")
    page.get_by_role("button", name="Plan", exact=True).click()
    expect(page.get_by_role("heading", name="Allocation")).to_be_visible()
    # The section holding the stage given stays open, and no other does: nothing set is hidden.
    expect(page.get_by_label("ZeRO stage")).to_have_value("3")
    expect(page.locator("details.section[open]")).to_have_count(1)
    expect(page.locator("details#layout")).to_have_attribute("open", "")
    cluster = {"hardware": "h100-sxm", "accelerators": 1024, "layout": {"zero_stage": 3}}
    allocation = journey.api(
        "POST", "/v1/allocations", json={"pf_days": 6000, "law": "chinchilla-2022", **cluster}
    )
    expect(page.locator("[data-figure=params]")).to_have_text(format_number(allocation["params"]))
    expect(page.locator("[data-figure=tokens]")).to_have_text(format_number(allocation["tokens"]))
    assert allocation["estimate"]["memory"]["fits"]
    expect(page.get_by_text("of 80.0 GB: fits")).to_be_visible()
    performance = allocation["estimate"]["performance"]
    chosen = page.locator("table.layouts tr.chosen td")
    expect(chosen.nth(0)).to_have_text(str(performance["layout"]["tensor_parallel"]))
    expect(chosen.nth(6)).to_have_text("3")  # the ZeRO stage given
    expect(page.locator("table.layouts tr.alternative")).to_have_count(len(performance["alternatives"]))
    chart = page.get_by_role("img", name="IsoFLOP profile")
    expect(chart).to_be_visible()
    expect(chart.locator("text", has_text="Compute-optimal")).to_have_count(1)
    assert chart.bounding_box()["width"] > 500  # drawn at a readable size
    step = page.get_by_role("img", name="by part")
    expect(step.locator(".legend-entry", has_text="Compute")).to_have_count(1)
    for name in ("Wall-clock days against accelerators", "Cost against accelerators"):
        sizes = page.get_by_role("img", name=name)
        expect(sizes.locator("text", has_text="This plan: 1,024")).to_have_count(1)
        assert sizes.bounding_box()["width"] > 500
    assert [svg.get_attribute("id") for svg in page.locator("svg.chart").all()] == list(PLANNER_CHARTS)
    assert_charts_legible(page, charts=len(PLANNER_CHARTS))
    journey.shots(page, "planner")


def let_the_planner_choose_the_cluster(journey: Journey) -> None:
    """With the accelerators left blank the planner chooses how many, says why, and draws the same charts
    around its choice; then back to the plan on 1024."""
    page = journey.page
    page.get_by_label("Accelerators", exact=True).fill("")
    page.get_by_role("button", name="Plan", exact=True).click()
    expect(page.get_by_text("chosen by cost")).to_be_visible()
    chosen = page.locator("[data-figure=accelerators]").inner_text()
    sizes = page.get_by_role("img", name="Cost against accelerators")
    expect(sizes.locator("text", has_text=f"This plan: {chosen}")).to_have_count(1)
    assert_charts_legible(page, charts=len(PLANNER_CHARTS))
    journey.shots(page, "planner-chosen")
    page.go_back()
    expect(page.locator("[data-figure=accelerators]")).to_have_text("1,024")


def see_bad_input_named(journey: Journey) -> None:
    """A bad amount is named beside its field, and nothing is planned."""
    page = journey.page
    page.goto(journey.base + "/?budget_kind=pf_days&budget=-1")
    expect(page.locator("#budget-error")).to_contain_text("greater than")
    expect(page.get_by_label("Amount")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_role("heading", name="Allocation")).to_have_count(0)
    journey.shots(page, "planner-error")
    page.go_back()


def save_and_commit(journey: Journey) -> dict:
    """Save the plan on the budget, then commit it; returns the plan as the API has it."""
    page = journey.page
    page.get_by_label("Plan name").fill("38B for FY26")
    page.get_by_label("Charge to budget").select_option(label="FY26 pretraining (USD)")
    page.get_by_role("button", name="Save as plan").click()
    expect(page.get_by_role("heading", name="38B for FY26")).to_be_visible()
    plan_id = page.url.rsplit("/", 1)[1]
    page.get_by_role("button", name="Commit to budget").click()
    expect(page.locator("h1 .status")).to_have_text("committed")
    journey.shots(page, "plan")
    return journey.api("GET", f"/v1/plans/{plan_id}")


def save_a_second_plan(journey: Journey) -> None:
    """Off budget with twice the accelerators, to compare with."""
    page = journey.page
    page.goto(
        journey.base
        + "/?budget_kind=pf_days&budget=6000&hardware=h100-sxm&accelerators=2048&law=chinchilla-2022"
    )
    page.get_by_label("Plan name").fill("38B on 2048")
    page.get_by_role("button", name="Save as plan").click()
    expect(page.get_by_role("heading", name="38B on 2048")).to_be_visible()


def filter_history_and_compare(journey: Journey) -> None:
    """History has both plans; the status filter keeps the committed one; the two compare side by side."""
    page = journey.page
    page.get_by_role("link", name="Plans", exact=True).click()
    expect(page.get_by_role("link", name="38B for FY26")).to_be_visible()
    expect(page.get_by_role("link", name="38B on 2048")).to_be_visible()
    page.get_by_label("Status").select_option("committed")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("link", name="38B on 2048")).to_have_count(0)
    expect(page.get_by_role("link", name="38B for FY26")).to_be_visible()
    journey.shots(page, "history-filtered")
    page.get_by_role("link", name="Clear").click()
    page.get_by_label("Compare 38B for FY26").check()
    page.get_by_label("Compare 38B on 2048").check()
    journey.shots(page, "history")
    page.get_by_role("button", name="Compare selected").click()
    expect(page.get_by_role("heading", name="Compare plans")).to_be_visible()
    expect(page.locator("code", has_text="inputs.accelerators")).to_be_visible()
    journey.shots(page, "compare")


def see_the_budget(journey: Journey, plan: dict) -> None:
    """The budgets' utilisation bars, and the budget's own bar and burn chart, show the committed plan."""
    page = journey.page
    page.get_by_role("link", name="Budgets", exact=True).click()
    expect(page.get_by_role("img", name="FY26 pretraining")).to_be_visible()
    assert_charts_legible(page, charts=1)
    journey.shots(page, "budgets")
    page.get_by_role("link", name="FY26 pretraining").click()
    expect(page.get_by_text(f"{Decimal(plan['cost']):,.2f} USD").first).to_be_visible()
    expect(page.get_by_role("img", name="Committed over the budget's period")).to_be_visible()
    assert_charts_legible(page, charts=2)  # the amount's line inside the burn chart's frame among them
    journey.shots(page, "budget")


def see_the_frontier(journey: Journey) -> None:
    """The fitted laws beside the published ones, one with its bootstrap band: nine laws, each in a colour
    and with a marker of its own."""
    page = journey.page
    page.get_by_role("link", name="Scaling laws").click()
    chart = page.get_by_role("img", name="Compute-optimal model size N")
    legend = chart.locator("text", has_text="acme-sweep (band: 95% bootstrap interval)")
    expect(legend).to_have_count(1)
    assert chart.locator("polygon").count() >= 1
    expect(chart.locator("g.series")).to_have_count(9)
    dense = [law.slug for law in PUBLISHED_LAWS.values() if law.moe is None]
    sweeps = [f"{name}-sweep" for name in ("acme", "code", "math", "multilingual")]
    legend = [text.split(" (band")[0] for text in chart.locator(".legend-entry").all_text_contents()]
    assert sorted(legend) == sorted(dense + sweeps)  # each law named, each drawn (assert_charts_legible)
    assert_charts_legible(page, charts=2)
    journey.shots(page, "laws")


def download_the_cost_report(journey: Journey, plan: dict, budget_id: str, directory: Path) -> None:
    """The cost report, and its CSV: the committed plan's exact cost on its budget, planned against nothing
    spent yet."""
    page, year = journey.page, int(plan["start_at"][:4])
    page.get_by_role("link", name="Cost report").click()
    page.get_by_label("From (UTC date)").fill(f"{year}-01-01")
    page.get_by_label("Before (UTC date)").fill(f"{year + 1}-01-01")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("table")).to_contain_text(f"{Decimal(plan['cost']):,.2f}")
    journey.shots(page, "costs")
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Download CSV").click()
    download = download_info.value
    assert download.suggested_filename.endswith(".csv")
    saved = directory / download.suggested_filename
    download.save_as(saved)
    rows = list(csv.DictReader(io.StringIO(saved.read_text())))
    # Planned against actual, as the page shows it: the plan in its month, nothing spent yet, and totals.
    planned = [
        (row["budget"], row["planned_cost"])
        for row in rows
        if row["budget"] and row["planned_cost"] != "0.00"
    ]
    assert planned == [(budget_id, f"{Decimal(plan['cost']):.2f}")]
    assert {row["actual_cost"] for row in rows} == {"0.00"}


def sign_out(journey: Journey) -> None:
    """Signing out forgets the key."""
    page = journey.page
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(journey.base + "/sign-in")
    page.goto(journey.base + "/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_the_command_line_at_work(browser, acme, shots):
    """`planner` against the same server, its output shown as a terminal would: the README's picture."""
    env = {**os.environ, "PLANNER_URL": acme["base"], "PLANNER_API_KEY": acme["key"]}
    planner = str(Path(sys.executable).parent / "planner")
    cluster = [
        "--hardware",
        "h100-sxm",
        "--accelerators",
        "1024",
        "--law",
        "chinchilla-2022",
        "--zero-stage",
        "3",
    ]
    commands = [
        ["allocate", "--pf-days", "6000", *cluster],
        ["plan", "create", "--organization", "acme", "--name", "38B for FY26", "--pf-days", "6000", *cluster],
        ["plan", "list"],
    ]
    transcript = []
    for arguments in commands:
        done = subprocess.run(
            [planner, *arguments], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        transcript.append(f"$ planner {' '.join(arguments)}\n{done.stdout}")
    assert "38B for FY26" in transcript[-1]
    page = browser.new_page(viewport={"width": 1400, "height": 300})
    page.set_content(
        '<body style="margin:0;background:#1b1f24"><pre style="margin:0;padding:16px;color:#e6edf3;'
        'font:14px/1.4 monospace">' + html.escape("\n".join(transcript)) + "</pre></body>"
    )
    shots(page, "cli", audit=False)  # a picture of a terminal, not a page of the console

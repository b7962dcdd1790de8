"""Lists of plans are written by hand (services/plan_summaries.py, stored with each plan's row) and
documented by PlanSummarySchema, a plan by plan_document and PlanSchema: each pair must give the same
document, byte for byte, for plans of every kind. A member added to a schema and not to what writes it by
hand, or formatted otherwise, fails here."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

import marshmallow as ma
import pytest
from sqlalchemy import select, update

from service.data.models import PLAN_STATUSES, Plan
from service.schemas.plans import PlanSchema, PlanSummarySchema, written_plan_document
from tests.api.test_plans import (
    INLINE_HARDWARE,
    UNPRICED_HARDWARE,
    add_gpu,
    allocation_body,
    create_plan,
    make_budget,
    plan_body,
    post_plan,
    revise,
    statements_of,
    transition,
)
from tests.api.test_plans import world as world  # noqa: PLC0414 -- the fixture, re-exported
from tests.api.test_usage import report


def commit(client, plan: dict) -> None:
    assert transition(client, plan["id"], "commit").status_code == 200


@pytest.fixture
def varied(client, session, world) -> list[str]:
    """Plans with and without a budget, a cost, a name, labels, hardware of the catalog (hence a slug), a
    parent; in every status, in two currencies; and, written straight into the database, figures that the
    API would not give easily: no predicted loss, amounts finer than a cent, floats printed with an exponent,
    more tokens trained than planned. Their ids."""
    budget = make_budget(client, amount="100000.00")
    add_gpu(client, "euro-gpu", price="3.10", currency="EUR")
    drafted = create_plan(
        client, budget_id=budget["id"], name='Überplan "β" ✓', labels={"team": "alpha", "note": "naïve"}
    )
    unpriced = create_plan(client, hardware=UNPRICED_HARDWARE)
    inline = create_plan(client, hardware=INLINE_HARDWARE, labels={})
    euro = create_plan(client, hardware="euro-gpu", name="in euros")
    allocated = post_plan(client, allocation_body(budget="remaining", budget_id=budget["id"]))
    assert allocated.status_code == 201, allocated.get_json()
    revised = revise(client, drafted["id"], {"accelerators": 20, "labels": {"note": None}})
    assert revised.status_code == 201, revised.get_json()

    cancelled = create_plan(client, budget_id=budget["id"])
    commit(client, cancelled)
    assert transition(client, cancelled["id"], "cancel").status_code == 200
    committed = create_plan(client, budget_id=budget["id"])
    commit(client, committed)
    running = create_plan(client, budget_id=budget["id"])
    commit(client, running)
    assert report(client, running["id"]).status_code == 201
    completed = create_plan(client, budget_id=budget["id"])
    commit(client, completed)
    assert report(client, completed["id"], tokens=3e10, cost="123.456789", currency="USD").status_code == 201
    assert transition(client, completed["id"], "complete").status_code == 200
    failed = create_plan(client, budget_id=budget["id"])
    commit(client, failed)
    assert report(client, failed["id"]).status_code == 201
    assert transition(client, failed["id"], "fail").status_code == 200

    odd = create_plan(client)
    session.execute(
        update(Plan)
        .where(Plan.id == uuid.UUID(odd["id"]))
        .values(
            predicted_loss=None,
            params=1.5e16,
            flops=6.02e-5 * 1e30,
            cost=Decimal("0.000123"),
            tokens_trained=1e22,
            actual_cost=Decimal("1.10"),
            # As every writer must (the version is the ETag): its stored summary is then not served, the row
            # is rendered as the page is read.
            version=Plan.version + 1,
        )
    )
    session.flush()
    made = (drafted, unpriced, inline, euro, allocated.get_json(), revised.get_json())
    return [plan["id"] for plan in (*made, cancelled, committed, running, completed, failed, odd)]


def test_a_page_of_plans_is_the_document_the_summary_schema_describes_byte_for_byte(
    app, client, session, varied
):
    response = client.get("/v1/plans?limit=100")

    assert response.status_code == 200
    items = response.get_json()["items"]
    assert sorted(item["id"] for item in items) == sorted(varied)
    plans = {
        str(plan.id): plan
        for plan in session.scalars(select(Plan).where(Plan.id.in_([uuid.UUID(id_) for id_ in varied]))).all()
    }
    # PageSchema's member first, then PlanPageSchema's: the order marshmallow dumps them in.
    documented = {
        "next_cursor": None,
        "items": PlanSummarySchema(many=True).dump([plans[item["id"]] for item in items]),
    }
    # Members in the same order, numbers, money and times formatted alike: the bytes Flask writes of the
    # schema's dump.
    assert response.get_data(as_text=True) == app.json.response(documented).get_data(as_text=True)


def field_by_field(app, plan: Plan) -> str:
    """The JSON of marshmallow's own dump of PlanSchema, the way Flask writes a response."""
    return app.json.response(ma.Schema.dump(PlanSchema(), plan)).get_data(as_text=True)


def test_a_plan_is_the_document_its_schema_describes_byte_for_byte(app, client, session, varied):
    for id_ in varied:
        response = client.get(f"/v1/plans/{id_}")

        assert response.status_code == 200
        assert response.get_data(as_text=True) == field_by_field(app, session.get(Plan, uuid.UUID(id_)))


def test_a_new_plan_is_the_document_its_schema_describes_byte_for_byte(app, client, session, world):
    """A new plan's response is written around the summary kept with its row (written_plan_document)."""
    budget = make_budget(client, amount="1000.00")
    add_gpu(client, "euro-gpu", price="3.10", currency="EUR")
    bodies = [
        allocation_body(budget="remaining", budget_id=budget["id"], name="new", labels={"team": "alpha"}),
        plan_body(name='Überplan "β" ✓', labels={"note": "naïve"}),
        plan_body(hardware=UNPRICED_HARDWARE),
        plan_body(hardware=INLINE_HARDWARE, labels={}),
        plan_body(hardware="euro-gpu"),
    ]
    responses = [post_plan(client, body) for body in bodies]
    responses.append(revise(client, responses[1].get_json()["id"], {"accelerators": 20, "labels": None}))

    for response in responses:
        assert response.status_code == 201, response.get_json()
        plan = session.get(Plan, uuid.UUID(response.get_json()["id"]))
        assert response.get_data(as_text=True) == field_by_field(app, plan)


def test_a_plan_only_the_standard_library_writes_is_written_whole_as_flask_would(app, client, session, world):
    """Text only \\u escapes carry (a lone surrogate) in a document: orjson refuses it, Flask writes the
    whole response with the standard library, escaping all but ASCII; so does written_plan_document, rather
    than splice that text to a summary orjson wrote."""
    created = create_plan(client, name="Überplan")
    plan = session.get(Plan, uuid.UUID(created["id"]))
    field_by_field(app, plan)  # what the summary reads through relationships, loaded
    session.expunge(plan)  # then changed in memory only: the summary kept is still the version's
    plan.inputs = {**plan.inputs, "note": "\ud800"}

    written = written_plan_document(plan) + "\n"

    assert written == field_by_field(app, plan)
    assert "\\u00dcberplan" in written


def test_the_varied_plans_cover_what_a_summary_may_hold(client, varied):
    items = client.get("/v1/plans?limit=100").get_json()["items"]

    def seen(member: str) -> set:
        return {repr(item[member]) for item in items}

    assert {repr(status) for status in PLAN_STATUSES} == seen("status")
    assert {"None", "'USD'", "'EUR'"} == seen("currency")
    assert {"None", "'lab-gpu'", "'euro-gpu'"} == seen("hardware")
    assert {"None", "'0.000123'", "'500.00'"} <= seen("cost")
    assert {"None", "1.5e+16"} <= seen("predicted_loss") | seen("params")
    assert {"None", repr(varied[0])} == seen("parent_id")
    assert "None" in seen("budget_id")
    assert {"{}", repr({"team": "alpha", "note": "naïve"})} <= seen("labels")
    assert {"0.0", "0.1", "0.5", "1.0"} <= seen("share_trained")


# --- Summaries kept with their rows (services/plan_summaries.py) -------------------------------------------


def stored(session, plan_id: str) -> tuple[str | None, int | None, int]:
    plan = session.get(Plan, uuid.UUID(plan_id))
    session.refresh(plan)
    return plan.summary, plan.summary_version, plan.version


def test_every_plan_the_api_writes_keeps_the_summary_a_page_serves_of_its_current_version(
    client, session, varied
):
    served = {item["id"]: item for item in client.get("/v1/plans?limit=100").get_json()["items"]}

    # All but the one changed straight in the database, in every status: created, revised, committed,
    # cancelled, reported on, started, completed, failed.
    for plan_id in varied[:-1]:
        summary, summary_version, version = stored(session, plan_id)
        assert summary_version == version, plan_id
        assert json.loads(summary) == served[plan_id]


def test_a_row_changed_without_its_summary_is_served_as_it_is_now_not_as_it_was(client, session, varied):
    odd = varied[-1]  # its figures were changed in the database and its version bumped, its summary not
    summary, summary_version, version = stored(session, odd)
    assert summary_version == version - 1
    assert json.loads(summary)["params"] != 1.5e16

    served = {item["id"]: item for item in client.get("/v1/plans?limit=100").get_json()["items"]}

    assert served[odd]["params"] == 1.5e16
    assert served[odd]["cost"] == "0.000123"


def test_plans_without_a_summary_are_served_rendered_from_their_rows_alongside_the_others(
    app, client, session, connection, varied
):
    """As plans written before migration 0010 are: one statement for the page, one more for all of those."""
    expected = client.get("/v1/plans?limit=100").get_data()
    without = [uuid.UUID(plan_id) for plan_id in varied[::2]]
    session.execute(update(Plan).where(Plan.id.in_(without)).values(summary=None, summary_version=None))
    session.flush()

    sent = statements_of(connection, lambda: client.get("/v1/plans?limit=100"))
    response = client.get("/v1/plans?limit=100")

    assert response.get_data() == expected
    assert len([sql for sql in sent if "FROM plans" in sql]) == 2


def test_a_page_reads_the_plans_table_alone_and_renders_only_the_rows_whose_summary_is_behind(
    client, connection, varied
):
    sent = statements_of(connection, lambda: client.get("/v1/plans?limit=100"))

    page, rendered = [sql for sql in sent if "plans" in sql]  # the odd plan's summary is behind its row
    assert "JOIN" not in page
    assert "," not in rendered.partition("WHERE plans.id IN (")[2]  # one id

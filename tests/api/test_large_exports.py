"""Issue 50: large exports stream instead of being refused. The cost report's CSV (rows and totals) and the
FOCUS export stream every row past the JSON's bound of MAX_ROWS, read from the database as they are written;
what is wrong with the query is still a 4xx problem before the first byte; a database error once the stream
has begun cuts it short rather than ending it as if complete. The JSON keeps its bound and says to ask for
CSV. The cap is made small here (MAX_ROWS): bench/large_exports.py measures a real 300 000-row export."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy.exc import OperationalError

from service.services import focus as focus_service
from service.services import reports as reports_service
from service.services import spend as spend_service
from service.web import csv_files
from tests.api.test_reports import insert_plans
from tests.api.test_reports_actuals import QUARTER, focus, plan, report, spend
from tests.api.test_reports_actuals import runs as runs  # noqa: PLC0414 -- the fixture, re-exported
from tests.api.test_reports_actuals import world as world  # noqa: PLC0414 -- the fixture, re-exported
from tests.problems import assert_problem

CAP = 5


@pytest.fixture
def small_cap(monkeypatch):
    """MAX_ROWS of CAP rows, wherever a report reads it."""
    for module in (reports_service, spend_service, focus_service):
        monkeypatch.setattr(module, "MAX_ROWS", CAP, raising=False)
    return CAP


def rows_of(response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.get_data(as_text=True), newline="")))


def test_a_csv_report_past_the_row_cap_streams_every_row(client, session, world, small_cap):
    insert_plans(session, world, [plan("acme", budget="acme-USD", duration=timedelta(days=20))])
    # Every day of January: 31 rows, past the cap of 5.
    params = {"from_": "2026-01-01T00:00:00Z", "to": "2026-02-01T00:00:00Z", "granularity": "day"}
    response = report(client, **params, group_by="budget", measure="both", format="csv")
    rows = rows_of(response)
    assert [row["period_start"] for row in rows] == [f"2026-01-{day:02d}" for day in range(1, 32)]
    # The plan's 100.00 over its schedule, 20 days from 10 January, in January's days: every cent of it.
    assert sum(Decimal(row["planned_cost"]) for row in rows) == Decimal("100.00")
    assert {row["planned_cost"] for row in rows[9:29]} == {"5.00"}


def test_the_streamed_csv_is_the_json_report_row_for_row(client, session, world, monkeypatch):
    insert_plans(
        session,
        world,
        [
            plan("acme", budget="acme-USD", labels={"team": "alpha"}, duration=timedelta(days=40)),
            plan("acme", "2026-01-20T12:00:00+00:00", labels={"team": "beta"}, duration=timedelta(days=3)),
            plan("globex", "2026-02-03T00:00:00+00:00", cost="33.33"),
            plan("globex", "2025-12-20T00:00:00+00:00", cost="10.01", duration=timedelta(days=90)),
        ],
    )
    params = {**QUARTER, "granularity": "week", "group_by": "organization,label:team", "measure": "both"}
    body = report(client, **params).get_json()
    monkeypatch.setattr(reports_service, "MAX_ROWS", 3)
    rows = rows_of(report(client, **params, format="csv"))
    assert len(rows) == len(body["rows"]) > 3
    assert [
        (row["period_start"], row["organization"], row["label:team"], row["planned_cost"]) for row in rows
    ] == [
        (row["period_start"], row["organization"], row["label:team"] or "", row["planned_cost"])
        for row in body["rows"]
    ]


def test_the_totals_csv_past_the_row_cap_are_the_totals_of_every_row(client, session, world, small_cap):
    insert_plans(session, world, [plan("acme", budget="acme-USD"), plan("globex", cost="7.00")])
    params = {**QUARTER, "granularity": "day", "measure": "both", "format": "csv"}
    [usd] = rows_of(report(client, **params, part="totals"))
    assert (usd["currency"], usd["planned_plans"], usd["planned_cost"]) == ("USD", "2", "107.00")


def test_the_json_past_the_row_cap_is_a_422_that_points_to_the_csv(client, world, small_cap):
    response = report(client, **QUARTER, granularity="day", measure="both")
    problem = assert_problem(response, 422)
    assert [error["parameter"] for error in problem["errors"]] == ["granularity"]
    assert "format=csv" in problem["errors"][0]["detail"]


def test_a_focus_export_past_the_row_cap_streams_every_charge(client, session, world, small_cap):
    [plan_id] = insert_plans(session, world, [plan("acme", budget="acme-USD")])
    days = {f"2026-01-{day:02d}": (1.0, "2.50") for day in range(10, 20)}
    spend(session, world, plan_id, days)
    rows = rows_of(focus(client, **QUARTER))
    assert [row["ChargePeriodStart"][:10] for row in rows] == sorted(days)
    assert sum(float(row["BilledCost"]) for row in rows) == 25.0
    via_costs = rows_of(report(client, **QUARTER, format="focus"))
    assert via_costs == rows


def test_the_exports_stream(client, world, runs):
    for path in ("/v1/reports/focus", "/v1/reports/costs?format=csv&granularity=day&measure=both&"):
        response = client.get(
            f"{path}?from={QUARTER['from_']}&to={QUARTER['to']}".replace("&?", "&"), buffered=False
        )
        assert response.status_code == 200
        assert response.is_streamed
        assert response.get_data(as_text=True).count("\n") > 1
        response.close()


@pytest.mark.parametrize(
    ("target", "path"),
    [
        (spend_service, "_combinations"),
        (focus_service, "_charges"),
    ],
)
def test_a_database_that_fails_before_the_first_byte_is_a_503_problem(
    client, world, monkeypatch, target, path
):
    def unavailable(*args, **kwargs):
        raise OperationalError("SELECT", {}, Exception("server closed the connection"))

    monkeypatch.setattr(target, path, unavailable)
    costs = report(client, **QUARTER, granularity="day", measure="both", format="csv")
    charges = focus(client, **QUARTER)
    for response in (costs,) if target is spend_service else (charges,):
        assert not response.is_streamed
        assert_problem(response, 503)


def test_a_database_error_mid_stream_cuts_the_export_short(client, session, world, runs, monkeypatch):
    """Once the first bytes are sent no status can change: the stream ends broken (the server drops the
    connection without the chunked body's last chunk), never as a file that looks complete."""
    real = focus_service._focus_row
    written = []

    def failing(*args, **kwargs):
        if written:
            raise OperationalError("FETCH FORWARD", {}, Exception("server closed the connection"))
        written.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(focus_service, "_focus_row", failing)
    monkeypatch.setattr(csv_files, "CHUNK_BYTES", 1)  # a chunk per row: the header and a row are sent
    response = client.get(f"/v1/reports/focus?from={QUARTER['from_']}&to={QUARTER['to']}", buffered=False)
    assert response.status_code == 200
    chunks: list[bytes] = []
    with pytest.raises(OperationalError):
        chunks.extend(response.response)
    assert b"".join(chunks).count(b"\n") == 2  # the header and the first charge: then it broke

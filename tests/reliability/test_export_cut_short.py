"""Issue 50: a large export streams, and one the database fails in the middle of is visibly cut short.

The FOCUS export of a year of 60 plans' usage (21 900 rows, about 20 MB) is read slowly through a real
gunicorn, so that the server is mid-stream, sending as fast as the client takes it, when PostgreSQL stops.
The status (200) went out with the first byte: what must not happen is a file that looks complete. The
chunked body ends without its last chunk, which a client sees as a broken transfer; the export read whole
afterwards has every row.
"""

from __future__ import annotations

import time
import uuid
from datetime import date, timedelta
from decimal import Decimal

import pytest
import requests
from sqlalchemy import create_engine, insert, select

from service.data.models import Organization, UsageDay
from tests.reliability.conftest import AUTH, ORGANIZATION, START_AT, prepare_world

pytestmark = pytest.mark.reliability

PLANS, DAYS = 60, 365
EXPORT = "/v1/reports/focus?from=2027-01-01T00:00:00Z&to=2028-01-01T00:00:00Z"


def a_year_of_usage(server, cluster) -> None:
    budget = prepare_world(server, budgets=2)[0]  # the large one
    body = {
        "organization": ORGANIZATION,
        "params": 1e9,
        "tokens": 2e10,
        "hardware": "h100-sxm",
        "accelerators": 64,
        "start_at": START_AT,
        "budget_id": budget,
    }
    plans = []
    for _ in range(PLANS):  # committed: an export counts the spend of plans charged to budgets
        plan = server.call("POST", "/v1/plans", 201, json=body)["id"]
        server.call("POST", f"/v1/plans/{plan}/commit", 200)
        plans.append(uuid.UUID(plan))
    engine = create_engine(cluster.url)
    with engine.begin() as connection:
        organization = connection.scalar(select(Organization.id).where(Organization.slug == ORGANIZATION))
        first = date(2027, 1, 1)
        connection.execute(
            insert(UsageDay),
            [
                {
                    "plan_id": plan,
                    "day": first + timedelta(days=day),
                    "organization_id": organization,
                    "accelerator_hours": 1536.0,
                    "cost": Decimal("3840.00"),
                    "currency": "USD",
                }
                for plan in plans
                for day in range(DAYS)
            ],
        )
    engine.dispose()


def test_an_export_the_database_fails_mid_stream_is_cut_short_never_complete_looking(server, cluster):
    a_year_of_usage(server, cluster)
    whole = requests.get(f"{server.base}{EXPORT}", headers=AUTH, timeout=120)
    assert whole.status_code == 200, whole.text
    assert whole.text.count("\n") == 1 + PLANS * DAYS  # the header and every row: past no bound

    read = read_slowly_stopping_the_database(f"{server.base}{EXPORT}", cluster, after_bytes=1_000_000)
    cluster.start()
    assert read["error"] == "ChunkedEncodingError", read  # a broken transfer, not the end of a file
    assert 1_000_000 < read["bytes"] < len(whole.content)


def read_slowly_stopping_the_database(url: str, cluster, after_bytes: int) -> dict:
    """Read the export slowly, stopping PostgreSQL once `after_bytes` have come: how many bytes came, and
    the error that ended the transfer (None: it ended as a complete one)."""
    received, error = 0, None
    with requests.get(url, headers=AUTH, stream=True, timeout=120) as response:
        assert response.status_code == 200
        try:
            for chunk in response.iter_content(chunk_size=16384):
                if received < after_bytes <= received + len(chunk):
                    cluster.stop("fast")  # the export's session ends with every other
                received += len(chunk)
                time.sleep(0.002)  # a slow reader: the server waits on the socket, mid-stream
        except requests.RequestException as raised:
            error = type(raised).__name__
    return {"bytes": received, "error": error}

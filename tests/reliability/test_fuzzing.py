"""Every operation, fuzzed over HTTP against the real server from the OpenAPI document it serves, with a
valid admin key and every check (tests/fuzzing.py keeps what is drawn to the rules the document states):
no 5xx, valid requests accepted, and every response matches its documented status, media type and schema.

FUZZ_EXAMPLES_LIVE (default 10) sets the examples per operation: the breadth is the in-process fuzzing's
(tests/api/test_openapi.py, FUZZ_EXAMPLES, default 25), which draws from the same description with the same
rules; what only this one checks is the real server's stack (gunicorn, its HTTP parsing, the database behind
it), which ten examples an operation exercise. A fit, which the server makes from its whole grid of 4 500
starts, is drawn a fifth as often (the in-process fuzzing fits with a few starts and draws it as often as the
rest).
"""

from __future__ import annotations

import os
import uuid

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from service.data.models import Plan
from tests import fuzzing
from tests.api.test_openapi import FITTING_OPERATIONS, _operations
from tests.builders import usage_record
from tests.reliability.conftest import AUTH

pytestmark = pytest.mark.reliability

ORGANIZATION = "fuzzed"


@pytest.fixture(scope="module")
def world(shared_server) -> fuzzing.World:
    shared_server.call("POST", "/v1/organizations", 201, json={"slug": ORGANIZATION, "name": "Fuzzed"})
    budget = shared_server.call(
        "POST",
        "/v1/budgets",
        201,
        json={
            "organization": ORGANIZATION,
            "name": "Fuzzed",
            "amount": "5000000.00",
            "currency": "USD",
            "period_start": "2026-01-01T00:00:00Z",
            "period_end": "2027-01-01T00:00:00Z",
        },
    )
    plan = shared_server.call(
        "POST", "/v1/plans", 201, json={**fuzzing.MEASURED_PLAN, "organization": ORGANIZATION}
    )
    # Its run's usage, written as the usage API stores it (a calibration fits on measured runs).
    engine = create_engine(shared_server.env["DATABASE_URL"])
    try:
        with Session(engine) as session:
            row = session.get(Plan, uuid.UUID(plan["id"]))
            session.add(usage_record(row, start=row.start_at, hours=1, tokens_per_second=1e5))
            session.commit()
    finally:
        engine.dispose()
    return fuzzing.World(organization=ORGANIZATION, budget_id=budget["id"], measured_plan_id=plan["id"])


@pytest.fixture(scope="module")
def described(shared_server, world):
    """The description the live server serves, loaded once for every operation."""
    return fuzzing.loaded(requests.get(f"{shared_server.base}/openapi.json", timeout=60).json(), world)


@pytest.mark.parametrize("operation", _operations())
def test_the_live_server_conforms_to_its_description_under_fuzzing(shared_server, described, operation):
    method, path = operation.split(" ")
    headers = AUTH  # If-Match as drawn (half `*`: tests/fuzzing.py); 412 and 428 as schemathesis.toml says

    examples = int(os.environ.get("FUZZ_EXAMPLES_LIVE", "10"))
    if operation in FITTING_OPERATIONS:
        examples = max(1, examples // 5)

    @given(case=described[path][method].as_strategy())
    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def conforms(case):
        case.call_and_validate(base_url=shared_server.base, headers=headers, timeout=60)  # every check

    conforms()

"""Every operation, fuzzed over HTTP against the real server from the OpenAPI document it serves, with a
valid admin key: no 5xx, and every response matches its documented status, media type and schema.

FUZZ_EXAMPLES_LIVE (default 50) sets the examples per operation.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.api.test_openapi import CROSS_FIELD_RULES, _operations
from tests.reliability.conftest import AUTH

pytestmark = pytest.mark.reliability


@pytest.mark.parametrize("operation", _operations())
def test_the_live_server_conforms_to_its_description_under_fuzzing(shared_server, operation):
    method, path = operation.split(" ")
    schema = schemathesis.openapi.from_url(f"{shared_server.base}/openapi.json")
    headers = {**AUTH, "If-Match": "*"}  # so that updates and deletes get past their preconditions

    @given(case=schema[path][method].as_strategy())
    @settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES_LIVE", "50")),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def conforms(case):
        # As in tests/api/test_openapi.py: some schema-valid requests are 422 by rules no schema can state.
        semantic = "cursor" in (case.query or {}) or operation in CROSS_FIELD_RULES
        case.call_and_validate(
            headers=headers,
            timeout=60,
            excluded_checks=[positive_data_acceptance] if semantic else None,
        )

    conforms()

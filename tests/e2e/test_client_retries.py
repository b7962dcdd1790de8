"""planner_client retries what the server asks it to retry: here, a rate limit's 429 with Retry-After."""

from __future__ import annotations

import pytest

from planner_client import PlannerClient, ProblemError
from tests.e2e.conftest import ADMIN_KEY

pytestmark = pytest.mark.e2e


@pytest.fixture
def server_env() -> dict[str, str]:
    return {"RATE_LIMIT_PER_MINUTE": "120", "RATE_LIMIT_BURST": "2"}  # then one request every 0.5 s


def test_the_client_waits_out_a_rate_limit_and_then_succeeds(server):
    base, _, _ = server
    planner = PlannerClient(base, ADMIN_KEY)
    answers = [planner.health()["status"]] + [len(list(planner.organizations())) for _ in range(5)]
    assert answers == ["ok", 0, 0, 0, 0, 0]  # with 429s along the way, each waited out


def test_without_retries_the_rate_limit_is_a_problem_error(server):
    base, _, _ = server
    planner = PlannerClient(base, ADMIN_KEY, retries=0)

    def faster_than_the_rate() -> None:  # 2 at once, then 2 a second: 10 in a row cannot all pass
        for _ in range(10):
            list(planner.organizations())

    with pytest.raises(ProblemError) as limited:
        faster_than_the_rate()
    assert limited.value.status == 429
    assert limited.value.headers["Retry-After"] == "1"

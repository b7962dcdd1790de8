"""/metrics under gunicorn as `make run` starts it: no PROMETHEUS_MULTIPROC_DIR given, so gunicorn.conf.py
makes one, and the workers' values still add up."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import AUTH

pytestmark = pytest.mark.e2e


@pytest.fixture
def server_env() -> dict[str, str | None]:
    return {"PROMETHEUS_MULTIPROC_DIR": None}


def test_metrics_add_up_the_requests_of_every_worker_by_default(server):
    base, _, _ = server
    with ThreadPoolExecutor(8) as pool:
        statuses = list(
            pool.map(
                lambda _: requests.get(f"{base}/v1/organizations", headers=AUTH, timeout=10).status_code,
                range(40),
            )
        )
    assert statuses == [200] * 40
    text = requests.get(f"{base}/metrics", timeout=5).text
    served = [
        found.value
        for family in text_string_to_metric_families(text)
        for found in family.samples
        if found.name == "planner_http_requests_total"
        and found.labels == {"method": "GET", "route": "/v1/organizations", "status": "200"}
    ]
    assert served == [40.0]  # one series, summed over the workers
    _, process, _ = server
    process.send_signal(signal.SIGTERM)  # and gunicorn removes the directory it made
    assert process.wait(timeout=40) == 0

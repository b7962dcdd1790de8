"""The real thing: `flask setup` then gunicorn with the repository's config, spoken to over HTTP."""

from __future__ import annotations

import json
import math
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.e2e.conftest import AUTH

pytestmark = pytest.mark.e2e


def test_the_server_serves_probes_resources_and_problems(server):
    base, _, _ = server
    assert requests.get(f"{base}/healthz", timeout=5).json() == {"status": "ok"}
    assert requests.get(f"{base}/readyz", timeout=5).status_code == 200

    assert requests.get(f"{base}/v1/organizations", timeout=5).status_code == 401
    created = requests.post(
        f"{base}/v1/organizations", json={"slug": "acme", "name": "Acme"}, headers=AUTH, timeout=5
    )
    assert created.status_code == 201
    assert (
        requests.get(f"{base}{created.headers['Location']}", headers=AUTH, timeout=5).json() == created.json()
    )

    missing = requests.get(
        f"{base}/v1/organizations/nobody", headers={"X-Request-ID": "e2e-1", **AUTH}, timeout=5
    )
    assert missing.status_code == 404
    assert missing.headers["Content-Type"] == "application/problem+json"
    assert missing.json()["request_id"] == "e2e-1"


OVERSIZED = b'{"slug": "big", "name": "' + b"x" * (2 * 1024 * 1024) + b'"}'  # over the 1 MiB bound


def test_the_server_refuses_an_oversized_body_with_a_413_problem(server):
    base, _, _ = server
    response = requests.post(
        f"{base}/v1/organizations",
        data=OVERSIZED,
        headers={"Content-Type": "application/json", **AUTH},
        timeout=10,
    )
    assert response.status_code == 413
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json()["status"] == 413
    assert response.headers["Connection"] == "close"  # and it is closed: it said keep-alive before


def test_a_client_keeps_working_after_a_413_on_a_kept_alive_connection(server):
    base, _, _ = server
    with requests.Session() as client:
        refused = client.post(
            f"{base}/v1/organizations",
            data=OVERSIZED,
            headers={"Content-Type": "application/json", **AUTH},
            timeout=10,
        )
        assert refused.status_code == 413
        assert client.get(f"{base}/healthz", timeout=5).status_code == 200


def test_the_server_refuses_an_oversized_chunked_body_with_a_413_problem(server):
    base, _, _ = server

    def chunks():  # a generator body makes requests send Transfer-Encoding: chunked
        yield b'{"slug": "big", "name": "'
        for _ in range(32):
            yield b"x" * 65536
        yield b'"}'

    response = requests.post(
        f"{base}/v1/organizations",
        data=chunks(),
        headers={"Content-Type": "application/json", **AUTH},
        timeout=10,
    )
    assert response.status_code == 413
    assert response.headers["Content-Type"] == "application/problem+json"


def test_the_server_logs_json_lines_with_request_ids(server):
    base, process, log_path = server
    requests.get(f"{base}/healthz", headers={"X-Request-ID": "e2e-log"}, timeout=5)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=40)
    lines = [line for line in log_path.read_text().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line is a JSON object
    mine = [entry for entry in entries if entry.get("request_id") == "e2e-log"]
    assert len(mine) == 1, mine  # one line per request, not one from the app and one from gunicorn
    assert (mine[0]["method"], mine[0]["route"], mine[0]["status"]) == ("GET", "/healthz", 200)


def test_sigterm_stops_the_server_cleanly(server):
    base, process, _ = server
    assert requests.get(f"{base}/healthz", timeout=5).status_code == 200
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=40) == 0


def slow_fit_body() -> dict:
    """A synchronous fit that takes a few seconds (150 runs: about 2.5 s on an idle 2-core machine), long
    enough to be in flight a second after it was sent, and short enough to finish within gunicorn's 30 s of
    grace on a machine loaded several times over (500 runs took over 30 s at a load average of 7)."""
    runs = [
        {"params": n, "tokens": d, "loss": 1.8 + 480 / n**0.35 + 2100 / d**0.37 + 0.002 * math.sin(i)}
        for i, (n, d) in enumerate((1e7 * 1.6**a, 1e9 * 1.9**b) for a in range(15) for b in range(10))
    ]
    return {"organization": "acme", "name": "Slow", "runs": runs}


def test_sigterm_lets_the_requests_in_flight_finish(server):
    base, process, _ = server
    requests.post(f"{base}/v1/organizations", json={"slug": "acme", "name": "Acme"}, headers=AUTH, timeout=5)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            requests.post, f"{base}/v1/scaling-laws", json=slow_fit_body(), headers=AUTH, timeout=120
        )
        time.sleep(0.3)  # on its way in; the fit takes seconds (a whole second was too long when idle)
        assert not pending.done()  # still being served when the signal comes
        process.send_signal(signal.SIGTERM)
        assert pending.result().status_code == 201
    assert process.wait(timeout=40) == 0

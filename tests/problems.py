"""Assertions shared by the HTTP tests."""

from __future__ import annotations

PROBLEM_MEMBERS = {"type", "title", "status", "instance", "request_id"}


def assert_problem(response, status: int) -> dict:
    """The response is an RFC 9457 problem with this status; returns its body."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.headers["Cache-Control"] == "no-store"
    body = response.get_json(force=True)
    assert set(body) >= PROBLEM_MEMBERS, body
    assert body["status"] == status
    assert body["request_id"] == response.headers["X-Request-ID"]
    return body

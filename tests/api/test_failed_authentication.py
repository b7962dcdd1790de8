"""Failed authentications are limited per client address: a burst of wrong keys gets 429 with Retry-After,
before any lookup, while valid keys from the same address keep working. The console's sign-in form is
limited alike (tests/console/test_pages.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import event

from service.infra.config import Config, ConfigError
from service.web.ratelimit import FailedAuthentications
from tests.api.test_operations import sample
from tests.conftest import bearer, forget_failed_authentications
from tests.problems import assert_problem

LIMIT = 5


def wrong_key(n: int = 0) -> str:
    """A well-formed key that names no key: what someone guessing keys would send."""
    return f"cpk_guess{n:04d}_" + "x" * 43


def get(client, key: str, address: str = "192.0.2.10", **headers: str):
    return client.get(
        "/v1/organizations", headers={**bearer(key), **headers}, environ_base={"REMOTE_ADDR": address}
    )


@pytest.fixture
def limited(app_with):
    return app_with(auth_failures_per_minute=LIMIT).test_client()


# --- the failure table -------------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_address_may_fail_a_burst_then_once_per_refill():
    clock = Clock()
    failures = FailedAuthentications(per_minute=30, clock=clock)
    for n in range(30):
        assert failures.wait("192.0.2.1", wrong_key(n)) == 0
        failures.failed("192.0.2.1", wrong_key(n))
    assert failures.wait("192.0.2.1", wrong_key(30)) == pytest.approx(2.0)  # 30 a minute: one every 2 s
    assert failures.wait("192.0.2.2", wrong_key(30)) == 0  # every address has its own
    clock.now = 2.0
    assert failures.wait("192.0.2.1", wrong_key(30)) == 0


def test_a_key_admitted_lately_may_still_be_tried_from_an_address_over_its_limit():
    failures = FailedAuthentications(per_minute=1)
    valid = "cpk_valid000_" + "v" * 43
    failures.admitted(valid)
    failures.failed("192.0.2.1", wrong_key())
    assert failures.wait("192.0.2.1", wrong_key(1)) > 0
    assert failures.wait("192.0.2.1", valid) == 0
    failures.failed("192.0.2.1", valid)  # revoked meanwhile: no longer let through
    assert failures.wait("192.0.2.1", valid) > 0


def test_addresses_cycled_through_never_grow_the_table_beyond_its_bound():
    failures = FailedAuthentications(per_minute=1, max_addresses=100, max_known_keys=10)
    for n in range(1000):
        failures.failed(f"10.0.{n // 256}.{n % 256}", wrong_key(n))
        failures.admitted(f"cpk_valid{n:04d}_" + "v" * 43)
    assert failures.addresses() == 100
    assert failures.known_keys() == 10
    assert failures.wait("10.0.3.231", wrong_key()) > 0  # the latest are kept, the oldest forgotten
    assert failures.wait("10.0.0.0", wrong_key()) == 0


def test_failed_authentication_is_limited_unless_turned_off():
    assert Config.from_env({}).auth_failures_per_minute == 30
    assert Config.from_env({"AUTH_FAILURES_PER_MINUTE": "0"}).auth_failures_per_minute == 0
    assert Config.from_env({"TRUSTED_PROXY_HOPS": "1"}).trusted_proxy_hops == 1
    with pytest.raises(ConfigError, match="AUTH_FAILURES_PER_MINUTE"):
        Config.from_env({"AUTH_FAILURES_PER_MINUTE": "-1"})


# --- over HTTP ---------------------------------------------------------------------------------------------


def test_a_hundred_wrong_keys_from_one_address_are_mostly_refused_with_429(app):
    forget_failed_authentications(app, clock=lambda: 0.0)  # as if all 100 came in the same instant
    client = app.test_client()
    statuses = [get(client, wrong_key(n)).status_code for n in range(100)]
    assert statuses == [401] * 30 + [429] * 70  # the default: a burst of 30, then 30 a minute


def test_an_address_over_its_limit_gets_429_with_retry_after(limited):
    for n in range(LIMIT):
        assert_problem(get(limited, wrong_key(n)), 401)
    before = sample(limited, "planner_rate_limited_total", limit="auth_failures")
    refused = get(limited, wrong_key(LIMIT))
    body = assert_problem(refused, 429)
    assert int(refused.headers["Retry-After"]) >= 1
    assert "failed" in body["detail"]
    assert sample(limited, "planner_rate_limited_total", limit="auth_failures") == before + 1


def test_an_address_over_its_limit_is_refused_without_a_database_lookup(limited, connection):
    for n in range(LIMIT):
        get(limited, wrong_key(n))
    statements = []
    event.listen(connection, "before_cursor_execute", lambda *args: statements.append(args[2]))
    assert {get(limited, wrong_key(n)).status_code for n in range(20)} == {429}
    assert statements == []


def test_other_addresses_are_not_limited_by_one_addresss_failures(limited):
    for n in range(LIMIT + 1):
        get(limited, wrong_key(n), address="192.0.2.10")
    assert_problem(get(limited, wrong_key(), address="192.0.2.11"), 401)


def test_addresses_in_one_ipv6_64_share_their_failures(limited):
    for n in range(LIMIT):
        get(limited, wrong_key(n), address=f"2001:db8:1:2::{n + 1:x}")
    assert_problem(get(limited, wrong_key(), address="2001:db8:1:2:ffff::1"), 429)
    assert_problem(get(limited, wrong_key(), address="2001:db8:1:3::1"), 401)


def test_a_valid_key_from_an_address_over_its_limit_still_works(limited, issue_key):
    valid = issue_key("viewer", "acme")
    assert get(limited, valid).status_code == 200
    for n in range(LIMIT + 3):
        get(limited, wrong_key(n))
    assert_problem(get(limited, wrong_key()), 429)
    assert get(limited, valid).status_code == 200


def test_successes_never_use_up_an_addresss_failures(limited, issue_key):
    valid = issue_key("viewer", "acme")
    assert {get(limited, valid).status_code for _ in range(3 * LIMIT)} == {200}
    assert [get(limited, wrong_key(n)).status_code for n in range(LIMIT + 1)] == [401] * LIMIT + [429]


def test_malformed_keys_cost_no_lookup_and_are_not_counted(limited):
    """A key that is not cpk_<id>_<secret> is refused by its shape alone: it cannot be a guess at a key."""
    for _ in range(3 * LIMIT):
        assert_problem(get(limited, "not-a-key"), 401)
    assert_problem(get(limited, wrong_key()), 401)


def test_a_forged_x_forwarded_for_does_not_reset_an_address_limit(limited):
    for n in range(LIMIT):
        get(limited, wrong_key(n), **{"X-Forwarded-For": f"198.51.100.{n}"})
    assert_problem(get(limited, wrong_key(), **{"X-Forwarded-For": "198.51.100.99"}), 429)


def test_behind_trusted_proxies_the_address_they_forward_is_the_one_counted(app_with):
    client = app_with(auth_failures_per_minute=LIMIT, trusted_proxy_hops=1).test_client()
    for n in range(LIMIT):
        get(client, wrong_key(n), **{"X-Forwarded-For": "6.6.6.6, 198.51.100.1"})
    # The proxy (192.0.2.10) appended the client's address; whatever came before it is the client's to forge.
    assert_problem(get(client, wrong_key(), **{"X-Forwarded-For": "7.7.7.7, 198.51.100.1"}), 429)
    assert_problem(get(client, wrong_key(), **{"X-Forwarded-For": "198.51.100.2"}), 401)


def test_failed_authentication_can_be_left_unlimited(app_with):
    client = app_with(auth_failures_per_minute=0).test_client()
    assert {get(client, wrong_key(n)).status_code for n in range(40)} == {401}

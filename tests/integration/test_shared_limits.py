"""Issue 50: rate limits hold across processes and hosts that share a PostgreSQL database. Two apps on one
database stand for two hosts (or workers): the buckets are the database's, so their sum admits the limit,
not twice it. The embedded SQLite default serves one host and keeps its buckets in each process."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from service import create_app
from service.data.models import RateLimitBucket, utcnow
from service.infra.config import Config, ConfigError
from service.infra.db import get_db
from service.services import keys
from service.workers.idempotency_purger import purge_idle_buckets
from tests.conftest import migrated


@pytest.fixture
def hosts(empty_database_url) -> Iterator[list]:
    """Two apps on one migrated database with shared limits: three requests per key at once, three failed
    authentications per address."""
    url = migrated(empty_database_url)
    if not url.startswith("postgresql"):
        pytest.skip("SQLite, the embedded default for one host, keeps its buckets in each process")
    settings = {
        "database_url": url,
        "testing": True,
        "rate_limit_per_minute": 6,
        "rate_limit_burst": 3,
        "auth_failures_per_minute": 3,
        "rate_limit_store": "database",
    }
    apps = [create_app(Config(**settings)) for _ in range(2)]
    yield apps
    for app in apps:
        get_db(app).engine.dispose()


def a_key(app) -> str:
    with app.app_context(), get_db(app).sessionmaker() as session:
        issued = keys.create_key(session, keys.NewKey(role="admin", organization_slug=None, name="limits"))
        session.commit()
        return issued.key


def test_a_keys_limit_holds_across_hosts(hosts):
    key = a_key(hosts[0])
    headers = {"Authorization": f"Bearer {key}"}
    clients = [app.test_client() for app in hosts]

    answers = [clients[n % 2].get("/v1/organizations", headers=headers).status_code for n in range(4)]

    assert answers == [200, 200, 200, 429]  # each process alone would have admitted all four
    refused = clients[1].get("/v1/organizations", headers=headers)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1


def test_failed_authentications_are_counted_across_hosts(hosts):
    clients = [app.test_client() for app in hosts]
    guess = {"Authorization": "Bearer cpk_000000000000_" + "x" * 43}

    answers = [clients[n % 2].get("/v1/organizations", headers=guess).status_code for n in range(4)]

    assert answers == [401, 401, 401, 429]


def test_idle_buckets_are_purged(hosts):
    key = a_key(hosts[0])
    hosts[0].test_client().get("/v1/organizations", headers={"Authorization": f"Bearer {key}"})
    database = get_db(hosts[0])
    assert purge_idle_buckets(database) == 0
    assert purge_idle_buckets(database, now=utcnow() + timedelta(days=2)) == 1
    with database.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(RateLimitBucket)) == 0


def test_the_database_store_needs_postgresql(tmp_path):
    url = f"sqlite:///{tmp_path / 'one.db'}"
    with pytest.raises(ConfigError, match="RATE_LIMIT_STORE=database needs PostgreSQL"):
        create_app(Config(database_url=url, testing=True, rate_limit_store="database"))
    assert Config.from_env({"RATE_LIMIT_STORE": "Process"}).rate_limit_store == "process"
    with pytest.raises(ConfigError, match="RATE_LIMIT_STORE"):
        Config.from_env({"RATE_LIMIT_STORE": "redis"})

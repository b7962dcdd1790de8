"""Issue 50: no webhook can stall the sender or read other services back. Every URL is parsed at
registration as the sender parses it; deliveries go only to public addresses unless the operator allows
others, checked on the address connected to; a delivery records a status code or a generic reason, never
what the receiver said; one failing or slow receiver delays only itself."""

from __future__ import annotations

import socket
import threading
import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from service import create_app
from service.data.models import Organization, Webhook, WebhookDelivery, utcnow
from service.infra import background, egress
from service.infra.config import Config
from service.infra.db import get_db
from service.services import events
from service.services.webhooks import new_secret
from service.workers import idempotency_purger, webhook_sender
from service.workers.webhook_sender import NO_ANSWER, SENDER_FAILED, Settings, deliver_due
from tests.conftest import LOOPBACK, migrated
from tests.integration.test_webhook_delivery import SETTINGS, Receiver, delivery, verified
from tests.integration.test_webhook_delivery import acme as acme  # noqa: PLC0414 -- the fixture
from tests.integration.test_webhook_delivery import publish as publish  # noqa: PLC0414 -- the fixture
from tests.integration.test_webhook_delivery import receiver as receiver  # noqa: PLC0414 -- the fixture
from tests.problems import assert_problem

INTERNAL = [
    "http://127.0.0.1:5432/",
    "http://[::1]/",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",  # shared (CGNAT)
    "http://[fd12:3456::1]/",  # unique-local
    "http://[fe80::1]/",
    "http://2130706433/",  # 127.0.0.1 as one number
    "http://0x7f000001/",
    "http://127.1/",
    "http://[::ffff:127.0.0.1]/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
    "http://0.0.0.0/",
    "http://224.0.0.1/",
]


def register(client, url: str):
    return client.post("/v1/webhooks", json={"organization": "acme", "url": url})


@pytest.mark.parametrize("url", ["http://[:0]/", "http://[::]/", "http://host:0/", "http://host:70000/"])
def test_a_url_the_sender_could_not_send_to_is_refused_at_registration(client, acme, url):
    problem = assert_problem(register(client, url), 422)
    assert [error["pointer"] for error in problem["errors"]] == ["#/url"]


def test_internal_addresses_in_any_spelling_are_refused_by_default(client, app_with, acme):
    strict = app_with(webhook_allowed_networks="").test_client()
    strict.environ_base["HTTP_AUTHORIZATION"] = client.environ_base["HTTP_AUTHORIZATION"]
    for url in INTERNAL:
        response = register(strict, url)
        assert response.status_code == 422, url
        assert response.get_json()["errors"][0]["pointer"] == "#/url", url
    assert register(strict, "https://hooks.example.com/in").status_code == 201
    allowed = app_with(webhook_allowed_networks="10.0.0.0/8").test_client()
    allowed.environ_base["HTTP_AUTHORIZATION"] = strict.environ_base["HTTP_AUTHORIZATION"]
    assert register(allowed, "http://10.0.0.1/").status_code == 201


def test_a_host_name_resolving_to_an_internal_address_is_refused_at_delivery_and_nothing_is_sent(
    client, app, session, acme, publish, receiver
):
    # "localhost" passes registration (names are checked when resolved); the default policy refuses it.
    hook = register(client, receiver.url.replace("127.0.0.1", "localhost"))
    assert hook.status_code == 201
    publish()

    assert deliver_due(get_db(app), now=utcnow(), settings=Settings(concurrency=1)) == 1

    refused = delivery(session)
    assert (refused.status, refused.last_status_code) == ("pending", None)
    assert refused.last_error.startswith("localhost resolves to 127.0.0.1, not a public address")
    assert receiver.received == []


def test_the_connection_goes_to_the_address_checked_not_to_a_second_answer(monkeypatch):
    """DNS rebinding: the name is resolved once; the connection is made to the address that was checked."""
    lookups, connections = [], []

    def resolve(host, port, **_):
        lookups.append(host)
        public = "93.184.215.14" if len(lookups) == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (public, port))]

    def connect(address, timeout=None):
        connections.append(address)
        raise ConnectionRefusedError

    monkeypatch.setattr(egress.socket, "getaddrinfo", resolve)
    monkeypatch.setattr(egress.socket, "create_connection", connect)
    with pytest.raises(ConnectionRefusedError):
        egress.post(egress.Policy(), "http://rebind.example/x", b"{}", {}, 1)
    assert (lookups, connections) == (["rebind.example"], [("93.184.215.14", 80)])


def test_a_refused_port_a_banner_and_silence_read_the_same(client, app, session, acme, publish):
    """What is recorded cannot tell a port scanner which ports are open or what listens on them."""
    banner = socket.socket()
    banner.bind(("127.0.0.1", 0))
    banner.listen()

    def greet():
        connection, _ = banner.accept()
        connection.sendall(b"220 mail.internal ESMTP ready\r\n")
        connection.close()

    threading.Thread(target=greet, daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    register(client, f"http://127.0.0.1:{banner.getsockname()[1]}/")
    register(client, f"http://127.0.0.1:{closed_port}/")
    publish()

    assert deliver_due(get_db(app), now=utcnow(), settings=SETTINGS) == 2
    banner.close()

    session.expire_all()
    errors = session.scalars(select(WebhookDelivery.last_error)).all()
    assert errors == [NO_ANSWER, NO_ANSWER]


def test_a_delivery_that_breaks_the_sender_is_its_own_failure_and_the_others_go(
    client, app, session, acme, publish, receiver, monkeypatch
):
    broken = register(client, "http://broken.example/").get_json()
    register(client, f"{receiver.url}/hooks")
    real_post = egress.post

    def post(policy, url, *args):
        if "broken.example" in url:
            raise RuntimeError("a bug no check foresaw")
        return real_post(policy, url, *args)

    monkeypatch.setattr(egress, "post", post)
    publish()

    assert deliver_due(get_db(app), now=utcnow(), settings=SETTINGS) == 2

    session.expire_all()
    outcomes = {
        str(hook): (status, error)
        for hook, status, error in session.execute(
            select(WebhookDelivery.webhook_id, WebhookDelivery.status, WebhookDelivery.last_error)
        )
    }
    assert outcomes.pop(broken["id"]) == ("pending", SENDER_FAILED)  # retried on its schedule
    assert list(outcomes.values()) == [("delivered", None)]
    assert len(receiver.received) == 1


class SlowReceiver(Receiver):
    """A receiver that holds every POST until released (or 10 s)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        handler = self.server.RequestHandlerClass
        release = self.release

        class Slow(handler):
            def do_POST(self) -> None:
                release.wait(10)
                super().do_POST()

        self.server.RequestHandlerClass = Slow


def test_a_slow_receiver_delays_only_its_own_deliveries(empty_database_url, receiver):
    """On a database of its own, with the sender's threads (four slots): acme's four deliveries to a slow
    receiver take two (at most two to one receiver); acme's delivery to a fast receiver and globex's go
    meanwhile. Before, one sender posted one delivery at a time, each waiting out the slow one."""
    slow = SlowReceiver()
    slow.thread.start()
    app = create_app(Config(database_url=migrated(empty_database_url), testing=True))
    settings = Settings(timeout_seconds=10, egress=egress.Policy.allowing(LOOPBACK.split(",")), concurrency=4)
    database = get_db(app)
    try:
        with app.app_context(), database.sessionmaker() as session:
            acme, globex = Organization(slug="acme", name="Acme"), Organization(slug="globex", name="Globex")
            session.add_all([acme, globex])
            session.flush()
            hooks = [(acme, f"{slow.url}/{n}") for n in range(4)] + [
                (acme, receiver.url),
                (globex, receiver.url),
            ]
            for owner, url in hooks:
                session.add(Webhook(organization=owner, url=url, secret=new_secret(), created_by="test"))
            session.commit()
            for owner in (acme, globex):
                events.publish(
                    session,
                    organization_id=owner.id,
                    type="plan.started",
                    subject_type="plan",
                    subject_id="p",
                    data={},
                )
                session.commit()

        sending = threading.Thread(target=deliver_due, args=(database,), kwargs={"settings": settings})
        sending.start()
        deadline = time.monotonic() + 5
        while len(receiver.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        delivered_while_slow_held = len(receiver.received)
        slow.release.set()
        sending.join(20)

        assert delivered_while_slow_held == 2
        assert len(slow.received) == 4
    finally:
        slow.release.set()
        slow.server.shutdown()
        slow.server.server_close()
        database.engine.dispose()


def test_senders_start_when_a_worker_boots(empty_database_url, monkeypatch):
    """gunicorn's post_worker_init starts each app's background threads: a replica with no traffic still
    sends what was pending when it restarted (before, the first request started them)."""
    started = []
    monkeypatch.setattr(background.Periodic, "start", lambda self: started.append(type(self)))
    app = create_app(Config(database_url=migrated(empty_database_url), fit_jobs_in_process=False))
    try:
        background.start_all(app)
        assert set(started) == {webhook_sender.Sender, idempotency_purger.Purger}
    finally:
        get_db(app).engine.dispose()


def test_a_rotated_secret_signs_beside_the_new_one_until_the_overlap_ends(
    client, app, session, acme, publish, receiver
):
    """Receivers switch keys without refusing a delivery: for the overlap, both the old and the new secret
    verify each delivery (two signatures); after it, only the new one."""
    created = register(client, f"{receiver.url}/hooks").get_json()
    rotated = client.post(f"/v1/webhooks/{created['id']}/rotate-secret").get_json()
    until = datetime.fromisoformat(rotated["previous_secret_until"])
    assert timedelta(hours=23) < until - utcnow() <= timedelta(days=1)
    publish()

    assert deliver_due(get_db(app), now=utcnow(), settings=SETTINGS) == 1
    headers, body = receiver.received[-1]
    assert len(headers["webhook-signature"].split()) == 2
    assert verified(created["secret"], headers, body)
    assert verified(rotated["secret"], headers, body)

    publish()
    assert deliver_due(get_db(app), now=until + timedelta(seconds=1), settings=SETTINGS) == 1
    headers, body = receiver.received[-1]
    assert len(headers["webhook-signature"].split()) == 1
    assert not verified(created["secret"], headers, body)
    assert verified(rotated["secret"], headers, body)

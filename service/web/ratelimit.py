"""Rate limits: requests per API key (RATE_LIMIT_PER_MINUTE, RATE_LIMIT_BURST; off unless set), and failed
authentications per client address (AUTH_FAILURES_PER_MINUTE; on by default).

A token bucket per key: it holds up to `burst` requests and refills at the per-minute rate, so a key may send
a burst at once and then keep to the rate. A request that finds the bucket empty gets 429 with Retry-After
(the seconds until a token is back). The probes, /metrics and the docs carry no key and are never limited.

Failed authentications have a bucket per client address, of AUTH_FAILURES_PER_MINUTE failures refilled at that
rate. An address that has used them up is answered 429 before its key is looked up, so that guessing keys
costs the database nothing; successes take nothing from the bucket, and a key this process admitted lately is
still looked up (and admitted) from an address over its limit, so nobody sharing an address with a guesser is
locked out of a key they use. Only well-formed keys (`cpk_<id>_<secret>`) count: anything else is refused by
its shape, without a lookup, and cannot be a guess at a key.

Where the buckets live (RATE_LIMIT_STORE): on PostgreSQL, by default, in the database every process and host
shares (`SharedTokenBuckets`: one atomic statement per request), so that W workers on H hosts admit the limit,
not W x H times it; on the embedded SQLite default, which serves one host, in each process (`TokenBuckets`:
no round trip). The keys a process admitted lately are its own either way.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

import flask
from sqlalchemy import Engine, text
from werkzeug.exceptions import TooManyRequests

from service.infra import metrics

EXTENSION_KEY = "planner.rate_limit"
FAILURES_EXTENSION_KEY = "planner.auth_failures"
# Bounds on what the failure limit remembers: an attacker cycling through addresses (or keys) makes the
# oldest be forgotten rather than the memory grow. 10 000 addresses (and 1 000 keys) take about 2.5 MB.
MAX_ADDRESSES = 10_000
MAX_KNOWN_KEYS = 1_000

T = TypeVar("T")


class TokenBuckets:
    def __init__(
        self,
        per_minute: int,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int | None = None,
    ):
        self.rate = per_minute / 60  # tokens a second
        self.capacity = float(burst)
        self.clock = clock
        self.max_keys = max_keys
        # key -> (tokens, when counted), the least recently counted first
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take a token for `key`: 0 if there was one, else the seconds until there will be."""
        now = self.clock()
        with self._lock:
            tokens = self._tokens(key, now)
            if tokens >= 1:
                self._count(key, tokens - 1, now)
                return 0.0
            self._count(key, tokens, now)
            return (1 - tokens) / self.rate

    def wait(self, key: str) -> float:
        """The seconds until `key` has a token (0: it has one now), taking none."""
        with self._lock:
            tokens = self._tokens(key, self.clock())
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

    def __len__(self) -> int:
        return len(self._buckets)

    def _tokens(self, key: str, now: float) -> float:
        tokens, counted = self._buckets.get(key, (self.capacity, now))
        return min(self.capacity, tokens + (now - counted) * self.rate)

    def _count(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        if self.max_keys is not None and len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)  # the least recently counted: the likeliest to be full again


class SharedTokenBuckets:
    """Token buckets kept in the database (PostgreSQL): one bucket per key for every process and host that
    shares it, taken and refilled by one atomic statement each, so that W workers on H hosts admit the
    limit, not W x H times it. Idle buckets are full again after `capacity / rate` seconds; rows older than
    an hour are dropped by the purger (service/workers/idempotency_purger.py)."""

    def __init__(self, engine: Engine, scope: str, per_minute: int, burst: int):
        self.engine = engine
        self.scope = scope  # which limit: "key" or "auth_failures"
        self.rate = per_minute / 60
        self.capacity = float(burst)

    def take(self, key: str) -> float:
        """Take a token for `key`: 0 if there was one, else the seconds until there will be."""
        params = {"scope": self.scope, "key": key, "capacity": self.capacity, "rate": self.rate}
        with self.engine.connect() as connection:
            taken = connection.execute(_TAKE, params).first()
            tokens = None if taken is not None else connection.execute(_TOKENS, params).scalar()
            connection.commit()
        if taken is not None or tokens is None:
            return 0.0
        return max(0.0, (1 - float(tokens)) / self.rate)

    def wait(self, key: str) -> float:
        """The seconds until `key` has a token (0: it has one now), taking none."""
        params = {"scope": self.scope, "key": key, "capacity": self.capacity, "rate": self.rate}
        with self.engine.connect() as connection:
            tokens = connection.execute(_TOKENS, params).scalar()
        return 0.0 if tokens is None or tokens >= 1 else (1 - float(tokens)) / self.rate


# What a bucket holds now: what it held, refilled at the rate since it was counted, up to its capacity.
_REFILLED = "LEAST(:capacity, b.tokens + EXTRACT(EPOCH FROM clock_timestamp() - b.counted_at) * :rate)"
_TAKE = text(
    "INSERT INTO rate_limit_buckets AS b (scope, key, tokens, counted_at) "
    "VALUES (:scope, :key, :capacity - 1, clock_timestamp()) "
    f"ON CONFLICT (scope, key) DO UPDATE SET tokens = {_REFILLED} - 1, counted_at = clock_timestamp() "
    f"WHERE {_REFILLED} >= 1 RETURNING b.tokens"
)
_TOKENS = text(f"SELECT {_REFILLED} FROM rate_limit_buckets AS b WHERE b.scope = :scope AND b.key = :key")


Buckets = TokenBuckets | SharedTokenBuckets


class FailedAuthentications:
    """Failed authentications by client address, and the keys admitted lately (kept as digests only)."""

    def __init__(
        self,
        per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = MAX_ADDRESSES,
        max_known_keys: int = MAX_KNOWN_KEYS,
        shared: Engine | None = None,
    ):
        self._failures: Buckets = (
            TokenBuckets(per_minute, per_minute, clock, max_keys=max_addresses)
            if shared is None
            else SharedTokenBuckets(shared, "auth_failures", per_minute, per_minute)
        )
        self._known: OrderedDict[str, None] = OrderedDict()  # the most recently admitted last
        self._max_known = max_known_keys
        self._lock = threading.Lock()

    def wait(self, address: str, key: str) -> float:
        """0 when `key`, sent from `address`, may be looked up; else the seconds until the address may try
        again."""
        with self._lock:
            if _digest(key) in self._known:
                return 0.0
        return self._failures.wait(address)

    def failed(self, address: str, key: str) -> None:
        with self._lock:
            self._known.pop(_digest(key), None)
        self._failures.take(address)

    def admitted(self, key: str) -> None:
        digest = _digest(key)
        with self._lock:
            self._known[digest] = None
            self._known.move_to_end(digest)
            if len(self._known) > self._max_known:
                self._known.popitem(last=False)

    def addresses(self) -> int:
        """How many addresses this process remembers (its own store's)."""
        return len(self._failures) if isinstance(self._failures, TokenBuckets) else 0

    def known_keys(self) -> int:
        return len(self._known)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def client_address() -> str:
    """The address whose failures a request counts against: the connection's peer, or with TRUSTED_PROXY_HOPS
    the address the proxies forwarded (create_app reads X-Forwarded-For then). An IPv6 address counts as its
    /64, the block one subscriber usually gets and may move around in at will."""
    address = flask.request.remote_addr or ""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:  # not an IP address (a Unix socket's peer): the string itself
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def limit_failures(key: str, look_up: Callable[[], T | None]) -> T | None:
    """`look_up()` the well-formed `key` (None: not valid), unless the client's address has failed too often
    lately: then 429, without the lookup. A failure counts against the address, a success never does."""
    failures: FailedAuthentications | None = flask.current_app.extensions.get(FAILURES_EXTENSION_KEY)
    if failures is None:
        return look_up()
    address = client_address()
    wait = failures.wait(address, key)
    if wait:
        detail = "Too many failed authentications from this address; retry later."
        raise _refused("auth_failures", detail, wait)
    found = look_up()
    if found is None:
        failures.failed(address, key)
    else:
        failures.admitted(key)
    return found


def _limit() -> None:
    principal = flask.g.get("principal")
    if principal is None:  # an open path: no key to count against
        return
    wait = flask.current_app.extensions[EXTENSION_KEY].take(principal.key_id)
    if wait:
        detail = "This API key sent more requests than its rate limit allows; retry later."
        raise _refused("key", detail, wait)


def _refused(limit: str, detail: str, wait: float) -> TooManyRequests:
    metrics.RATE_LIMITED.labels(limit=limit).inc()
    return TooManyRequests(detail, retry_after=max(1, math.ceil(wait)))


def init_app(
    app: flask.Flask, per_minute: int, burst: int, failures_per_minute: int, shared: Engine | None = None
) -> None:
    """Limit each key to `per_minute` requests (after authentication), and each client address to
    `failures_per_minute` failed authentications; either is off when 0. With `shared`, the buckets are that
    database's, the same for every process and host on it."""
    if failures_per_minute > 0:
        app.extensions[FAILURES_EXTENSION_KEY] = FailedAuthentications(failures_per_minute, shared=shared)
    if per_minute > 0:
        burst = burst or max(1, math.ceil(per_minute / 10))
        app.extensions[EXTENSION_KEY] = (
            TokenBuckets(per_minute, burst)
            if shared is None
            else SharedTokenBuckets(shared, "key", per_minute, burst)
        )
        app.before_request(_limit)

"""Per-API-key rate limiting (RATE_LIMIT_PER_MINUTE, RATE_LIMIT_BURST; off unless set).

A token bucket per key: it holds up to `burst` requests and refills at the per-minute rate, so a key may send
a burst at once and then keep to the rate. A request that finds the bucket empty gets 429 with Retry-After
(the seconds until a token is back). The probes, /metrics and the docs carry no key and are never limited.

Each server process keeps its own buckets (no shared store, so no extra round trip per request): a key whose
requests are spread over W worker processes on H hosts can get up to W x H times the rate. It is a guard
against runaway clients, not a quota; put an exact limit, if one is needed, in the load balancer.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import flask
from werkzeug.exceptions import TooManyRequests

from service import metrics

EXTENSION_KEY = "planner.rate_limit"


class TokenBuckets:
    def __init__(self, per_minute: int, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate = per_minute / 60  # tokens a second
        self.capacity = float(burst)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when counted)
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take a token for `key`: 0 if there was one, else the seconds until there will be."""
        now = self.clock()
        with self._lock:
            tokens, counted = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - counted) * self.rate)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate


def _limit() -> None:
    principal = flask.g.get("principal")
    if principal is None:  # an open path: no key to count against
        return
    wait = flask.current_app.extensions[EXTENSION_KEY].take(principal.key_id)
    if wait:
        metrics.RATE_LIMITED.inc()
        raise TooManyRequests(
            "This API key sent more requests than its rate limit allows; retry later.",
            retry_after=max(1, math.ceil(wait)),
        )


def init_app(app: flask.Flask, per_minute: int, burst: int) -> None:
    """Limit each key to `per_minute` requests (after authentication), unless it is 0."""
    if per_minute <= 0:
        return
    app.extensions[EXTENSION_KEY] = TokenBuckets(per_minute, burst or max(1, math.ceil(per_minute / 10)))
    app.before_request(_limit)

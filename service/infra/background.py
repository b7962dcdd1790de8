"""Threads an app process runs beside its requests: each is started when the process boots as a gunicorn
worker (its post_worker_init calls `start_all`, after the fork, so that every worker has its own), again by
any request if it is not running, and ends with its process.

`Periodic` is the shape they share: work every `interval` seconds, at once when woken, and after an error
again within `pause_after_error` (the database away, or not yet migrated). The webhook sender, the fit-job
runner and the Idempotency-Key purger are the three. Each claims its work in the database (a conditional
UPDATE, or rows locked and skipped), so that many processes on many hosts do it once, and each looks again
every interval, so that work leased by a process that died is taken over when its lease runs out.
"""

from __future__ import annotations

import logging
import threading

import flask
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)

WEBHOOK_SENDER = "webhook_sender"  # the app's extension that holds its process's webhook sender
THREADS = "planner.background"  # the app's extension that lists the keys of its threads


class Periodic:
    """A process's thread that calls `work` every `interval` seconds, the first time as it starts."""

    name = "periodic"  # its thread's name, and how the log names it

    def __init__(self, interval: float, pause_after_error: float):
        self.interval = interval
        self.pause_after_error = pause_after_error
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def work(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Start the thread unless it runs (it ends with its process)."""
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stopped = False
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()

    def wake(self) -> None:
        """Work now rather than at the end of the interval (and start the thread if need be)."""
        self._wake.set()
        self.start()

    def stop(self) -> None:
        """End the thread after the work under way (for tests: its process normally ends it)."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stopped:
            self._wake.clear()
            pause = self.interval
            try:
                self.work()
            except SQLAlchemyError as error:  # the database is away, or not migrated yet: try again later
                log.warning(f"{self.name}: no database", extra={"error_type": type(error).__name__})
                pause = self.pause_after_error
            except Exception:
                log.exception(self.name)
                pause = self.pause_after_error
            self._wake.wait(pause)


def started_by_requests(app: flask.Flask, key: str, thread: Periodic | None) -> None:
    """Keep `thread` as the app's extension `key` (None: no thread, as in tests), started by `start_all` and
    by each request if it does not run (at no cost once it does)."""
    register(app, key, thread)

    def start() -> None:
        running = flask.current_app.extensions.get(key)
        if running is not None:
            running.start()

    app.before_request(start)


def register(app: flask.Flask, key: str, thread: object | None) -> None:
    """Keep `thread` (with a `start` method) as the app's extension `key`, for `start_all`."""
    app.extensions[key] = thread
    app.extensions.setdefault(THREADS, []).append(key)


def start_all(app: flask.Flask) -> None:
    """Start every thread the app has: when a worker process boots, so that work left pending by a
    restart (webhook deliveries, fit jobs, expired keys) is taken up without waiting for a request."""
    for key in app.extensions.get(THREADS, []):
        thread = app.extensions.get(key)
        if thread is not None:
            thread.start()


def wake_after_response(key: str) -> None:
    """Have the app's thread `key`, if any, work once this request's response has been sent: after its
    transaction has committed what the thread is to work on."""
    thread = flask.current_app.extensions.get(key)
    if thread is not None:

        @flask.after_this_request
        def _wake(response: flask.Response) -> flask.Response:
            thread.wake()
            return response


def wake(key: str) -> None:
    """Have the app's thread `key`, if any, work now (outside an app context, or in tests: nothing)."""
    if flask.has_app_context():
        thread = flask.current_app.extensions.get(key)
        if thread is not None:
            thread.wake()

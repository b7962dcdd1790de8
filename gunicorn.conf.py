"""gunicorn settings for `make run`, the Dockerfile and the end-to-end tests (one file, one behaviour)."""

import os
import shutil
import tempfile
from pathlib import Path

# First, before anything imports prometheus_client (the service does): metrics from every worker
# (service/infra/metrics.py). prometheus_client picks its storage when first imported, in this master process;
# the workers forked from it must keep their values as files under PROMETHEUS_MULTIPROC_DIR, holding nothing
# from an earlier run. Set it to choose the directory (it is emptied); otherwise a fresh one is made, in
# memory where possible.
worker_tmp_dir = "/dev/shm" if Path("/dev/shm").is_dir() else None
METRICS_PREFIX = "planner-metrics-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove_stale_metrics_dirs(parent: Path) -> None:
    """A master killed with SIGKILL never runs on_exit: the directory it made (named by its pid) stays in
    memory. Those of masters no longer alive are removed as a new one starts."""
    for path in parent.glob(f"{METRICS_PREFIX}*"):
        pid = path.name.removeprefix(METRICS_PREFIX).split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


_metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _metrics_dir:
    shutil.rmtree(_metrics_dir, ignore_errors=True)
    os.makedirs(_metrics_dir)
else:
    _remove_stale_metrics_dirs(Path(worker_tmp_dir or tempfile.gettempdir()))
    _metrics_dir = tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-", dir=worker_tmp_dir)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir

import json  # noqa: E402

from gunicorn import glogging, util  # noqa: E402
from gunicorn.http import wsgi  # noqa: E402
from prometheus_client import multiprocess  # noqa: E402

from service.infra import http_status  # noqa: E402
from service.infra.config import Config  # noqa: E402
from service.infra.logs import GUNICORN_LOGCONFIG  # noqa: E402
from service.web.problems import PROBLEM_CONTENT_TYPE, problem_document  # noqa: E402

_config = Config.from_env()

wsgi_app = "service:create_app()"
bind = f"{_config.host}:{_config.port}"
worker_class = "gthread"
workers = _config.web_concurrency
threads = _config.threads
timeout = 60
graceful_timeout = 30  # SIGTERM: stop accepting, let in-flight requests finish for up to this long
keepalive = 5
# Recycle workers now and then (a guard against slow leaks), staggered so they never all restart at once.
# Rarely: under load a restarting worker leaves a core idle, and at 2000 requests PostgreSQL plan creation
# measured 101-123 req/s against 161-217 without recycling (bench/RESULTS.md).
max_requests = 20000
max_requests_jitter = 2000


class _Logger(glogging.Logger):
    """gunicorn's logger without its access log: the app writes one JSON line per request itself (with its
    request id). With logconfig_dict set, gunicorn counts its access log as on whatever accesslog says, and
    gathered the log's fields for every request only for the silenced logger to drop them: 3% of a plan's
    CPU in a py-spy profile (issue 24)."""

    def access(self, resp, req, environ, request_time):
        pass


logger_class = _Logger
accesslog = None
logconfig_dict = GUNICORN_LOGCONFIG  # gunicorn's own log is JSON too
# gunicorn 27's control socket lives at one path per user (~/.gunicorn): two servers on one host would share
# it, and the container's user has no home. Nothing here uses it.
control_socket_disable = True


def _write_problem(sock, status: int, reason: str, detail: str) -> None:
    """Requests gunicorn refuses before the app sees them (a request line over 4 094 bytes, a header too
    large or holding control characters) are answered in the API's error shape too, not with an HTML page."""
    try:
        title = http_status.title(status)
    except ValueError:  # a status Python does not know
        title = reason
    body = json.dumps(problem_document(status, detail, title=title)).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: {PROBLEM_CONTENT_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, head.encode("latin-1") + body)


util.write_error = _write_problem  # what gunicorn's workers call to refuse a request

_process_headers = wsgi.Response.process_headers


def _closing_when_asked(self, headers):
    """gunicorn drops the app's Connection header (hop-by-hop) and answers keep-alive; an app that asks to
    close (a 413, whose unread body would be taken for the next request) gets the connection closed, and
    the response says so."""
    if any(name.lower() == "connection" and value.strip().lower() == "close" for name, value in headers):
        self.must_close = True
    return _process_headers(self, headers)


wsgi.Response.process_headers = _closing_when_asked


def on_exit(_server):
    shutil.rmtree(_metrics_dir, ignore_errors=True)


def child_exit(_server, worker):
    """A worker that exits (recycled, killed or timed out) leaves its counters behind, its gauges not."""
    multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker):
    """Each worker starts its app's background threads as it boots (service/infra/background.py): pending
    webhook deliveries and fit jobs are taken up by a replica that receives no request."""
    from service.infra import background  # noqa: PLC0415 -- in the worker, after the fork

    background.start_all(worker.wsgi)

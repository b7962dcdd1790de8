"""gunicorn settings for `make run`, the Dockerfile and the end-to-end tests (one file, one behaviour)."""

from pathlib import Path

from service.config import Config
from service.logs import GUNICORN_LOGCONFIG

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
worker_tmp_dir = "/dev/shm" if Path("/dev/shm").is_dir() else None
# The app writes one JSON line per request itself (with its request id); gunicorn's own log is JSON too.
accesslog = None
logconfig_dict = GUNICORN_LOGCONFIG
# gunicorn 27's control socket lives at one path per user (~/.gunicorn): two servers on one host would share
# it, and the container's user has no home. Nothing here uses it.
control_socket_disable = True

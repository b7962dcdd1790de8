"""JSON-lines logging: one object per line, with the request id of the request being served."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from service.infra.request_context import current_request_id

# Attributes every LogRecord has; anything else on a record came from `extra=` and is emitted as a field.
_STANDARD_ATTRIBUTES = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = current_request_id()
        if request_id:
            entry["request_id"] = request_id
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str) -> None:
    """Send the service's logs to stderr as JSON lines (idempotent: replaces our own handler only)."""
    logger = logging.getLogger("service")
    for handler in list(logger.handlers):
        if getattr(handler, "_planner", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._planner = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    # No record here names the file and line that logged it, so none looks them up: the walk up the stack for
    # them was a sixth of a request's logging (the Logging HOWTO's "Optimization" gives this setting).
    logging._srcfile = None


# gunicorn's own messages (start, worker boot, timeouts) in the same JSON-lines shape.
GUNICORN_LOGCONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": JsonFormatter}},
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    },
    "root": {"level": "WARNING", "handlers": ["stderr"]},
    "loggers": {
        "gunicorn.error": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        # The app logs each request itself, with its request id; gunicorn's access log would repeat it
        # (and setting logconfig_dict turns that log on even with accesslog = None: gunicorn.conf.py's logger
        # class does not gather it either).
        "gunicorn.access": {"handlers": [], "level": "CRITICAL", "propagate": False},
    },
}

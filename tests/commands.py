"""How the service is set up and served: the same commands in the Makefile, compose file and e2e tests, and
the scratch databases and ports the e2e tests and benchmarks serve it on."""

import contextlib
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, text

from service.infra.db import normalise_url

ROOT = Path(__file__).resolve().parents[1]
SETUP_COMMAND = ["flask", "--app", "service", "setup"]
SERVE_COMMAND = ["gunicorn", "-c", "gunicorn.conf.py"]


def development_admin_key() -> str:
    """The admin key `make run` serves with unless given one, which the README's examples send."""
    makefile = (ROOT / "Makefile").read_text()
    return re.search(r"^DEVELOPMENT_ADMIN_KEY := (\S+)$", makefile, re.MULTILINE).group(1)


@contextlib.contextmanager
def scratch_postgres_database(server_url: str, prefix: str, template: str | None = None) -> Iterator[str]:
    """A brand-new PostgreSQL database on the server of `server_url`, dropped afterwards: empty, or a copy of
    the database named `template`."""
    admin_url = normalise_url(server_url)
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    copy = f' TEMPLATE "{template}"' if template else ""
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"{copy}'))
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

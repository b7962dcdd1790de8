"""Docker cannot run on the CI machines, so the compose file is checked against what CI does run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url

from service.infra.config import Config
from tests.commands import ROOT, SERVE_COMMAND, SETUP_COMMAND


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def makefile_target(target: str) -> tuple[list[str], list[str]]:
    """The target's prerequisites and recipe lines."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{target}:(.*)\n((?:\t.*\n)*)", text, re.MULTILINE)
    assert match, f"no `{target}` target in the Makefile"
    return match.group(1).split(), [line.strip() for line in match.group(2).splitlines()]


def test_make_run_sets_up_the_database_then_serves_with_the_gunicorn_config():
    prerequisites, recipe = makefile_target("run")
    assert prerequisites == ["migrate"]
    assert recipe[-1] == "$(BIN)/" + " ".join(SERVE_COMMAND)
    prerequisites, setup = makefile_target("migrate")
    assert prerequisites == ["install-server"]
    assert setup == ["$(FLASK) " + " ".join(SETUP_COMMAND[3:])]
    assert re.search(
        r"^FLASK := \$\(BIN\)/flask --app service$", (ROOT / "Makefile").read_text(), re.MULTILINE
    )


def test_make_run_installs_the_server_and_planner_without_the_test_tools():
    """What a newcomer's first command downloads: the server's dependencies and the client's, not pytest,
    the linters or the browser-test driver, which `make test` adds."""
    (server_stamp,) = makefile_target("install-server")[0]
    _, recipe = makefile_target(re.escape(server_stamp))
    installs = [line for line in recipe if line.startswith("$(PIP)")]
    assert installs == ["$(PIP) -e .", "$(PIP) -e ./$(CLIENT)"]
    (dev_stamp,) = makefile_target("install")[0]
    assert makefile_target(re.escape(dev_stamp))[1][0] == "$(PIP) -e '.[dev]'"
    assert "install" in makefile_target("test")[0]


def what_make_run_prints(tmp_path, *arguments: str, **environment: str) -> str:
    """Everything `make run` prints, run for real up to a stand-in gunicorn (install and migrate taken as
    done), with PLANNER_ADMIN_KEY only where the test puts it."""
    stand_in = tmp_path / "gunicorn"
    stand_in.write_text("#!/bin/sh\necho gunicorn started\n")
    stand_in.chmod(0o755)
    inherited = {"PLANNER_ADMIN_KEY", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    env = {name: value for name, value in os.environ.items() if name not in inherited} | environment
    command = [
        "make",
        "--no-print-directory",
        "-o",
        "install-server",
        "-o",
        "migrate",
        "run",
        f"BIN={tmp_path}",
    ]
    done = subprocess.run(
        [*command, *arguments], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert "gunicorn started" in done.stdout
    return done.stdout + done.stderr


DEVELOPMENT_KEY = "cpk_localdev_insecure-development-admin-key"
REAL_KEY = "cpk_prod7_" + "Secret-only-the-operator-knows"


def test_make_run_prints_the_development_key_it_uses_by_default(tmp_path):
    printed = what_make_run_prints(tmp_path)
    assert f"Authorization: Bearer {DEVELOPMENT_KEY}" in printed


@pytest.mark.parametrize("given", ["environment", "make variable"])
def test_make_run_never_prints_a_real_admin_key(tmp_path, given):
    if given == "environment":
        printed = what_make_run_prints(tmp_path, PLANNER_ADMIN_KEY=REAL_KEY)
    else:
        printed = what_make_run_prints(tmp_path, f"PLANNER_ADMIN_KEY={REAL_KEY}")
    assert "Secret-only-the-operator-knows" not in printed
    assert "PLANNER_ADMIN_KEY" in printed  # says where the key comes from
    assert DEVELOPMENT_KEY not in printed


@pytest.mark.parametrize("key", [DEVELOPMENT_KEY, REAL_KEY], ids=["development key", "own key"])
def test_the_command_line_make_run_prints_runs_planner_against_that_server_with_that_key(tmp_path, key):
    """What `make run` prints to call the command line, pasted into another terminal (whose PATH has no
    .venv/bin, and which has the operator's own key, if any, in PLANNER_ADMIN_KEY)."""
    (tmp_path / "activate").write_text(f'PATH="{tmp_path}:$PATH"\n')  # stand-ins for .venv/bin's
    (tmp_path / "planner").write_text('#!/bin/sh\necho "planner $* on $PLANNER_URL as $PLANNER_API_KEY"\n')
    (tmp_path / "planner").chmod(0o755)
    own = {} if key == DEVELOPMENT_KEY else {"PLANNER_ADMIN_KEY": key}
    printed = what_make_run_prints(tmp_path, PORT="8123", **own).splitlines()
    said = next((k for k, line in enumerate(printed) if "command line" in line), None)
    assert said is not None, f"make run says nothing of the command line: {printed}"
    pasted = [line for line in printed[said + 1 :] if line.startswith("  ")]

    terminal = {"PATH": "/usr/bin:/bin", **own}
    done = subprocess.run(
        ["bash", "-c", "\n".join(pasted)], env=terminal, capture_output=True, text=True, check=False
    )

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[-1] == f"planner --help on http://127.0.0.1:8123 as {key}"


REPLICAS = ("app1", "app2")


def test_the_compose_replicas_run_the_same_gunicorn_command_as_make_run(compose):
    for replica in REPLICAS:
        assert compose[replica]["command"] == SERVE_COMMAND
        assert compose[replica]["build"] == "."


def test_the_compose_migration_runs_the_same_setup_as_make_run_before_the_replicas_start(compose):
    assert compose["migrate"]["command"] == SETUP_COMMAND
    for replica in REPLICAS:
        assert compose[replica]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert compose["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"


def test_the_compose_balancer_runs_the_tested_configuration_in_front_of_every_replica(compose):
    """The balancer is the one the several-hosts test runs (deploy/haproxy.cfg), publishing the port the
    replicas listen on, sending to each replica there, and trusted by them as one proxy hop."""
    balancer = compose["balancer"]
    assert balancer["image"].startswith("haproxy:")
    assert "./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in balancer["volumes"]
    port = int(compose[REPLICAS[0]]["environment"]["PORT"])
    assert port == Config().port
    assert f"{port}:{port}" in balancer["ports"]
    assert balancer["environment"]["PLANNER_LISTEN"] == f"0.0.0.0:{port}"
    addresses = {balancer["environment"][f"PLANNER_APP{n}"] for n in range(1, len(REPLICAS) + 1)}
    assert addresses == {f"{replica}:{port}" for replica in REPLICAS}
    configuration = (ROOT / "deploy" / "haproxy.cfg").read_text()
    assert configuration.count('"${PLANNER_APP') == len(REPLICAS)
    for replica in REPLICAS:
        environment = compose[replica]["environment"]
        assert environment["HOST"] == "0.0.0.0"
        assert environment["TRUSTED_PROXY_HOPS"] == "1"
        assert "ports" not in compose[replica]  # reached through the balancer only
        assert f"127.0.0.1:{port}/readyz" in " ".join(compose[replica]["healthcheck"]["test"])
        assert balancer["depends_on"][replica]["condition"] == "service_healthy"


def test_the_compose_database_url_is_a_psycopg_url_to_the_compose_postgres(compose):
    db = compose["db"]["environment"]
    for service in ("migrate", *REPLICAS):
        url = make_url(compose[service]["environment"]["DATABASE_URL"])
        assert url.drivername == "postgresql+psycopg", service
        assert (url.host, url.port) == ("db", 5432)
        assert (url.username, url.password, url.database) == (
            db["POSTGRES_USER"],
            db["POSTGRES_PASSWORD"],
            db["POSTGRES_DB"],
        )


def test_the_compose_setup_and_app_are_given_the_admin_key_from_the_environment(compose):
    for service in ("migrate", *REPLICAS):
        assert compose[service]["environment"]["PLANNER_ADMIN_KEY"].startswith("${PLANNER_ADMIN_KEY:?")


def test_the_dockerfile_copies_what_the_server_needs_and_serves_with_the_same_command():
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    assert 'CMD ["' + '", "'.join(SERVE_COMMAND) + '"]' in lines
    assert "COPY pyproject.toml README.md gunicorn.conf.py ./" in lines
    assert "COPY service ./service" in lines
    assert "COPY migrations ./migrations" in lines


def test_a_starting_server_removes_the_metrics_directories_of_masters_that_were_killed(tmp_path):
    """A SIGKILLed master never runs on_exit: its directory stayed in /dev/shm for good (issue 50)."""
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    stale = shm / "planner-metrics-999999999-killed"  # beyond any pid Linux gives
    stale.mkdir(exist_ok=True)
    (stale / "counter_1.db").write_bytes(b"x")
    environment = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, runpy; runpy.run_path('gunicorn.conf.py'); "
            "print(os.environ['PROMETHEUS_MULTIPROC_DIR'])",
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    made = Path(loaded.stdout.strip().splitlines()[-1])
    try:
        assert not stale.exists()
        assert made.name.startswith("planner-metrics-")
    finally:
        shutil.rmtree(made, ignore_errors=True)
        shutil.rmtree(stale, ignore_errors=True)

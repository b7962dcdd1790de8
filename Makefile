# The two commands a newcomer needs: `make run` and `make test`. Everything else is for maintainers.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
FLASK := $(BIN)/flask --app service
# A development admin key so that a newcomer's first curl works; set your own (and keep it secret) anywhere
# that is not your laptop. `make run` prints the key only when it is this one: whatever it prints ends up in
# the server's log, and a real key must not.
DEVELOPMENT_ADMIN_KEY := cpk_localdev_insecure-development-admin-key
PLANNER_ADMIN_KEY ?= $(DEVELOPMENT_ADMIN_KEY)
export PLANNER_ADMIN_KEY

.PHONY: install install-server run test lint typecheck format openapi migrate docs docs-serve clean

# Two installs into one .venv, each done once (its stamp) and redone when a pyproject changes. `make run` needs
# the server and the client with `planner` (a distribution of its own) only; `make test` and `make docs` add
# their tools on top. Apart and in that order: a server installed before 1.0.0 shipped `planner`, and
# uninstalling it removes the command whichever distribution installed it last.
CLIENT := clients/python
SERVER_STAMP := $(VENV)/.server-installed
DEV_STAMP := $(VENV)/.dev-installed
DOCS_STAMP := $(VENV)/.docs-installed
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

$(SERVER_STAMP): pyproject.toml $(CLIENT)/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Compute Planner needs Python 3.11 or newer: run with PYTHON=python3.11 (or newer)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	$(PIP) -e ./$(CLIENT)
	touch $(SERVER_STAMP)
	@echo "Installed in $(VENV): \`. $(BIN)/activate\` puts its planner and flask commands on your PATH"

$(DEV_STAMP): $(SERVER_STAMP)
	$(PIP) -e '.[dev]'
	touch $(DEV_STAMP)

$(DOCS_STAMP): $(SERVER_STAMP)
	$(PIP) -e '.[docs]'
	touch $(DOCS_STAMP)

## The server and `planner` only (what `make run` needs).
install-server: $(SERVER_STAMP)

## Also the test, lint and benchmark tools (what `make test` needs).
install: $(DEV_STAMP)

## Serve the API on 127.0.0.1:$PORT (default 8000), on $DATABASE_URL (default: SQLite under var/).
run: migrate
	@echo "Serving on http://$${HOST:-127.0.0.1}:$${PORT:-8000}; call it with:"
	@if [ "$$PLANNER_ADMIN_KEY" = "$(DEVELOPMENT_ADMIN_KEY)" ]; then \
		echo "  curl -H 'Authorization: Bearer $(DEVELOPMENT_ADMIN_KEY)' localhost:$${PORT:-8000}/v1/organizations"; \
		echo "or open http://$${HOST:-127.0.0.1}:$${PORT:-8000}/ in a browser and sign in with that key,"; \
		key='$(DEVELOPMENT_ADMIN_KEY)'; \
	else \
		echo '  curl -H "Authorization: Bearer $$PLANNER_ADMIN_KEY"' "localhost:$${PORT:-8000}/v1/organizations"; \
		echo "with the admin key in your PLANNER_ADMIN_KEY (not printed here), or open"; \
		echo "http://$${HOST:-127.0.0.1}:$${PORT:-8000}/ in a browser and sign in with it,"; \
		key='"$$PLANNER_ADMIN_KEY"'; \
	fi; \
	echo "or use the command line, which make run put in $(BIN) (not on your PATH until activated):"; \
	echo "  . $(BIN)/activate"; \
	echo "  export PLANNER_URL=http://$${HOST:-127.0.0.1}:$${PORT:-8000} PLANNER_API_KEY=$$key"; \
	echo "  planner --help"
	$(BIN)/gunicorn -c gunicorn.conf.py

## Apply migrations and load built-in data; both are idempotent.
migrate: install-server
	$(FLASK) setup

## Lint and type-check, then the whole test suite (also on PostgreSQL when TEST_DATABASE_URL is set).
## COVERAGE=1 (what .ci/run sets) also reports the branch coverage of service/ and fails under the floor in
## pyproject.toml.
# On every core: `auto` is a pytest-xdist worker per physical core (psutil), 2 on CI's 2-core machines
# and more on a bigger one, each with databases of its own (tests/conftest.py). TEST_WORKERS=1 (or 0: no
# workers at all) on a machine that others are busy on. worksteal: a worker that runs out of tests takes some
# of another's, so that none finishes long after the others on the suite's few slow tests. Coverage is CI's,
# not every run's: tracing each line on Python 3.11 doubles the time of the tests that run in process.
# `python -m pytest` imports the service from this directory, whichever checkout the virtualenv was made in.
TEST_WORKERS ?= auto
COVERAGE ?=
test: install lint typecheck
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal \
		$(if $(COVERAGE),--cov --cov-report=term-missing:skip-covered)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy, configured in pyproject.toml: strict on all of service but api, schemas and db (mypy's defaults there,
# and a baseline for db).
typecheck: install
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## The documentation site, from docs/ (mkdocs.yml), into site/; a warning fails the build, as in CI.
# NO_MKDOCS_2_WARNING: mkdocs-material prints a banner about MkDocs 2 on every build otherwise.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@echo "Open site/index.html, or run make docs-serve"

## Serve the documentation site on 127.0.0.1:8001, rebuilt as you edit.
docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8001

## Regenerate openapi.yaml from the code (a test fails when they disagree).
openapi: install
	$(FLASK) openapi write --format yaml openapi.yaml

clean:
	rm -rf $(VENV) var site .pytest_cache .ruff_cache .mypy_cache .hypothesis .coverage .coverage.*

# Punctual: `make run` to try it, `make test` to check it. `make help` lists all.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PG_URL ?= postgres://postgres@127.0.0.1:5432/punctual
PIP_QUIET := --quiet --disable-pip-version-check

.PHONY: help install run test test-sqlite test-postgres test-faults lint fmt postgres browser faketime

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_QUIET) --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install $(PIP_QUIET) -e '.[dev]' 2> >(grep -v "is ignored: it is neither" >&2)
	touch $@

install: $(VENV)/.installed ## create the virtualenv and install Punctual with its dev tools

# The demo always uses the embedded SQLite db in var/ (an exported DATABASE_URL
# is ignored), with DEBUG on and private targets allowed so the worker may call
# the built-in receiver on 127.0.0.1. Nothing else runs this way.
DEMO_ENV := env -u DATABASE_URL DEBUG=true PUNCTUAL_ALLOW_PRIVATE_TARGETS=true
PORT_FREE := import socket; s = socket.socket(); \
	s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 8000))

run: install ## migrate the embedded SQLite db, create the demo, start web + dispatcher + worker (Ctrl-C stops)
	@mkdir -p var
	@$(BIN)/python -c '$(PORT_FREE)' 2>/dev/null || { \
	  echo "make run: 127.0.0.1:8000 is in use; stop what listens there (ss -ltnp 'sport = :8000')."; \
	  exit 1; }
	$(DEMO_ENV) $(BIN)/python manage.py migrate --no-input -v 0
	$(DEMO_ENV) $(BIN)/python manage.py demo
	exec $(DEMO_ENV) $(BIN)/honcho start -f Procfile

lint: install ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: install ## ruff format and autofix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

postgres: ## make sure PostgreSQL answers on 127.0.0.1:5432 (starts the local cluster if down)
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start || true
	@for i in $$(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && exit 0; sleep 1; done; \
	  echo "PostgreSQL is not reachable on 127.0.0.1:5432"; \
	  if [ "$$CI" = "true" ]; then exit 1; fi

test: lint browser faketime ## the whole suite: lint, migrations check, pytest on SQLite, then on PostgreSQL
	SECRET_KEY=check $(BIN)/python manage.py makemigrations --check --dry-run
	$(MAKE) --no-print-directory test-sqlite
	$(MAKE) --no-print-directory test-postgres

test-sqlite: install ## unit, integration and browser tests on the embedded SQLite database
	$(BIN)/pytest -q tests/unit tests/integration tests/browser

# The PostgreSQL pass ends with the fault suite's PostgreSQL restart (it sorts
# itself last), so nothing else should use the server while it runs.
test-postgres: install postgres ## integration and process tests on PostgreSQL (mandatory under CI=true)
	@if pg_isready -q -h 127.0.0.1 -p 5432; then \
	  DATABASE_URL=$(PG_URL) $(BIN)/pytest -q tests/integration tests/processes; \
	else echo "SKIPPED: PostgreSQL tests (no server; mandatory when CI=true)"; fi

test-faults: install postgres faketime ## the fault suite alone: real processes, SIGKILL, a PostgreSQL restart
	DATABASE_URL=$(PG_URL) $(BIN)/pytest -q tests/processes/faults

browser: ## install Debian's chromium and chromium-driver for the browser tests, if missing
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)

faketime: ## install Debian's libfaketime for the clock-skew fault scenario, if missing
	@ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || \
	  (apt-get update -qq && apt-get install -y -qq libfaketime)

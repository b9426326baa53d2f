# Punctual: `make run` to try it, `make test` to check it. `make help` lists all.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PG_URL ?= postgres://postgres@127.0.0.1:5432/punctual
PIP_QUIET := --quiet --disable-pip-version-check

.PHONY: help install run demo test test-sqlite test-postgres lint fmt postgres bench

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_QUIET) --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install $(PIP_QUIET) -e '.[dev]' 2> >(grep -v "is ignored: it is neither" >&2)
	touch $@

install: $(VENV)/.installed ## create the virtualenv and install Punctual with its dev tools

run: install ## migrate the embedded SQLite db, create the demo, start web + dispatcher + worker
	@mkdir -p var
	DEBUG=true $(BIN)/python manage.py migrate --no-input -v 0
	DEBUG=true PUNCTUAL_ALLOW_PRIVATE_TARGETS=true $(BIN)/python manage.py demo
	DEBUG=true PUNCTUAL_ALLOW_PRIVATE_TARGETS=true $(BIN)/honcho start -f Procfile

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

test: lint ## the whole suite: lint, migrations check, pytest on SQLite, then on PostgreSQL
	SECRET_KEY=check $(BIN)/python manage.py makemigrations --check --dry-run
	$(MAKE) --no-print-directory test-sqlite
	$(MAKE) --no-print-directory test-postgres

test-sqlite: install ## pytest on the embedded SQLite database
	$(BIN)/pytest -q tests/unit tests/integration

test-postgres: install postgres ## pytest on PostgreSQL (mandatory under CI=true)
	@if pg_isready -q -h 127.0.0.1 -p 5432; then \
	  DATABASE_URL=$(PG_URL) $(BIN)/pytest -q tests/integration tests/processes; \
	else echo "SKIPPED: PostgreSQL tests (no server; mandatory when CI=true)"; fi

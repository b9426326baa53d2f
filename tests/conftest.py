"""Shared fixtures. Every test runs on PostgreSQL: the server named by
``DATABASE_URL``, or a private embedded one that the test session starts
(scheduler_site/settings_test.py) and stops (``pytest_unconfigure`` below)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("PUNCTUAL_ALLOW_PRIVATE_TARGETS", "false")


def pytest_report_header(config):
    data_dir = os.environ.get("PUNCTUAL_TEST_PGDATA")
    bindir = os.environ.get("PUNCTUAL_PG_BINDIR")
    server = f"the PostgreSQL of {bindir}" if bindir else "embedded PostgreSQL"
    if data_dir:
        return f"database: {server} in {data_dir} (started for this session)"
    return "database: DATABASE_URL"


# The fixtures through which a test reaches the session's database.
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}
    | {"django_db_setup", "live_server"}
)


def uses_the_database(item) -> bool:
    """Whether a test reaches a PostgreSQL server: the session's database
    (the ``django_db`` mark, or a fixture that opens it), or a server of its
    own (the ``database_server`` mark)."""
    if item.get_closest_marker("django_db") or item.get_closest_marker("database_server"):
        return True
    return bool(DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config, items):
    """``PUNCTUAL_TEST_DATABASE_ONLY=true`` (make test-pg15-tier) runs only the
    tests that reach a server: the others (URL and address checks, the
    OpenAPI export, logging, sign-in limits without a database...) never see
    which server the session runs, so a second server would only repeat them."""
    if os.environ.get("PUNCTUAL_TEST_DATABASE_ONLY") != "true":
        return
    kept = [item for item in items if uses_the_database(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


def pytest_unconfigure(config):
    if os.environ.get("PUNCTUAL_TEST_PG_OWNER") != str(os.getpid()):
        return  # an xdist worker, or a server this session did not start
    from scheduler_site import localdb

    data_dir = Path(os.environ["PUNCTUAL_TEST_PGDATA"])
    localdb.stop(data_dir, mode="immediate")
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user("alice", password="pw-alice-123", is_staff=True)


@pytest.fixture
def other_owner(django_user_model):
    return django_user_model.objects.create_user("bob", password="pw-bob-123", is_staff=True)


@pytest.fixture
def receiver_url(tmp_path):
    """The loopback receiver (ops/loopback_receiver.py) in its own process:
    ``receiver_url("status/500")`` is a URL that answers 500."""
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ops.loopback_receiver", "--port-file", str(port_file)],
        cwd=Path(__file__).resolve().parents[1],
    )
    deadline = time.monotonic() + 30
    while not port_file.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "receiver did not start"
        time.sleep(0.05)
    yield lambda path: f"http://127.0.0.1:{port_file.read_text()}/{path}"
    proc.terminate()
    proc.wait(timeout=10)

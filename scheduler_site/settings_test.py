"""Settings for pytest: the real settings, with a fixed test SECRET_KEY and the
test session's own database.

Without ``DATABASE_URL``, the first process of a test session (the only one, or
xdist's controller) starts a private embedded PostgreSQL in a temporary
directory, with durability off, and exports its ``DATABASE_URL``; xdist workers
and the processes that tests start inherit it. ``tests/conftest.py`` stops and
removes that server when the session ends. pytest-django creates one test
database per xdist worker on it.

Processes that tests start (manage.py dispatch/work, gunicorn) use the real
settings module and get their environment from the test."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("SECRET_KEY", "punctual-test-key")
os.environ.setdefault("PUNCTUAL_DEMO", "false")

if not os.environ.get("DATABASE_URL"):
    from scheduler_site import localdb

    _data_dir = Path(tempfile.mkdtemp(prefix="punctual-test-pg-"))
    os.environ["DATABASE_URL"] = localdb.start(_data_dir, settings=localdb.TEST_SETTINGS)
    os.environ["PUNCTUAL_TEST_PGDATA"] = str(_data_dir)
    os.environ["PUNCTUAL_TEST_PG_OWNER"] = str(os.getpid())

from scheduler_site import settings as _real
from scheduler_site.settings import *  # noqa: F403

# The demo app's tests need its table and pages, but not demo mode itself (its
# banner, loopback-only targets): the tests that want it turn PUNCTUAL_DEMO on.
if "ops.demo" not in _real.INSTALLED_APPS:
    INSTALLED_APPS = [*_real.INSTALLED_APPS, "ops.demo"]

# Hashing test users' passwords with PBKDF2 costs most of a test's set-up time.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

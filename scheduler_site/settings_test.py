"""Settings for pytest: the real settings, with a fixed test SECRET_KEY.

Processes that tests start (manage.py dispatch/work, gunicorn) use the real
settings module and get their environment from the test."""

import os

os.environ.setdefault("SECRET_KEY", "punctual-test-key")
# The demo app's tests need its table; processes the tests start inherit this.
os.environ.setdefault("PUNCTUAL_DEMO", "true")

from scheduler_site.settings import *  # noqa: E402,F403

# Hashing test users' passwords with PBKDF2 costs most of a test's set-up time.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # noqa: F405

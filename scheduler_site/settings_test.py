"""Settings for pytest: the real settings, with a fixed test SECRET_KEY.

Processes that tests start (manage.py dispatch/work, gunicorn) use the real
settings module and get their environment from the test."""

import os

os.environ.setdefault("SECRET_KEY", "punctual-test-key")

from scheduler_site.settings import *  # noqa: E402,F403

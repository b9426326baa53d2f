"""Settings for mypy's django-stubs plugin: the real settings with the demo app
installed, so the type checker knows its model as it knows every other one."""

import os

os.environ.setdefault("PUNCTUAL_DEMO", "true")

from scheduler_site.settings import *  # noqa: F403

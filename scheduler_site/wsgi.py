"""WSGI entry point: `gunicorn scheduler_site.wsgi`."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_site.settings")

application = get_wsgi_application()

# Each gunicorn worker process imports this module once, then serves requests
# until it exits: settle its garbage collector as the workers' loops do
# (measured: about 6 % less of gunicorn's CPU per job in a bulk create).
import logging  # noqa: E402

from core import collector  # noqa: E402

logging.getLogger("punctual.web").info("web process ready", extra=collector.settle())

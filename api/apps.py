from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API under /api/v1/: jobs, runs, the pull-worker protocol, the
    schedule preview and the caller's own token. Its views call the domain
    verbs of jobs/ and runs/; the URLs are in api/urls.py."""

    name = "api"
    verbose_name = "REST API"

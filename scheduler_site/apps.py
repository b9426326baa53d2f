from __future__ import annotations

from django.apps import AppConfig


class SchedulerSiteConfig(AppConfig):
    name = "scheduler_site"
    verbose_name = "Punctual"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)

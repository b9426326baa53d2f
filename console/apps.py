from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The admin's pages for owners and operators: jobs, runs, the audit log,
    owner limits, API tokens. The site itself (its titles, the dashboard URL)
    is wired in scheduler_site/admin_site.py; console/admin.py registers the
    model pages, whose URLs follow their models' apps (/admin/jobs/job/...)."""

    name = "console"
    verbose_name = "Console"

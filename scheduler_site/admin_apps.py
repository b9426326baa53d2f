"""The admin app, wired to Punctual's own site (scheduler_site/admin_site.py).

Listed in INSTALLED_APPS instead of ``django.contrib.admin``, so that
``admin.site`` (and every ``@admin.register``) is the Punctual site, with its
dashboard URL, without a second site to keep in step.
"""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class PunctualAdminConfig(AdminConfig):
    default_site = "scheduler_site.admin_site.PunctualAdminSite"

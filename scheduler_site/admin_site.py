"""The Punctual admin site: Punctual's titles, and the fleet dashboard URL.

What every model admin shares (owner scoping, big-table lists) is in
core/admin_base.py; this module is wiring, so it may reach the top (ops).
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from core.admin_base import refusing, view_on_site


class PunctualAdminSite(admin.AdminSite):
    site_header = "Punctual"
    site_title = "Punctual"
    index_title = "Jobs, runs and the fleet"
    site_url = None  # no public site to link to: the admin is the product's screen
    # The lists are wide (a run has ten columns worth reading); three models
    # need no sidebar to navigate between them.
    enable_nav_sidebar = False

    def register(self, model_or_iterable, admin_class=None, **options):
        # Every list refuses a bad query with a 4xx, whoever wrote its admin.
        super().register(model_or_iterable, refusing(admin_class or admin.ModelAdmin), **options)

    def get_urls(self):
        # Before the stock patterns: they end in a catch-all. The "view on
        # site" shortcut replaces Django's, which answers a malformed id 500.
        shortcut = "r/<path:content_type_id>/<path:object_id>/"
        return [
            path("dashboard/", self.admin_view(self.dashboard_view), name="dashboard"),
            path("token/", self.admin_view(self.my_token_view), name="my-token"),
            path(shortcut, self.admin_view(view_on_site), name="view_on_site"),
            *(p for p in super().get_urls() if getattr(p, "name", None) != "view_on_site"),
        ]

    def index(self, request, extra_context=None):
        from ops.dashboard import attention_cards

        extra_context = {**(extra_context or {}), "attention": attention_cards(request.user)}
        return super().index(request, extra_context)

    def dashboard_view(self, request):
        from ops.dashboard import dashboard_view

        return dashboard_view(request, self.each_context(request))

    def my_token_view(self, request):
        from console.my_token import my_token_view

        return my_token_view(request, self.each_context(request))

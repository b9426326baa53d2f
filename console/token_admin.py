"""Every owner's API tokens, for superusers (the "Job owners" group has no
permission on them): see them, set an expiry, delete them. Owners manage
their own on the "My API token" page (console/my_token.py); the key
itself is never stored, so never shown."""

from __future__ import annotations

from django.contrib import admin

from accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "created_at", "expires_at", "last_used_at", "retired_at")
    list_filter = ("retired_because",)
    search_fields = ("user__username", "prefix")
    list_select_related = ("user",)
    fields = (
        "user",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "retired_at",
        "retired_because",
    )
    readonly_fields = tuple(f for f in fields if f != "expires_at")

    def has_add_permission(self, request):
        return False  # a key is made by rotating: on "My API token" or through the API

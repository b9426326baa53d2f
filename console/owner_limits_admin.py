"""The owner limits admin (docs/guides/owners.md "Owner limits"): superusers only.

Owners, and staff who are not superusers, neither see nor change these rows,
whatever permissions their groups hold: an owner's limits are the
operator's to grant.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin

from jobs.limits import OWNER_LIMITS
from jobs.models import OwnerLimits


@admin.register(OwnerLimits)
class OwnerLimitsAdmin(admin.ModelAdmin):
    list_display = ("owner", *OWNER_LIMITS, "note", "updated_at")
    list_select_related = ("owner",)
    search_fields = ("owner__username",)
    fields = ("owner", *OWNER_LIMITS, "note")
    raw_id_fields = ("owner",)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        for name, (setting, _bounds) in OWNER_LIMITS.items():
            field = form.base_fields[name]
            field.help_text = f"{field.help_text} (now {getattr(settings, setting):,})"
        return form

    # Every permission is the one rule: an active superuser.

    def has_module_permission(self, request):
        return _superuser(request)

    def has_view_permission(self, request, obj=None):
        return _superuser(request)

    def has_add_permission(self, request):
        return _superuser(request)

    def has_change_permission(self, request, obj=None):
        return _superuser(request)

    def has_delete_permission(self, request, obj=None):
        return _superuser(request)


def _superuser(request) -> bool:
    return request.user.is_active and request.user.is_superuser

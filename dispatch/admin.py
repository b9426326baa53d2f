"""The fleet, read-only: who is alive, as the processes report it themselves.

Rows are written by the processes' heartbeats (dispatch/fleet.py), never by
hand. Owners see the fleet on the dashboard; this list is for superusers.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.utils.html import format_html

from core.db import db_now
from dispatch import fleet
from dispatch.models import ProcessHeartbeat
from jobs.display import relative


class FleetChangeList(ChangeList):
    def get_results(self, request):
        super().get_results(request)
        now = db_now()  # the database clock, once, for every "seen ... ago"
        for process in self.result_list:
            process.page_now = now


@admin.register(ProcessHeartbeat)
class ProcessHeartbeatAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "host", "pid", "started_at", "seen", "in_flight", "stopping")
    list_filter = ("kind",)
    readonly_fields = (
        "name",
        "kind",
        "host",
        "pid",
        "started_at",
        "last_seen",
        "in_flight",
        "stopping",
    )

    def get_changelist(self, request, **kwargs):
        return FleetChangeList

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="last seen", ordering="last_seen")
    def seen(self, obj: ProcessHeartbeat):
        now = getattr(obj, "page_now", None) or db_now()
        silent = now - obj.last_seen > fleet.ALIVE_WITHIN
        return format_html(
            '<span class="{}" title="{} UTC">{}</span>',
            "punctual-late" if silent else "",
            f"{obj.last_seen:%Y-%m-%d %H:%M:%S}",
            relative(obj.last_seen, now),
        )

"""The audit log's admin: the recorded changes of an owner's jobs, through
every channel (the admin, the API, the system), newest first, read-only.

The job page shows a job's newest events and links here for the rest
(``events_url``); HISTORY on a job's page opens the same list.
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from console.filters import EventActionFilter, JobFilter, job_picker_media
from core.admin_base import BigTableAdmin, OwnerScopedAdmin
from jobs import changes
from jobs.display import event_action
from jobs.models import Job, JobEvent

# The job's own fields: an event's changes of these read "old → new", and
# only these are what the job form saves.
JOB_FIELDS = frozenset(f.name for f in Job._meta.get_fields())


def events_url(job_id) -> str:
    """The audit events list, filtered to one job."""
    return reverse("admin:jobs_jobevent_changelist") + f"?job__id__exact={job_id}"


def changes_text(recorded: dict) -> str:
    """An event's changes as "field: old → new; ...", cut at 300 characters."""
    text = changes.summary(recorded, JOB_FIELDS)
    return text if len(text) <= 300 else text[:299] + "…"


# What changed, in the events list: the first lines, each cut short.
LIST_CHANGE_LINES = 5
LIST_CHANGE_CHARS = 90


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@admin.register(JobEvent)
class JobEventAdmin(OwnerScopedAdmin, BigTableAdmin):
    list_display = ("created_at", "job_link", "action_text", "channel", "actor", "changes_lines")
    list_filter = (JobFilter, EventActionFilter, "channel")
    list_select_related = ("job", "actor")
    sortable_by = ("created_at",)
    fields = ("created_at", "job_link", "action_text", "channel", "actor", "changes_list")
    readonly_fields = fields

    @property
    def media(self):
        return super().media + job_picker_media(self.admin_site)

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(owner=request.user)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def change_view(self, request, object_id, form_url="", extra_context=None):
        event = self.get_object(request, object_id)
        extra_context = {**(extra_context or {}), "title": f"{event_action(event.action)}"}
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description="job")
    def job_link(self, obj: JobEvent):
        if obj.job is None:
            return "—"
        if obj.job.deleted_at is not None:
            return format_html("{} <span class='punctual-quiet'>(deleted)</span>", obj.job)
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:jobs_job_change", args=[obj.job_id]), obj.job
        )

    @admin.display(description="action", ordering="action")
    def action_text(self, obj: JobEvent) -> str:
        return event_action(obj.action)

    @admin.display(description="what changed")
    def changes_lines(self, obj: JobEvent):
        lines = changes.lines(obj.changes, JOB_FIELDS)
        shown = [_short(line, LIST_CHANGE_CHARS) for line in lines[:LIST_CHANGE_LINES]]
        if len(lines) > len(shown):
            shown.append(f"… and {len(lines) - len(shown)} more (open the event)")
        return self._changes_html(shown)

    @admin.display(description="what changed")
    def changes_list(self, obj: JobEvent):
        return self._changes_html(changes.lines(obj.changes, JOB_FIELDS))

    def _changes_html(self, lines: list[str]):
        if not lines:
            return self.get_empty_value_display()
        return format_html(
            '<ul class="punctual-changes">{}</ul>',
            format_html_join("", "<li>{}</li>", ((line,) for line in lines)),
        )

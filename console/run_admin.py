"""The runs admin: what missed, what is late, what is running where, what failed and why.

The runs table is the biggest in Punctual (a million rows is ordinary), so the
list never counts it (core.admin_base.BigTableAdmin), sorts only by
``scheduled_at`` (the ``run_scheduled_at_idx`` index), and reads the database
clock once per page for every countdown. Runs are made by the dispatcher, not
by hand: nobody adds them here, and only superusers may delete them. A retry
(the list's action, the run page's button) is in console/run_actions.py.
"""

from __future__ import annotations

import datetime as dt
import uuid
from functools import partial

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import ChangeList
from django.db.models.functions import Now
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from console import attention, run_actions
from console.display import lag_text, state_badge
from console.filters import JobFilter, WithinFilter, job_picker_media
from core.admin_base import BadListQuery, BigTableAdmin, OwnerScopedAdmin
from core.date_nav import date_nav
from core.db import db_now
from jobs.display import relative, short_duration
from runs.models import LATE_AFTER, Attempt, Run, RunState

# The list's worker and lease columns appear only when it lists running runs.
RUNNING_STATUSES = ("running", "lease_expired")
RUNNING_COLUMNS = ("worker", "lease")


class RunStatusFilter(admin.SimpleListFilter):
    """The questions an owner asks, then the remaining states.

    Every comparison with "now" is made by the database clock (``Now()``).
    """

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [
            ("missed", "Missed"),
            ("late", f"Late (over {LATE_AFTER.seconds} s)"),
            ("waiting", "Waiting for a worker"),
            ("running", "Running"),
            ("lease_expired", "Lease expired"),
            ("retrying", "Retrying"),
            ("failed", "Failed"),
            ("pending", "Pending"),
            ("succeeded", "Succeeded"),
            ("skipped", "Skipped"),
            ("cancelled", "Cancelled"),
        ]

    def queryset(self, request, queryset):
        value = self.value()
        if value == "late":
            return queryset.late()
        if value == "waiting":
            return attention.waiting_for_a_worker(queryset)
        if value == "lease_expired":
            return queryset.filter(state=RunState.RUNNING, lease_until__lt=Now())
        if value in RunState.values:
            return queryset.filter(state=value)
        return queryset


class RunChangeList(ChangeList):
    def get_filters(self, request):
        # A month or a day without its year would be an EXTRACT over every
        # partition; with its year, Django turns it into a bounded range.
        field = self.date_hierarchy
        parts = {f"{field}__month", f"{field}__day"}
        if f"{field}__year" not in self.params and parts.intersection(self.params):
            raise IncorrectLookupParameters(
                f"a month or a day of {field} needs its year ({field}__year)"
            )
        return super().get_filters(request)

    def get_results(self, request):
        super().get_results(request)
        # One read of the database clock for every countdown on the page.
        self.page_now = now = db_now()
        for run in self.result_list:
            run.page_now = now

    def date_links(self) -> dict:
        """The date bar above the list, without a query (core/date_nav.py)."""
        return date_nav(
            self.date_hierarchy,
            self.params,
            self.page_now.date(),
            lambda params: self.get_query_string(params, [f"{self.date_hierarchy}__"]),
        )


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    max_num = 0
    can_delete = False
    fields = (
        "number",
        "worker",
        "started_at",
        "finished_at",
        "outcome",
        "status_code",
        "duration",
        "error",
        "response",
    )
    readonly_fields = fields
    ordering = ("number",)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="duration")
    def duration(self, obj: Attempt) -> str:
        if obj.duration_ms is None:
            return self.get_empty_value_display()
        return short_duration(obj.duration_ms / 1000)


def _unbroken(text: str) -> str:
    """``1 min 20 s`` that a narrow column wraps after its label, not inside."""
    return text.replace(" ", "\u00a0")


def _now(obj: Run) -> dt.datetime:
    now: dt.datetime | None = getattr(obj, "page_now", None)
    if now is None:
        now = db_now()
        setattr(obj, "page_now", now)  # noqa: B010 - not a model attribute, so no obj.page_now
    return now


@admin.register(Run)
class RunAdmin(OwnerScopedAdmin, BigTableAdmin):
    list_display = (
        "scheduled",
        "job_link",
        "state_column",
        "kind",
        "attempt_column",
        "lag",
        "duration",
        "why",
    )
    list_display_links = ("scheduled",)
    list_filter = (RunStatusFilter, WithinFilter, "kind", JobFilter)
    list_select_related = ("job",)
    # The links are drawn without a query (RunChangeList.date_links).
    date_hierarchy = "scheduled_at"
    # A run id, matched exactly (get_search_results): no text search over runs.
    search_fields = ("id",)
    search_help_text = "Find a run by its id (a UUID, exactly as the API and the webhooks give it)."
    # Any other order would sort the whole table; scheduled_at has an index.
    sortable_by = ("scheduled",)
    list_per_page = 100
    actions = [run_actions.retry_runs]
    inlines = [AttemptInline]

    @property
    def media(self):
        return super().media + job_picker_media(self.admin_site)

    def get_list_display(self, request):
        if request.GET.get(RunStatusFilter.parameter_name) in RUNNING_STATUSES:
            return (*self.list_display[:-1], *RUNNING_COLUMNS, self.list_display[-1])
        return self.list_display

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            run_id = uuid.UUID(term)
        except ValueError:
            raise BadListQuery(
                f"“{term}” is not a run id: search takes a whole run id (a UUID)."
            ) from None
        return queryset.filter(pk=run_id), False

    def get_fieldsets(self, request, obj=None):
        """The summary first (the template puts the attempts right under it),
        then the lease while the run is running, then the timestamps,
        folded."""
        summary: list = [
            ("job_link", "state_column"),
            ("scheduled_at", "kind"),
            ("attempt_column", "lag", "duration"),
            "result",
            "last_response",
            "id",
        ]
        if obj is not None and obj.state == RunState.RETRYING:
            summary.insert(3, "next_attempt_at")
        fieldsets: list[tuple[str | None, dict[str, list]]] = [(None, {"fields": summary})]
        if obj is not None and obj.state == RunState.RUNNING:
            lease = ["worker", "lease", "lease_until", "deadline_at", "attempt_started_at"]
            fieldsets.append(("Lease", {"fields": lease, "classes": ["collapse"]}))
        timing = ["created_at", "available_at", "started_at", "finished_at"]
        if obj is not None and obj.state == RunState.RETRYING:
            timing.remove("available_at")
        fieldsets.append(("Timing", {"fields": timing, "classes": ["collapse"]}))
        return fieldsets

    def get_readonly_fields(self, request, obj=None):
        # A run is written by the dispatcher and the workers, never by a
        # form: every field shown is read-only.
        return flatten_fieldsets(self.get_fieldsets(request, obj))

    def get_queryset(self, request):
        # The job's bulky columns are never shown here.
        return (
            Run.objects.for_owner(request.user)
            .select_related("job")
            .defer(
                "job__payload",
                "job__description",
                "job__secret_encrypted",
                "job__previous_secret_encrypted",
            )
        )

    def get_changelist(self, request, **kwargs):
        return RunChangeList

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser

    def change_view(self, request, object_id, form_url="", extra_context=None):
        run = self.get_object(request, object_id)
        extra_context = {
            **(extra_context or {}),
            # Every field is read-only: nothing to save.
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "can_retry": run.state in run_actions.RETRYABLE_STATES and run.job.deleted_at is None,
            # Set when the owner came from "send test delivery": the page
            # reloads itself until the run is over.
            "watch": "watch" in request.GET and not run.is_terminal,
            "title": "Run",
            "subtitle": f"{run.job.name} · {run.scheduled_at:%Y-%m-%d %H:%M:%S} UTC",
        }
        return super().change_view(request, object_id, form_url, extra_context)

    # -- columns

    @admin.display(description="scheduled (UTC)", ordering="scheduled_at")
    def scheduled(self, obj: Run) -> str:
        return f"{obj.scheduled_at:%Y-%m-%d %H:%M:%S}"

    @admin.display(description="job")
    def job_link(self, obj: Run):
        job = obj.job
        name = job.name if len(job.name) <= 32 else job.name[:31] + "…"
        if job.deleted_at is not None:
            return format_html('{} <span class="punctual-quiet">(deleted)</span>', name)
        return format_html(
            '<a href="{}" title="{}">{}</a>',
            reverse("admin:jobs_job_change", args=[job.pk]),
            job.name,
            name,
        )

    @admin.display(description="state")
    def state_column(self, obj: Run):
        return state_badge(obj.state)

    @admin.display(description="attempt")
    def attempt_column(self, obj: Run) -> str:
        return f"{obj.attempt}/{obj.max_attempts}"

    @admin.display(description="lag")
    def lag(self, obj: Run):
        if obj.lag_seconds is not None:
            late = obj.lag_seconds > LATE_AFTER.total_seconds()
            return format_html(
                '<span class="{}">{}</span>',
                "punctual-late" if late else "",
                _unbroken(lag_text(obj.lag_seconds)),
            )
        if obj.state == RunState.PENDING and obj.available_at is not None:
            now = _now(obj)
            if obj.available_at < now:
                waited = (now - obj.available_at).total_seconds()
                return format_html(
                    '<span class="{}">waiting {}</span>',
                    "punctual-late" if waited > LATE_AFTER.total_seconds() else "",
                    _unbroken(short_duration(waited)),
                )
        return self.get_empty_value_display()

    @admin.display(description="duration")
    def duration(self, obj: Run) -> str:
        if obj.started_at is None:
            return self.get_empty_value_display()
        if obj.finished_at is not None:
            return short_duration((obj.finished_at - obj.started_at).total_seconds())
        if obj.state == RunState.RUNNING:
            return "running " + _unbroken(
                short_duration((_now(obj) - obj.started_at).total_seconds())
            )
        return self.get_empty_value_display()

    @admin.display(description="worker")
    def worker(self, obj: Run):
        if obj.state != RunState.RUNNING or not obj.lease_owner:
            return self.get_empty_value_display()
        return format_html('<span title="{}">{}</span>', obj.lease_owner, obj.lease_owner)

    @admin.display(description="next attempt at")
    def next_attempt_at(self, obj: Run) -> str:
        if obj.available_at is None:
            return self.get_empty_value_display()
        return f"{obj.available_at:%Y-%m-%d %H:%M:%S} UTC ({relative(obj.available_at, _now(obj))})"

    @admin.display(description="result")
    def result(self, obj: Run):
        """Why the run is where it is, whole: the status, reason and error."""
        parts = self._why_parts(obj, error_chars=None)
        return ": ".join(parts) if parts else self.get_empty_value_display()

    @admin.display(description="lease")
    def lease(self, obj: Run):
        if obj.state != RunState.RUNNING or obj.lease_until is None:
            return self.get_empty_value_display()
        now = _now(obj)
        if obj.lease_until < now:
            return format_html(
                '<span class="punctual-late" title="another worker may claim it">expired {}</span>',
                _unbroken(relative(obj.lease_until, now)),
            )
        return format_html(
            '<span title="{} UTC">{} left</span>',
            f"{obj.lease_until:%H:%M:%S}",
            _unbroken(short_duration((obj.lease_until - now).total_seconds())),
        )

    @staticmethod
    def _why_parts(obj: Run, error_chars: int | None) -> list[str]:
        parts = []
        if obj.last_status_code:
            parts.append(f"HTTP {obj.last_status_code}")
        if obj.reason:
            parts.append(obj.reason)
        if obj.fires != 1:
            # A parked job's skipped run (runs/models.py Run.fires).
            parts.append(
                "and every later fire while its run is active"
                if obj.fires is None
                else f"{obj.fires} fires, one interval apart"
            )
        if obj.last_error:
            error = obj.last_error
            if error_chars is not None and len(error) > error_chars:
                error = error[: error_chars - 1] + "…"
            parts.append(error)
        return parts

    @admin.display(description="why")
    def why(self, obj: Run):
        parts = self._why_parts(obj, error_chars=100)
        if not parts:
            return self.get_empty_value_display()
        return format_html(
            '<span class="punctual-why" title="{}">{}</span>', obj.last_error, ": ".join(parts)
        )

    def get_urls(self):
        """The run page's Retry button: a view of console/run_actions.py,
        given this admin; before the stock patterns, which end in a catch-all."""
        return [
            path(
                "<path:object_id>/retry/",
                self.admin_site.admin_view(require_POST(partial(run_actions.retry_view, self))),
                name="runs_run_retry",
            ),
            *super().get_urls(),
        ]

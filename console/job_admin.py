"""The jobs admin: the owner's list of jobs, and the job page.

This is the admin's configuration and its hooks (the form, saving, deleting,
the columns and the page's read-only fields). The list's actions and the
job page's buttons (pause, resume, trigger, test delivery, rotate the
secret) are plain functions in console/job_actions.py, which ``actions`` and
``get_urls`` name. The audit log's list is console/event_admin.py.

Everything that makes or changes a job goes through the domain verbs
(create_jobs in jobs/creation.py, the API's too; pause, resume, trigger,
soft_delete in runs/job_verbs.py; rotate_secret, reschedule on the model)
with ``channel="admin"`` and the signed-in user as the actor, so the audit log says
who did what from where. No action updates job rows behind the model's back.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import statistics
import zoneinfo
from functools import partial
from typing import cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db import connection
from django.db.models import Subquery
from django.http import HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_http_methods, require_POST

from alerts import selection
from alerts.models import Alert
from alerts.models import Channel as AlertChannel
from console import job_actions
from console.display import lag_text, outcome_strip, run_url, state_badge
from console.event_admin import JOB_FIELDS, changes_text, events_url
from console.filters import (
    FailingFilter,
    JobStateFilter,
    MissedFiresFilter,
    PausedByFilter,
    TagFilter,
    UnclaimedPullFilter,
)
from console.forms import SCHEDULE_FORM_FIELDS, JobForm
from console.job_status import job_status
from console.new_secrets import VERIFY_SNIPPET, pop_secret, stash_secret
from console.recent import recent_and_last_runs, recent_runs
from core.admin_base import OwnerScopedAdmin
from core.db import db_now
from jobs import changes, lookups, quotas, schedules
from jobs.creation import create_jobs
from jobs.display import (
    describe_schedule,
    event_action,
    missed_text,
    relative,
    short_duration,
)
from jobs.models import Channel, Job, JobState, JobStatus
from runs import job_verbs
from runs.models import Attempt, Run

# Squares in the jobs list's strip, and on a job's page.
LIST_STRIP_RUNS = 20
PAGE_STRIP_RUNS = 60
NEXT_FIRES = 10
EVENTS_ON_PAGE = 20
ALERTS_ON_PAGE = 10
# Attempts whose durations make a job's "typical run time".
TYPICAL_RUNS = 50
# Fires in the form's live preview (console/static/punctual/job_form.js).
PREVIEW_FIRES = 5

SCHEDULE_FIELDS = frozenset(SCHEDULE_FORM_FIELDS)
# Where changeform_view leaves the posted URL's answers for get_form.
URL_ANSWERS = "punctual_url_answers"


def _now(obj: Job) -> dt.datetime:
    """The database clock, read once per job page (several fields need it)."""
    now: dt.datetime | None = getattr(obj, "_admin_now", None)
    if now is None:
        now = db_now()
        setattr(obj, "_admin_now", now)  # noqa: B010 - not a model attribute, so no obj._admin_now
    return now


def _page_runs(obj: Job) -> list[Run]:
    """The job's newest runs, read once per page: the status header's strip
    and the run history below share them."""
    runs: list[Run] | None = getattr(obj, "_admin_runs", None)
    if runs is None:
        runs = recent_runs([obj.pk], PAGE_STRIP_RUNS).get(obj.pk, [])
        setattr(obj, "_admin_runs", runs)  # noqa: B010 - not a model attribute
    return runs


def _local(when: dt.datetime, zone: str) -> dt.datetime:
    return when.astimezone(zoneinfo.ZoneInfo(zone))


# -- the list ---------------------------------------------------------------------


class JobChangeList(ChangeList):
    """Loads the page's recent runs in one query, whatever the page size.

    Each job on the page gets ``recent_runs`` (newest first, console/recent.py),
    ``page_last_run`` (runs/last_run.py, as the API's ``last_run``; in the
    same query) and
    ``page_now`` (the database clock, read once), which the list's columns
    read instead of querying per row.
    """

    def get_results(self, request):
        super().get_results(request)
        jobs = list(self.result_list)  # fills the queryset's cache: no second query
        recent, last = recent_and_last_runs([job.pk for job in jobs], LIST_STRIP_RUNS)
        now = db_now()
        for job in jobs:
            job.recent_runs = recent.get(job.pk, [])
            job.page_last_run = last.get(job.pk)
            job.page_now = now


@admin.register(Job)
class JobAdmin(OwnerScopedAdmin):
    form = JobForm
    list_display = (
        "name",
        "schedule",
        "state_column",
        "next_fire",
        "last_run",
        "recent_outcomes",
        "tags_column",
    )
    list_filter = (
        JobStateFilter,
        "target_kind",
        TagFilter,
        "misfire_policy",
        "overlap_policy",
        FailingFilter,
        PausedByFilter,
        MissedFiresFilter,
        UnclaimedPullFilter,
    )
    list_select_related = ("owner",)
    # The search box reads as the API's ?search= (JobQuerySet.search).
    search_fields = ("name", "url", "description")
    search_help_text = "Words found in the name, the URL or the description."
    list_per_page = 50
    actions = [job_actions.pause_jobs, job_actions.resume_jobs, job_actions.trigger_jobs]
    readonly_fields = (
        "schedule_preview",
        "schedule_text",
        "next_fires",
        "schedule_warnings",
        "secret_status",
        "state_text",
        "next_fire",
        "missed_fires",
        "consecutive_failures",
        "version",
        "created_at",
        "updated_at",
        "run_history",
        "recent_alerts",
        "audit_events",
    )

    # -- scoping

    def get_queryset(self, request):
        return Job.objects.for_owner(request.user).select_related("owner")

    def get_changelist(self, request, **kwargs):
        return JobChangeList

    def get_search_results(self, request, queryset, search_term):
        # One definition of the search for the admin and the API.
        return queryset.search(search_term), False

    def get_object(self, request, object_id, from_field=None):
        job = super().get_object(request, object_id, from_field)
        if request.method == "POST" and connection.in_atomic_block:
            # The admin saves (and deletes) inside a transaction: hold the row
            # as the API does, so the version check and the save see one row.
            job = Job.objects.select_for_update().get(pk=job.pk)
        return job

    def get_list_display(self, request):
        if request.user.is_superuser:
            return (*self.list_display, "owner")
        return self.list_display

    # -- the form

    def get_readonly_fields(self, request, obj=None):
        # A job's owner is fixed once it exists: its runs carry a copy
        # (runs/models.py Run.owner_id) that the claim shares batches by.
        if obj is not None:
            return (*self.readonly_fields, "owner")
        return self.readonly_fields

    def get_fieldsets(self, request, obj=None):
        first = ["name", "description", "tags", "expected_version"]
        if request.user.is_superuser:
            first.append("owner")
        schedule = [
            "cron",
            "interval_seconds",
            "run_at",
            "timezone",
            "start_at",
            "end_at",
            "schedule_preview",
        ]
        target = [
            "target_kind",
            "url",
            "method",
            "body_mode",
            "payload",
            "headers",
            "auth_kind",
            "auth_token",
            "auth_username",
            "auth_password",
        ]
        if obj is not None:
            schedule += ["schedule_text", "next_fires", "schedule_warnings"]
            target += ["secret_status"]
        fieldsets = [
            (None, {"fields": first}),
            ("Schedule", {"fields": schedule}),
            ("Target", {"fields": target}),
            (
                "Delivery and retries",
                {
                    "fields": [
                        "timeout_seconds",
                        "max_attempts",
                        "retry_backoff_seconds",
                        "jitter_seconds",
                    ]
                },
            ),
            (
                "Policies",
                {
                    "fields": [
                        "misfire_policy",
                        "max_catchup",
                        "misfire_grace_seconds",
                        "overlap_policy",
                        "pause_after_failures",
                    ]
                },
            ),
        ]
        if obj is not None:
            fieldsets += [
                (
                    "Status",
                    {
                        "fields": [
                            "state_text",
                            "next_fire",
                            "missed_fires",
                            "consecutive_failures",
                            "version",
                            "created_at",
                            "updated_at",
                        ]
                    },
                ),
                ("Run history", {"fields": ["run_history"]}),
                ("Alerts", {"fields": ["alert_channels", "recent_alerts"]}),
                ("Audit events", {"fields": ["audit_events"]}),
            ]
        else:
            fieldsets.append(("Alerts", {"fields": ["alert_channels"]}))
        return fieldsets

    def get_form(self, request, obj=None, change=False, **kwargs):
        # A subclass of self.form, i.e. of JobForm; the stubs only know ModelForm.
        form = cast("type[JobForm]", super().get_form(request, obj, change, **kwargs))
        # The admin only serves logged-in staff: the user is never anonymous.
        assert request.user.is_authenticated
        # modelform_factory made this class for this request: safe to set on it.
        form.default_owner = request.user
        form.url_answers = getattr(request, URL_ANSWERS, None)
        # The job's owner's channels (a superuser's new job: their own).
        owner_id = obj.owner_id if obj is not None else request.user.pk
        field = cast("forms.ModelMultipleChoiceField", form.base_fields["alert_channels"])
        field.queryset = AlertChannel.objects.filter(owner_id=owner_id)
        field.initial = selection.chosen([obj.pk]).get(obj.pk, []) if obj is not None else []
        return form

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST":
            # Django cleans the form inside its transaction: the posted URL's
            # host is looked up before it opens (jobs/lookups.py), within the
            # lookups' deadline, and the form reads the answer.
            url = request.POST.get("url", "").strip()
            setattr(request, URL_ANSWERS, lookups.look_up_hosts([url], owner=request.user.pk))
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_changeform_initial_data(self, request):
        initial = super().get_changeform_initial_data(request)
        if request.user.is_superuser:
            initial.setdefault("owner", request.user.pk)
        return initial

    def save_model(self, request, obj, form, change):
        if not change:
            if obj.owner_id is None or not request.user.is_superuser:
                obj.owner = request.user
            values = {name: form.cleaned_data.get(name) for name in form.fields}
            # The API's create verb (jobs/creation.py), for one job. The form
            # has refused a job past the owner's live jobs limit already
            # (JobForm._clean_owner_limits, under the owner's lock, which
            # the admin's transaction holds until the job is written), so
            # the verb's own check of it in the insert always finds room.
            [secret] = create_jobs(
                [obj],
                now=_now(obj),
                actor=request.user,
                channel=Channel.ADMIN,
                changes=[
                    changes.initial(
                        {
                            **{k: v for k, v in values.items() if k in JOB_FIELDS},
                            **form.request_values,
                        }
                    )
                ],
                limits=quotas.limits_for(obj.owner),
            )
            stash_secret(request, obj, secret)
        else:
            changed = [name for name in form.changed_data if name in JOB_FIELDS]
            if changed or form.request_values:
                # Only what the form changed (job_verbs.edit): a pause, a
                # failure count or a next fire written by another process
                # meanwhile stays as it is. The secrets' new values come
                # sealed from the form (JobForm._clean_request).
                job_verbs.edit(
                    obj,
                    {
                        **{name: form.cleaned_data.get(name) for name in changed},
                        **form.request_values,
                    },
                    actor=request.user,
                    channel=Channel.ADMIN,
                )
        if "alert_channels" in form.changed_data:
            selection.choose(obj.pk, [c.pk for c in form.cleaned_data["alert_channels"]])
        if not change or SCHEDULE_FIELDS.intersection(form.changed_data):
            for risk in self._risks(obj, _now(obj)):
                self.message_user(request, risk, messages.WARNING)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        # The form's own copy of the job: the fields below it read the same
        # runs and clock, at no second query.
        if obj is not None and change:
            context["job_status"] = job_status(obj, _page_runs(obj), _now(obj), request.user)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def response_add(self, request, obj, post_url_continue=None):
        # The new job's page, not the list: it shows the secret (once) and the
        # next fires.
        if "_addanother" in request.POST or "_popup" in request.POST:
            return super().response_add(request, obj, post_url_continue)
        self.message_user(request, f"The job “{obj}” was created.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:jobs_job_change", args=[obj.pk]))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        obj = self.get_object(request, object_id)
        # Only a page view consumes it: a POST that fails validation re-renders
        # the form, and the secret must not be lost or shown there.
        secret = pop_secret(request, obj) if request.method == "GET" else None
        if secret is not None:
            extra_context["new_secret"] = secret
            extra_context["verify_snippet"] = VERIFY_SNIPPET.format(secret=secret)
        return super().change_view(request, object_id, form_url, extra_context)

    def history_view(self, request, object_id, extra_context=None):
        """HISTORY opens the job's audit events, which record every change
        through every channel (the admin's own log sees only the admin's)."""
        job = self.get_object(request, object_id)
        return HttpResponseRedirect(events_url(job.pk))

    # -- deleting is a soft delete

    def delete_model(self, request, obj):
        job_verbs.soft_delete(obj, actor=request.user, channel=Channel.ADMIN)

    def delete_queryset(self, request, queryset):
        for job in queryset:
            job_verbs.soft_delete(job, actor=request.user, channel=Channel.ADMIN)

    def get_deleted_objects(self, objs, request):
        # The stock confirmation walks every related row (a job's whole run
        # history) and asks for delete permission on runs. A soft delete
        # removes none of them: the job is hidden and its waiting runs are
        # cancelled, so list just the jobs.
        objs = list(objs)
        perms_needed = set()
        if not all(self.has_delete_permission(request, obj) for obj in objs):
            perms_needed.add(self.opts.verbose_name)
        return (
            [format_html("{} (its run history is kept)", obj) for obj in objs],
            {self.opts.verbose_name_plural: len(objs)},
            perms_needed,
            [],
        )

    # -- list columns

    @admin.display(description="schedule")
    def schedule(self, obj: Job) -> str:
        return describe_schedule(
            obj.cron, obj.interval_seconds, obj.timezone, run_at=obj.run_at, end_at=obj.end_at
        )

    @admin.display(description="state", ordering="state")
    def state_column(self, obj: Job):
        if obj.status == JobStatus.FINISHED:
            # Before "Failing": a job with no fire left is not failing, however
            # its last run went (the last run column says).
            return mark_safe(
                '<span class="punctual-badge st-finished" title="no fire left to come">'
                "Finished</span>"
            )
        if obj.state == JobState.PAUSED:
            return format_html(
                '<span class="punctual-badge st-paused" title="{}">{}</span>',
                " · ".join(obj.pause_notes()) or "paused",
                "Paused (auto)" if obj.paused_by == Channel.SYSTEM else "Paused",
            )
        if obj.consecutive_failures:
            return format_html(
                '<span class="punctual-badge st-failed" title="consecutive failed runs">'
                "Failing ×{}</span>",
                obj.consecutive_failures,
            )
        return mark_safe('<span class="punctual-badge st-active">Active</span>')

    @admin.display(description="next fire", ordering="next_fire_at")
    def next_fire(self, obj: Job):
        if obj.next_fire_at is None:
            # Parked (jobs/models.py Job.parked_since): fires again once its
            # run ends.
            return "after its run ends" if obj.parked_since else "—"
        local = _local(obj.next_fire_at, obj.timezone)
        now = getattr(obj, "page_now", None) or _now(obj)
        return format_html(
            '<span title="{}">{}</span> <span class="punctual-quiet">{}</span>',
            f"{obj.next_fire_at:%Y-%m-%d %H:%M:%S} UTC",
            f"{local:%Y-%m-%d %H:%M} {local:%Z}",
            relative(obj.next_fire_at, now),
        )

    @admin.display(description="last run")
    def last_run(self, obj: Job):
        """The newest run that was attempted (runs/last_run.py, the API's
        ``last_run`` too): a skipped, cancelled, missed or still pending run
        says nothing about how the job's deliveries go."""
        run = getattr(obj, "page_last_run", None)
        if run is None:
            return format_html('<span class="punctual-quiet">{}</span>', "none yet")
        return format_html(
            '<a href="{}">{}</a> <span class="punctual-quiet" title="lag">{}</span>',
            run_url(run.pk),
            state_badge(run.state),
            lag_text(run.lag_seconds),
        )

    @admin.display(description="missed, not listed")
    def missed_fires(self, obj: Job):
        """Fires past a recovery's cap of 100 recorded rows: counted only."""
        return missed_text(obj) or "none"

    @admin.display(description="tags")
    def tags_column(self, obj: Job):
        if not obj.tags:
            return ""
        # Each chip lists the jobs with its tag (TagFilter's ?tag=).
        url = reverse("admin:jobs_job_changelist")
        return format_html_join(
            " ",
            '<a class="punctual-tag" href="{}?{}">{}</a>',
            ((url, urlencode({"tag": tag}), tag) for tag in obj.tags),
        )

    @admin.display(description="recent runs")
    def recent_outcomes(self, obj: Job):
        return outcome_strip(getattr(obj, "recent_runs", []))

    # -- read-only fields of the job page

    @admin.display(description="preview")
    def schedule_preview(self, obj: Job):
        """The box the form's script fills as the schedule is typed
        (console/static/punctual/job_form.js), from the API's schedule preview.
        A new job's form previews at once; a job's page waits for an edit,
        since its saved schedule's fires are shown below."""
        adding = obj.pk is None or obj._state.adding
        hint = (
            "Enter a cron, an interval or a run at time to preview the schedule."
            if adding
            else "Edit the schedule to preview it here before saving."
        )
        return format_html(
            '<div id="schedule-preview" class="punctual-preview" aria-live="polite" '
            'data-url="{}" data-count="{}" data-on-load="{}"><p class="punctual-quiet">{}</p>'
            "</div>",
            reverse("schedule-preview"),
            PREVIEW_FIRES,
            "true" if adding else "false",
            hint,
        )

    @admin.display(description="in words")
    def schedule_text(self, obj: Job) -> str:
        return describe_schedule(
            obj.cron, obj.interval_seconds, obj.timezone, run_at=obj.run_at, end_at=obj.end_at
        )

    @admin.display(description="next 10 fires")
    def next_fires(self, obj: Job):
        fires = self._next_fires(obj)
        if not fires:
            if obj.end_at is not None or obj.run_at is not None:
                return "None: this schedule has ended (its end or its one fire is past)."
            return "This schedule has no further fires."
        rows = format_html_join(
            "",
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    mark_safe(' class="punctual-dst"') if near else "",
                    f"{local:%a %Y-%m-%d %H:%M:%S}",
                    f"UTC{local.isoformat()[-6:]} ({local:%Z})",
                    f"{fire:%Y-%m-%d %H:%M:%S} UTC",
                    "⚠ DST change within a day" if near else "",
                )
                for fire, local, near in fires
            ),
        )
        note = ""
        if obj.state == JobState.PAUSED:
            note = mark_safe(
                '<p class="punctual-quiet">Paused: these are the fires it would make '
                "if resumed now.</p>"
            )
        return format_html(
            '{}<table class="punctual-fires"><thead><tr><th>in {}</th><th>offset</th>'
            "<th>UTC</th><th></th></tr></thead><tbody>{}</tbody></table>",
            note,
            obj.timezone,
            rows,
        )

    @admin.display(description="warnings")
    def schedule_warnings(self, obj: Job):
        risks = self._risks(obj, _now(obj))
        if not risks:
            return mark_safe('<span class="punctual-quiet">none</span>')
        return format_html(
            '<ul class="punctual-warnings">{}</ul>',
            format_html_join("", "<li>{}</li>", ((r,) for r in risks)),
        )

    @admin.display(description="secret")
    def secret_status(self, obj: Job):
        text = mark_safe(
            "Hidden. A secret is shown once, when the job is created or the secret is "
            "rotated (the <b>Rotate secret</b> button above)."
        )
        now = _now(obj)
        if obj.previous_secret_until and obj.previous_secret_until > now:
            text = format_html(
                "{} The previous secret also signs deliveries until {} UTC.",
                text,
                f"{obj.previous_secret_until:%Y-%m-%d %H:%M}",
            )
        return text

    @admin.display(description="state")
    def state_text(self, obj: Job):
        badge = self.state_column(obj)
        if obj.state != JobState.PAUSED:
            return badge
        parts = [badge]
        parts += [format_html("“{}”", note) for note in obj.pause_notes()]
        if obj.paused_at:
            parts.append(format_html("since {} UTC", f"{obj.paused_at:%Y-%m-%d %H:%M}"))
        if obj.resume_at:
            parts.append(format_html("resumes at {} UTC", f"{obj.resume_at:%Y-%m-%d %H:%M}"))
        return format_html_join(" ", "{}", ((p,) for p in parts))

    @admin.display(description="recent runs")
    def run_history(self, obj: Job):
        runs = _page_runs(obj)
        all_runs = reverse("admin:runs_run_changelist") + f"?job__id__exact={obj.pk}"
        if not runs:
            return mark_safe('<span class="punctual-quiet">No runs yet.</span>')
        oldest, newest = runs[-1], runs[0]
        return format_html(
            '<div class="punctual-history">{}<div class="punctual-axis"><span>{} UTC</span>'
            "<span>{} UTC</span></div></div>"
            '<p><a href="{}">All runs of this job</a> · the newest {} runs, oldest on the left; '
            "each square links to its run.</p>",
            outcome_strip(runs),
            f"{oldest.scheduled_at:%Y-%m-%d %H:%M:%S}",
            f"{newest.scheduled_at:%Y-%m-%d %H:%M:%S}",
            all_runs,
            len(runs),
        )

    @admin.display(description="recent alerts")
    def recent_alerts(self, obj: Job):
        alerts = list(
            Alert.objects.filter(job=obj)
            .select_related("channel")
            .order_by("-due_at", "-id")[:ALERTS_ON_PAGE]
        )
        if not alerts:
            return mark_safe('<span class="punctual-quiet">No alerts.</span>')
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    f"{a.due_at:%Y-%m-%d %H:%M:%S} UTC",
                    a.get_kind_display(),
                    a.channel.name,
                    a.count,
                    a.state,
                    a.attempts,
                    a.last_error[:200] or "—",
                )
                for a in alerts
            ),
        )
        return format_html(
            '<table class="punctual-events" id="recent-alerts"><thead><tr><th>due</th>'
            "<th>event</th><th>channel</th><th>events</th><th>state</th><th>attempts</th>"
            "<th>last error</th></tr></thead><tbody>{}</tbody></table>"
            '<p><a href="{}?job__id__exact={}">All alerts of this job</a></p>',
            rows,
            reverse("admin:alerts_alert_changelist"),
            obj.pk,
        )

    @admin.display(description="events")
    def audit_events(self, obj: Job):
        events = list(obj.events.select_related("actor")[:EVENTS_ON_PAGE])
        if not events:
            return mark_safe('<span class="punctual-quiet">No events.</span>')
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            (
                (
                    f"{e.created_at:%Y-%m-%d %H:%M:%S} UTC",
                    event_action(e.action),
                    e.get_channel_display(),
                    e.actor or "—",
                    changes_text(e.changes),
                )
                for e in events
            ),
        )
        all_events = events_url(obj.pk)
        return format_html(
            '<table class="punctual-events"><thead><tr><th>when</th><th>action</th>'
            "<th>through</th><th>who</th><th>what changed</th></tr></thead><tbody>{}</tbody>"
            '</table><p><a href="{}">All events of this job</a></p>',
            rows,
            all_events,
        )

    # -- schedule insight

    def _next_fires(self, obj: Job) -> list[tuple[dt.datetime, dt.datetime, bool]]:
        """(fire in UTC, the same in the job's zone, close to a DST change)."""
        cached: list[tuple[dt.datetime, dt.datetime, bool]] | None = getattr(
            obj, "_admin_fires", None
        )
        if cached is None:
            try:
                fires = obj.schedule.next_fires(_now(obj), NEXT_FIRES)
            except schedules.ScheduleError:
                fires = []
            cached = [
                (
                    fire,
                    _local(fire, obj.timezone),
                    schedules.dst_transition_near(fire, obj.timezone),
                )
                for fire in fires
            ]
            setattr(obj, "_admin_fires", cached)  # noqa: B010 - not a model attribute
        return cached

    def _risks(self, obj: Job, now: dt.datetime) -> list[str]:
        """cron_risks, plus "fires come faster than a run takes"."""
        risks: list[str] = []
        if obj.cron:
            # A schedule the validators now refuse has no risks to show: the form says so.
            with contextlib.suppress(schedules.ScheduleError):
                risks = schedules.cron_risks(obj.cron, obj.timezone, now=now)
        period: float | None = obj.interval_seconds
        if obj.cron:
            fires = [fire for fire, _, _ in self._next_fires(obj)]
            gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(fires)]
            period = min(gaps) if gaps else None
        risks += schedules.ending_warnings(run_at=obj.run_at, end_at=obj.end_at, now=now)
        typical = self._typical_duration(obj)
        if period and typical and typical[0] > period:
            seconds, count = typical
            risks.append(
                f"Runs take about {short_duration(seconds)} (the median of the last {count} "
                f"attempts), longer than the {short_duration(period)} between fires: under "
                f"the “{obj.get_overlap_policy_display()}” overlap policy, fires will pile up "
                "or be skipped."
            )
        return risks

    def _typical_duration(self, obj: Job) -> tuple[float, int] | None:
        """The median duration of the job's recent attempts, and how many.

        The job's newest runs come from the (job_id, scheduled_at) index, then
        their attempts by run: never a scan of the job's whole history.
        """
        if obj.pk is None:
            return None
        newest = Run.objects.filter(job=obj).order_by("-scheduled_at").values("pk")
        # duration_ms__isnull=False: no None among them, which the stubs can't see.
        durations = cast(
            "list[int]",
            list(
                Attempt.objects.filter(
                    run__in=Subquery(newest[:TYPICAL_RUNS]), duration_ms__isnull=False
                ).values_list("duration_ms", flat=True)
            ),
        )
        if not durations:
            return None
        return statistics.median(durations) / 1000, len(durations)

    # -- the pages of the buttons (job page) and the list's pause form

    def get_urls(self):
        """Each is a view of console/job_actions.py, given this admin; before
        the stock patterns, which end in a catch-all."""

        def view(name: str, func, methods=("POST",)):
            return path(
                f"<path:object_id>/{name}/",
                self.admin_site.admin_view(
                    require_http_methods(list(methods))(partial(func, self))
                ),
                name=f"jobs_job_{name.replace('-', '_')}",
            )

        return [
            path(
                "pause-selected/",
                self.admin_site.admin_view(
                    require_POST(partial(job_actions.pause_selected_view, self))
                ),
                name="jobs_job_pause_selected",
            ),
            # GET asks first (a confirmation page, a form); POST acts.
            view("rotate-secret", job_actions.rotate_secret_view, ("GET", "POST")),
            view("test-delivery", job_actions.test_delivery_view),
            view("pause", job_actions.pause_view, ("GET", "POST")),
            view("resume", job_actions.resume_view),
            *super().get_urls(),
        ]

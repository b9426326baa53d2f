"""List filters of the jobs, runs and events admins that the dashboard's
cards link to, and the job picker of the runs and events lists.

Each filter applies one question of console/attention.py, so a card's number and
the list behind its link come from the same query.
"""

from __future__ import annotations

import datetime as dt

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.exceptions import ValidationError

from console import attention
from core.admin_base import BadListQuery
from jobs.display import EVENT_ACTIONS
from jobs.models import Job, JobStatus
from jobs.tags import tag_problem
from runs.models import Run


class JobStateFilter(admin.SimpleListFilter):
    """Active, paused or finished, as the job shows (JobQuerySet.shown_as,
    the API's ``?state=`` too): a finished job is active in its row, with
    no fire left, and is listed apart from the active ones."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return JobStatus.choices

    def queryset(self, request, queryset):
        if self.value() in JobStatus.values:
            return queryset.shown_as(self.value())
        return queryset


class FailingFilter(admin.SimpleListFilter):
    title = "health"
    parameter_name = "health"

    def lookups(self, request, model_admin):
        return [("failing", "Failing"), ("healthy", "Not failing")]

    def queryset(self, request, queryset):
        if self.value() == "failing":
            return attention.failing(queryset)
        if self.value() == "healthy":
            return attention.not_failing(queryset)
        return queryset


class PausedByFilter(admin.SimpleListFilter):
    title = "paused by"
    parameter_name = "paused_by"

    def lookups(self, request, model_admin):
        return [("system", "The system")]

    def queryset(self, request, queryset):
        if self.value() == "system":
            return attention.paused_by_system(queryset)
        return queryset


class MissedFiresFilter(admin.SimpleListFilter):
    title = "missed fires"
    parameter_name = "missed"

    def lookups(self, request, model_admin):
        return [("24h", "In the last 24 hours")]

    def queryset(self, request, queryset):
        if self.value() == "24h":
            return attention.missed_recently(queryset)
        return queryset


class UnclaimedPullFilter(admin.SimpleListFilter):
    title = "unclaimed pull runs"
    parameter_name = "unclaimed"

    def lookups(self, request, model_admin):
        seconds = int(attention.unclaimed_pull_limit().total_seconds())
        return [("pull", f"A run waits over {seconds} s for a pull worker")]

    def queryset(self, request, queryset):
        if self.value() == "pull":
            return attention.unclaimed_pull(queryset)
        return queryset


class TagFilter(admin.SimpleListFilter):
    """Jobs that carry a tag (``JobQuerySet.tagged``, as the API's ``?tag=``).

    A box to type the tag in, and the list's tag chips link here: listing
    the tags in use would cost the page a query over all of the owner's
    jobs, every time it is shown.
    """

    title = "tag"
    parameter_name = "tag"
    template = "admin/punctual/tag_filter.html"

    def lookups(self, request, model_admin):
        return []

    def has_output(self):
        return True

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        problem = tag_problem(value)
        if problem:
            raise BadListQuery(f"The tag filter: {problem}")
        return queryset.tagged([value.strip().lower()])

    def choices(self, changelist):
        yield {
            "value": self.value(),
            "selected": self.value() is not None,
            "clear": changelist.get_query_string(remove=[self.parameter_name]),
        }


# ?within= on the runs list: how far back scheduled_at goes.
SPANS = {
    "1h": ("Last hour", dt.timedelta(hours=1)),
    "24h": ("Last 24 hours", attention.ATTENTION_WINDOW),
    "7d": ("Last 7 days", dt.timedelta(days=7)),
}


class WithinFilter(admin.SimpleListFilter):
    title = "scheduled"
    parameter_name = "within"

    def lookups(self, request, model_admin):
        return [(key, label) for key, (label, _span) in SPANS.items()]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if value not in SPANS:
            raise BadListQuery(f"“within” must be one of {', '.join(SPANS)}, not “{value}”.")
        return attention.within(queryset, SPANS[value][1])


class JobPicker(AutocompleteSelect):
    """The admin's autocomplete box, saying what an empty box means."""

    def build_attrs(self, base_attrs, extra_attrs=None):
        attrs = super().build_attrs(base_attrs, extra_attrs)
        attrs["data-placeholder"] = "Any job: type a name"
        return attrs


class JobFilter(admin.SimpleListFilter):
    """One job's rows, picked by name with the admin's autocomplete.

    The choices come from the jobs admin's own search, so an owner is offered
    only their own jobs, and the sidebar never lists every job. The
    parameter is the one the job page's links already use.
    """

    title = "job"
    parameter_name = "job__id__exact"
    template = "admin/punctual/job_filter.html"

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        self.jobs = Job.objects.for_owner(request.user)
        self.admin_site = model_admin.admin_site

    def lookups(self, request, model_admin):
        return []

    def has_output(self):
        return True

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        try:
            return queryset.filter(job_id=Job._meta.pk.to_python(value))
        except ValidationError:
            raise BadListQuery(f"“{value}” is not a job id.") from None

    def choices(self, changelist):
        # The template draws one autocomplete box, and a link to every job.
        yield {
            "widget": self.widget(),
            "selected": self.value() is not None,
            "clear": changelist.get_query_string(remove=[self.parameter_name]),
        }

    def widget(self) -> str:
        """The admin's autocomplete box (select2), fed by the jobs admin's
        search: the same widget a form's job field would get."""
        field = forms.ModelChoiceField(
            queryset=self.jobs,
            required=False,
            widget=JobPicker(
                Run._meta.get_field("job"), self.admin_site, attrs={"id": "job-filter"}
            ),
        )
        return field.widget.render(self.parameter_name, self.value())


def job_picker_media(admin_site) -> forms.Media:
    """The scripts and styles ``JobFilter``'s box needs, for a list's page."""
    return AutocompleteSelect(Run._meta.get_field("job"), admin_site).media


class EventActionFilter(admin.SimpleListFilter):
    title = "action"
    parameter_name = "action"

    def lookups(self, request, model_admin):
        return list(EVENT_ACTIONS.items())

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        return queryset.filter(action=self.value())

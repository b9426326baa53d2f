"""What the runs admin does to runs: retry the selected failed or missed runs
(a list action), or one run (the Retry button on its page).

Plain functions that take the runs admin first, as Django's own
``delete_selected`` action does: ``RunAdmin.actions`` lists the action and
``RunAdmin.get_urls`` wires the button's view. A retry is the run's own verb,
``Run.retry``, with ``channel="admin"`` and the signed-in user as the actor.
A retry over the job's triggers per minute (jobs/quotas.py) is refused with
the limit's own message, the one the API answers.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.urls import reverse

from core.admin_base import OwnerScopedAdmin
from core.errors import LimitExceeded
from jobs.models import Channel
from runs.models import RetryNotAllowed, RunState

RETRYABLE_STATES = (RunState.FAILED, RunState.MISSED)


@admin.action(description="Retry selected failed or missed runs", permissions=["change"])
def retry_runs(model_admin: OwnerScopedAdmin, request, queryset):
    retried = 0
    # Per job, the runs its triggers per minute refused, and the refusal.
    refused: dict[str, tuple[int, LimitExceeded]] = {}
    for run in queryset.filter(state__in=RETRYABLE_STATES, job__deleted_at__isnull=True):
        try:
            run.retry(actor=request.user, channel=Channel.ADMIN)
        except RetryNotAllowed:
            continue  # it changed state since the page was loaded
        except LimitExceeded as exc:
            count = refused.get(str(run.job), (0, exc))[0]
            refused[str(run.job)] = (count + 1, exc)
            continue
        retried += 1
    model_admin.message_user(
        request,
        f"Retried {retried} run{'s' if retried != 1 else ''}.",
        messages.SUCCESS if retried else messages.WARNING,
    )
    for job, (count, refusal) in refused.items():
        runs = "1 run" if count == 1 else f"{count} runs"
        model_admin.message_user(
            request, f"{runs} of “{job}” not retried: {refusal}", messages.ERROR
        )
    left = queryset.exclude(state__in=RETRYABLE_STATES).exists()
    if left:
        model_admin.message_user(
            request,
            "Only failed and missed runs can be retried; the others were left alone.",
            messages.WARNING,
        )


def retry_view(model_admin: OwnerScopedAdmin, request, object_id):
    run = model_admin.get_object(request, object_id)
    if not model_admin.has_change_permission(request, run):
        raise PermissionDenied
    if run.job.deleted_at is not None:
        model_admin.message_user(request, "The job was deleted: its runs stay as history.")
        return redirect("admin:runs_run_change", run.pk)
    try:
        run.retry(actor=request.user, channel=Channel.ADMIN)
    except RetryNotAllowed as exc:
        model_admin.message_user(request, str(exc).capitalize() + ".", messages.ERROR)
    except LimitExceeded as exc:
        model_admin.message_user(request, f"The run was not retried: {exc}", messages.ERROR)
        return redirect("admin:runs_run_change", run.pk)
    else:
        model_admin.message_user(
            request, "The run is pending again, with the same id.", messages.SUCCESS
        )
    return redirect(reverse("admin:runs_run_change", args=[run.pk]) + "?watch=1")

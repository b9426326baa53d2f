"""What the jobs admin does to jobs besides saving its form: the list's
actions (pause, resume or trigger the selected jobs) and the job page's
buttons (rotate the secret, send a test delivery, pause, resume).

Each is a plain function that takes the jobs admin first, as Django's own
``delete_selected`` action does. ``JobAdmin.actions`` lists the actions and
``JobAdmin.get_urls`` wires the pages; the functions find jobs through the
admin (``get_object``, ``get_queryset``), so an owner reaches only their own,
and ask it for permission before they change anything.

Every change goes through the domain verbs (pause, resume, trigger,
send_test_delivery in runs/job_verbs.py; rotate_secret on the model) with
``channel="admin"`` and the signed-in user as the actor.
"""

from __future__ import annotations

import uuid

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from console.display import run_url
from console.forms import PauseForm
from console.new_secrets import stash_secret
from core.admin_base import OwnerScopedAdmin
from core.db import db_now
from core.errors import LimitExceeded
from jobs.display import moment
from jobs.models import Channel, Job, JobState
from runs import job_verbs
from runs.models import Run

# A pause of selected jobs that are all gone (deleted meanwhile, or never the owner's).
NONE_SELECTED = "None of the selected jobs exist now."


# -- actions of the list: Django calls each with the admin, the request and the selection


@admin.action(description="Pause selected jobs…", permissions=["change"])
def pause_jobs(model_admin: OwnerScopedAdmin, request, queryset):
    """Asks for a note and a resume time first (pause_selected_view acts)."""
    jobs = list(queryset)
    if not jobs:
        model_admin.message_user(request, NONE_SELECTED, messages.WARNING)
        return None
    return _pause_page(model_admin, request, jobs, _pause_form(jobs), job_page=False)


@admin.action(description="Resume selected jobs", permissions=["change"])
def resume_jobs(model_admin: OwnerScopedAdmin, request, queryset):
    done = [job for job in queryset if job.state == JobState.PAUSED]
    for job in done:
        job_verbs.resume(job, actor=request.user, channel=Channel.ADMIN)
    _report(model_admin, request, "Resumed", done, queryset)


@admin.action(description="Trigger selected jobs now", permissions=["change"])
def trigger_jobs(model_admin: OwnerScopedAdmin, request, queryset):
    """Each job that its owner's triggers per minute allows gets a manual
    run; each refused one is named with the limit's message."""
    jobs = list(queryset)
    done = [job for job in jobs if _trigger(model_admin, request, job) is not None]
    _report(model_admin, request, "Triggered", done, done)


# -- pages: JobAdmin.get_urls wires each with the admin as its first argument


def rotate_secret_view(model_admin: OwnerScopedAdmin, request, object_id):
    """GET: what a rotation does, and a button that makes it; POST: rotate."""
    job = _changeable(model_admin, request, object_id)
    if request.method == "GET":
        return _rotate_confirmation(model_admin, request, job)
    try:
        secret = job.rotate_secret(actor=request.user, channel=Channel.ADMIN)
    except Job.DoesNotExist:
        model_admin.message_user(request, "This job was deleted meanwhile.", messages.WARNING)
        return redirect("admin:jobs_job_changelist")
    stash_secret(request, job, secret)
    model_admin.message_user(
        request,
        "The secret was rotated. For 24 hours deliveries are signed with both the old "
        "and the new secret, so receivers can switch over.",
        messages.SUCCESS,
    )
    return redirect("admin:jobs_job_change", job.pk)


def test_delivery_view(model_admin: OwnerScopedAdmin, request, object_id):
    job = _changeable(model_admin, request, object_id)
    run = _trigger(model_admin, request, job, verb=job_verbs.send_test_delivery)
    if run is None:
        return redirect("admin:jobs_job_change", job.pk)
    model_admin.message_user(
        request,
        "Test delivery queued: one attempt, which does not count towards the job's "
        "failure streak. This page follows it until it finishes.",
        messages.SUCCESS,
    )
    return HttpResponseRedirect(run_url(run.pk) + "?watch=1")


def pause_view(model_admin: OwnerScopedAdmin, request, object_id):
    """The job page's "Pause…": a form (note, resume time), then the verb.
    On a paused job it changes the note and the resume time."""
    job = _changeable(model_admin, request, object_id)
    # Over the system's pause, the note is the owner's own, added beside
    # the system's reason (which stays): it starts empty.
    initial = {"note": "" if job.pause_note == job.system_pause_note else job.pause_note}
    if job.resume_at:
        initial.update(resume_at=f"{job.resume_at:%Y-%m-%d %H:%M}", zone="UTC")
    form = _pause_form([job], request.POST if request.method == "POST" else None, initial)
    if not form.is_valid():
        return _pause_page(model_admin, request, [job], form, job_page=True)
    was_paused = job.state == JobState.PAUSED
    cancelled = job_verbs.pause(
        job,
        note=form.cleaned_data["note"],
        resume_at=form.cleaned_data["resume_at"],
        actor=request.user,
        channel=Channel.ADMIN,
    )
    text = (
        "The pause's note and resume time were saved."
        if was_paused
        else f"Paused. {cancelled} waiting run(s) cancelled."
    )
    model_admin.message_user(request, text, messages.SUCCESS)
    return redirect("admin:jobs_job_change", job.pk)


def pause_selected_view(model_admin: OwnerScopedAdmin, request):
    """The list action's form, posted: pause each selected active job."""
    ids = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
    try:
        selected = [uuid.UUID(value) for value in ids]
    except ValueError:
        return _pause_refused(
            model_admin, request, "The selection holds something that is not an id."
        )
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    jobs = list(model_admin.get_queryset(request).filter(pk__in=selected))
    if not jobs:
        model_admin.message_user(request, NONE_SELECTED, messages.WARNING)
        return redirect("admin:jobs_job_changelist")
    form = _pause_form(jobs, request.POST)
    if not form.is_valid():
        return _pause_page(model_admin, request, jobs, form, job_page=False)
    done = [job for job in jobs if job.state == JobState.ACTIVE]
    for job in done:
        job_verbs.pause(
            job,
            note=form.cleaned_data["note"],
            resume_at=form.cleaned_data["resume_at"],
            actor=request.user,
            channel=Channel.ADMIN,
        )
    _report(model_admin, request, "Paused", done, jobs)
    return redirect("admin:jobs_job_changelist")


def resume_view(model_admin: OwnerScopedAdmin, request, object_id):
    job = _changeable(model_admin, request, object_id)
    if job.state == JobState.PAUSED:
        job_verbs.resume(job, actor=request.user, channel=Channel.ADMIN)
        model_admin.message_user(request, "Resumed from now.", messages.SUCCESS)
    return redirect("admin:jobs_job_change", job.pk)


# -- what the actions and pages share


def _changeable(model_admin: OwnerScopedAdmin, request, object_id) -> Job:
    job = model_admin.get_object(request, object_id)
    if not model_admin.has_change_permission(request, job):
        raise PermissionDenied
    return job


def _trigger(
    model_admin: OwnerScopedAdmin, request, job: Job, verb=job_verbs.trigger
) -> Run | None:
    """A manual run (or with ``verb``, a test delivery) of ``job``, or
    None with the refusal shown."""
    try:
        return verb(job, actor=request.user, channel=Channel.ADMIN)
    except LimitExceeded as exc:
        model_admin.message_user(request, f"“{job}” was not triggered: {exc}", messages.ERROR)
    except Job.DoesNotExist:
        model_admin.message_user(request, f"“{job}” was deleted meanwhile.", messages.WARNING)
    return None


def _report(model_admin: OwnerScopedAdmin, request, verb: str, done: list[Job], selected) -> None:
    skipped = len(selected) - len(done)
    text = f"{verb} {len(done)} job{'s' if len(done) != 1 else ''}"
    if skipped:
        text += f" ({skipped} already {verb.lower()})"
    model_admin.message_user(request, text + ".", messages.SUCCESS)


def _pause_form(jobs: list[Job], data=None, initial=None) -> PauseForm:
    zones = sorted({job.timezone for job in jobs})
    return PauseForm(data, initial=initial, zones=zones, now=db_now())


def _pause_page(
    model_admin: OwnerScopedAdmin, request, jobs: list[Job], form: PauseForm, *, job_page: bool
) -> TemplateResponse:
    """The pause form, for one job (from its page) or for the jobs
    selected in the list; 400 when it comes back with errors."""
    job = jobs[0]
    if not job_page:
        title = "Pause the selected jobs"
    elif job.state == JobState.PAUSED:
        title = f"Change the pause of “{job}”"
    else:
        title = f"Pause “{job}”"
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": title,
        "form": form,
        "active": [job for job in jobs if job.state == JobState.ACTIVE],
        "paused": [job for job in jobs if job.state == JobState.PAUSED],
        "original": job if job_page else None,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    status = 400 if form.is_bound else 200
    return TemplateResponse(request, "admin/jobs/job/pause.html", context, status=status)


def _pause_refused(model_admin: OwnerScopedAdmin, request, problem: str) -> TemplateResponse:
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Jobs: this pause cannot be made",
        "problem": problem,
    }
    return TemplateResponse(request, "admin/punctual/refused.html", context, status=400)


def _rotate_confirmation(model_admin: OwnerScopedAdmin, request, job: Job) -> TemplateResponse:
    """What a rotation does, and a button that makes it."""
    now = db_now()
    until = job.previous_secret_until
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": f"Rotate the secret of “{job}”?",
        "original": job,
        # A rotation within the last 24 hours: rotating again ends the
        # overlap of the secret before the current one.
        "overlap_ends": moment(until, job.timezone, now) if until and until > now else "",
    }
    return TemplateResponse(request, "admin/jobs/job/rotate_secret.html", context)

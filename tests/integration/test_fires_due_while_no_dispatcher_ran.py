"""A fire that came due while no dispatcher ran says so (docs/concepts/misfire-and-overlap.md
"A backlog after an outage"), in words apart from an overlap skip.

A 10 s job under ``overlap_policy=skip`` with a 60 s grace is dispatched by
the real ``Dispatcher.tick``: first while a dispatcher is alive (a fire
skipped because the previous run still waits: ``overlap``), then after a
gap of ticks, as a dispatcher coming back finds it. The fires of the gap
within the grace read "missed · no dispatcher" in the API, the runs list,
the run page and the job page's history, and the auditor reconciles them.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from ops.audit import audit
from runs.models import Run
from tests.admin_support import make_owner
from tests.factories import make_job, rewrite_job
from tests.integration.api.support import token_client

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)


def outcomes(job) -> list[tuple[float, str, str]]:
    born = job.created_at
    return [
        ((r.scheduled_at - born) / S, r.state, r.reason)
        for r in Run.objects.filter(job=job).order_by("scheduled_at")
    ]


@pytest.fixture
def ann(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return make_owner("ann")


def test_fires_of_a_dispatcher_gap_read_no_dispatcher_and_a_real_overlap_reads_overlap(ann):
    job = make_job(
        ann, interval_seconds=10, misfire_grace_seconds=60, overlap_policy="skip", name="tick"
    )
    born = db_now() - 100 * S
    rewrite_job(job, created_at=born, start_at=born, next_fire_at=born + 10 * S)
    job.refresh_from_db()

    # A dispatcher alive: the fire at 10 s runs; at 20 s it is still
    # waiting, so the fire at 20 s is an overlap skip.
    Dispatcher().tick(now=born + 10.5 * S)
    Dispatcher().tick(now=born + 20.5 * S)
    # The run waiting at 20 s ends at 21 s. (The job was parked at 20 s:
    # its end unparks it, the fire at 20 s the only one it declined.)
    Run.objects.filter(job=job, state="pending").update(
        state="succeeded", attempt=1, finished_at=born + 21 * S
    )
    # No dispatcher from 21 s to 100 s: the next tick finds the fires at 30
    # to 100 s. Those past the 60 s grace are missed (past grace); of those
    # within it the first runs, and the others read "no dispatcher".
    Dispatcher().tick(now=born + 100.5 * S)
    assert outcomes(job) == [
        (10.0, "succeeded", ""),
        (20.0, "skipped", "overlap"),
        (30.0, "missed", "past grace"),
        (40.0, "missed", "past grace"),
        (50.0, "pending", ""),
        (60.0, "missed", "no dispatcher"),
        (70.0, "missed", "no dispatcher"),
        (80.0, "missed", "no dispatcher"),
        (90.0, "missed", "no dispatcher"),
        (100.0, "missed", "no dispatcher"),
    ]
    gap_run = Run.objects.get(job=job, scheduled_at=born + 70 * S)
    overlap_run = Run.objects.get(job=job, scheduled_at=born + 20 * S)

    # The API's reason field.
    api = token_client(ann)
    listed = api.get(f"/api/v1/jobs/{job.pk}/runs/").json()["results"]
    reasons = {r["scheduled_at"]: (r["state"], r["reason"]) for r in listed}
    assert sorted(reasons.values()).count(("missed", "no dispatcher")) == 5
    assert sorted(reasons.values()).count(("skipped", "overlap")) == 1
    detail = api.get(f"/api/v1/runs/{gap_run.pk}/").json()
    assert (detail["state"], detail["reason"]) == ("missed", "no dispatcher")

    admin = Client()
    admin.force_login(ann)
    # The runs list, filtered to the job.
    page = admin.get(
        reverse("admin:runs_run_changelist"), {"job__id__exact": str(job.pk)}
    ).content.decode()
    assert page.count("no dispatcher") == 5
    assert page.count("overlap") == 1
    # The run page.
    page = admin.get(reverse("admin:runs_run_change", args=[gap_run.pk])).content.decode()
    assert "Missed" in page and "no dispatcher" in page and "overlap" not in page
    page = admin.get(reverse("admin:runs_run_change", args=[overlap_run.pk])).content.decode()
    assert "overlap" in page and "no dispatcher" not in page
    # The job page's strips of runs (the header's and the history's: each
    # square's title says why).
    page = admin.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    strips = page.count("skipped · overlap")
    assert strips >= 1
    assert page.count("missed · no dispatcher") == 5 * strips

    # The auditor reconciles them: every fire of the gap has its run, and
    # none was attempted.
    # The run waiting at 20 s ends at 21 s. (The job was parked at 20 s:
    # its end unparks it, the fire at 20 s the only one it declined.)
    Run.objects.filter(job=job, state="pending").update(
        state="succeeded", attempt=1, finished_at=born + 21 * S
    )
    report = audit()
    assert report.ok, report.render()

"""A parked job (docs/concepts/misfire-and-overlap.md "Parked while its run is
active") as the admin and the API show it: active, not finished, waiting for
its run; its skipped run standing for every later fire, then for their count."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.urls import reverse

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from jobs.models import Job
from runs.models import Run, RunKind
from tests.factories import make_job, rewrite_job
from tests.integration.api.support import token_client

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)


def parked(owner) -> tuple[Job, Run]:
    """A 60 s job whose run is still waiting when the dispatcher, behind,
    finds its next two fires due."""
    now = db_now()
    job = make_job(owner, name="parked-one", interval_seconds=60, misfire_grace_seconds=300)
    Run.objects.create_for_fires(job, [now - 121 * S], kind=RunKind.SCHEDULED)
    rewrite_job(job, created_at=now - 181 * S, next_fire_at=now - 61 * S)
    Dispatcher().tick()
    job.refresh_from_db()
    assert job.parked_since == now - 61 * S
    return job, Run.objects.get(job=job, scheduled_at=now - 121 * S)


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_the_jobs_list_shows_a_parked_job_active_and_after_its_run(ann, ann_client):
    parked(ann)
    make_job(ann, name="done-one", run_at=db_now() - dt.timedelta(minutes=1))
    page = ann_client.get(reverse("admin:jobs_job_changelist")).content.decode()
    row = re.search(r"<tr[^>]*>(?:(?!</tr>).)*parked-one.*?</tr>", page, re.S).group(0)
    assert "after its run ends" in row and "Finished" not in row
    names = r'<th class="field-name"><a href="[^"]+">([^<]+)</a>'
    active = ann_client.get(reverse("admin:jobs_job_changelist"), {"state": "active"})
    assert re.findall(names, active.content.decode()) == ["parked-one"]
    finished = ann_client.get(reverse("admin:jobs_job_changelist"), {"state": "finished"})
    assert re.findall(names, finished.content.decode()) == ["done-one"]


def test_the_job_page_says_it_waits_for_its_run(ann, ann_client):
    job, _held = parked(ann)
    page = ann_client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    header = re.search(r'<div class="punctual-status[^>]*id="job-status">.*?\n</div>', page, re.S)
    words = text(header.group(0))
    assert "Active, waiting for its run" in words
    assert "are skipped (overlap), the next comes after the run ends" in words


def test_the_runs_list_says_what_the_skipped_run_stands_for(ann, ann_client):
    _job, held = parked(ann)
    runs = reverse("admin:runs_run_changelist")
    page = text(ann_client.get(runs).content.decode())
    assert "overlap: and every later fire while its run is active" in page
    Run.objects.filter(pk=held.pk).update(state="succeeded", finished_at=db_now() + 70 * S)
    page = text(ann_client.get(runs).content.decode())
    assert "overlap: 3 fires, one interval apart" in page


def test_the_api_shows_parked_since_and_the_fires_a_run_stands_for(ann):
    job, held = parked(ann)
    client = token_client(ann)
    body = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert (body["state"], body["next_fire_at"]) == ("active", None)
    assert body["parked_since"] is not None
    finished = client.get("/api/v1/jobs/", {"state": "finished"}).json()["results"]
    assert finished == []
    runs = client.get("/api/v1/runs/", {"job": str(job.pk)}).json()["results"]
    assert sorted((r["state"], r["fires"]) for r in runs) == [
        ("pending", 1),
        ("skipped", None),
    ]
    Run.objects.filter(pk=held.pk).update(state="succeeded", finished_at=db_now() + 70 * S)
    runs = client.get("/api/v1/runs/", {"job": str(job.pk)}).json()["results"]
    assert sorted((r["state"], r["fires"]) for r in runs) == [("skipped", 3), ("succeeded", 1)]
    body = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["parked_since"] is None and body["next_fire_at"] is not None

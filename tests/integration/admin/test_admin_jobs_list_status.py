"""The jobs list's state and last-run columns, its hint for an owner with no
jobs yet, and the soft delete's confirmation pages."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console.job_admin import LIST_STRIP_RUNS
from core.db import db_now
from jobs.models import Job
from runs import job_verbs
from tests.admin_support import make_run
from tests.factories import make_job
from tests.integration.admin.test_admin_jobs_list import LIST, get

pytestmark = pytest.mark.django_db


def cell(page: str, job_name: str, column: str) -> str:
    [row] = [r for r in page.split("<tr")[1:] if f">{job_name}</a>" in r]
    return re.search(rf'<td class="field-{column}[^"]*">(.*?)</td>', row, re.S).group(1)


def test_an_automatic_pause_is_labelled_apart_from_an_owners(ann, ann_client):
    mine = make_job(ann, name="paused-by-me")
    job_verbs.pause(mine, note="deploy", actor=ann, channel="admin")
    auto = make_job(ann, name="paused-by-system")
    note = "Paused automatically after 3 consecutive failed runs."
    job_verbs.pause_by_system(auto.pk, note=note, now=db_now())
    page = get(ann_client)
    assert ">Paused<" in cell(page, "paused-by-me", "state_column")
    assert ">Paused (auto)<" in cell(page, "paused-by-system", "state_column")
    # Resumed and paused again by its owner: no longer "auto".
    job_verbs.resume(Job.objects.get(pk=auto.pk), actor=ann)
    job_verbs.pause(Job.objects.get(pk=auto.pk), actor=ann)
    assert ">Paused<" in cell(get(ann_client), "paused-by-system", "state_column")


def test_last_run_is_the_newest_attempted_run(ann, ann_client):
    job = make_job(ann, name="quiet-lately")
    make_run(job, state="failed", ago=500, lag_seconds=1.5)
    for ago, state in ((400, "skipped"), (300, "cancelled"), (200, "missed"), (100, "pending")):
        make_run(job, state=state, ago=ago)
    last = cell(get(ann_client), "quiet-lately", "last_run")
    assert "st-failed" in last and "+1.5 s" in last

    never = make_job(ann, name="never-ran")
    for k in range(3):
        make_run(never, state="skipped", ago=100 + k)
    assert "none yet" in cell(get(ann_client), "never-ran", "last_run")


def test_the_list_loads_every_jobs_runs_in_one_query(ann, ann_client):
    for k in range(5):
        job = make_job(ann, name=f"job-{k}")
        for ago in range(LIST_STRIP_RUNS + 2):
            make_run(job, state="skipped" if ago % 2 else "succeeded", ago=60 * (ago + 1))
    with CaptureQueriesContext(connection) as queries:
        get(ann_client)
    sql = [q["sql"] for q in queries]
    # One statement for the page's runs (console/recent.py), none per job.
    assert sum("CROSS JOIN LATERAL" in q for q in sql) == 1
    assert not [q for q in sql if '"runs_run"."job_id" =' in q]


def test_an_owner_without_jobs_gets_a_hint_with_links(ann, ann_client):
    page = get(ann_client)
    hint = re.search(r'<div class="punctual-empty" id="no-jobs-hint">(.*?)</div>', page, re.S)
    assert hint is not None
    assert reverse("admin:jobs_job_add") in hint.group(1)
    assert reverse("api-docs") in hint.group(1)
    assert "A job is a schedule" in hint.group(1)
    # A search or filter that finds nothing is not a new owner.
    make_job(ann, name="nightly")
    assert "no-jobs-hint" not in get(ann_client)
    assert "no-jobs-hint" not in get(ann_client, q="nothing-like-this")


def test_delete_confirmation_says_the_job_stops_and_its_history_is_kept(ann, ann_client):
    job = make_job(ann, name="old-report")
    page = ann_client.get(reverse("admin:jobs_job_delete", args=[job.pk])).content.decode()
    assert "stops it firing" in page and "Its history is kept" in page
    assert "related items will be deleted" not in page
    selected = ann_client.post(
        reverse(LIST), {"action": "delete_selected", "_selected_action": [str(job.pk)]}
    ).content.decode()
    assert "stops it firing" in selected and "Its history is kept" in selected
    assert "related items will be deleted" not in selected

    ann_client.post(reverse("admin:jobs_job_delete", args=[job.pk]), {"post": "yes"})
    job.refresh_from_db()
    assert job.deleted_at is not None

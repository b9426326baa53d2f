"""A job's last run is one definition (runs/last_run.py): the newest run that
was attempted. The API's ``last_run`` and the admin's "last run" column name
the same run, whatever skipped, missed, cancelled or pending runs came after
it, and however many."""

from __future__ import annotations

import re

import pytest

from console.job_admin import LIST_STRIP_RUNS
from tests.admin_support import make_run
from tests.factories import make_job
from tests.integration.admin.test_admin_jobs_list import get
from tests.integration.admin.test_admin_jobs_list_status import cell
from tests.integration.api.support import token_client

pytestmark = pytest.mark.django_db


def api_last_run(owner, job) -> dict | None:
    client = token_client(owner)
    [listed] = [j for j in client.get("/api/v1/jobs/").json()["results"] if j["id"] == str(job.pk)]
    detail = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert detail["last_run"] == listed["last_run"]
    return listed["last_run"]


def admin_last_run_id(client, job) -> str | None:
    found = re.search(r"/runs/run/([0-9a-f-]{36})/", cell(get(client), job.name, "last_run"))
    return found.group(1) if found else None


def test_a_skipped_run_newest_is_not_the_last_run_in_the_api_or_the_admin(ann, ann_client):
    job = make_job(ann, name="overlapping")
    failed = make_run(job, state="failed", ago=600, lag_seconds=1.5)
    make_run(job, state="skipped", ago=60)

    api = api_last_run(ann, job)
    assert api is not None and api["id"] == str(failed.pk) and api["state"] == "failed"
    assert admin_last_run_id(ann_client, job) == str(failed.pk)


def test_the_last_run_may_be_older_than_the_admins_strip(ann, ann_client):
    job = make_job(ann, name="long-quiet")
    succeeded = make_run(job, state="succeeded", ago=100_000)
    for k in range(LIST_STRIP_RUNS + 5):
        make_run(job, state=("skipped", "missed", "cancelled")[k % 3], ago=60 + k)
    make_run(job, state="pending", ago=30)

    assert api_last_run(ann, job)["id"] == str(succeeded.pk)
    assert admin_last_run_id(ann_client, job) == str(succeeded.pk)


def test_a_job_whose_runs_were_never_attempted_has_no_last_run(ann, ann_client):
    job = make_job(ann, name="never-ran")
    make_run(job, state="skipped", ago=60)
    make_run(job, state="missed", ago=120)
    assert api_last_run(ann, job) is None
    assert admin_last_run_id(ann_client, job) is None
    assert "none yet" in cell(get(ann_client), job.name, "last_run")

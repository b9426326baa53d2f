"""The API lists: a page size that cannot be used is a 400, and runs filter by
lateness exactly as the admin's "Late" filter does."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse

from core.db import db_now
from runs import job_verbs
from tests.admin_support import make_run, owners_group
from tests.factories import make_job

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"


@pytest.fixture
def lists(owner):
    job = make_job(owner)
    job_verbs.trigger(job)
    return [RUNS, "/api/v1/jobs/", f"/api/v1/jobs/{job.pk}/runs/", f"/api/v1/jobs/{job.pk}/events/"]


@pytest.mark.parametrize("size", ["0", "-1", "ten", "", "501", "1e2", "\uff15", "9" * 5000])
def test_a_page_size_out_of_range_or_malformed_is_a_400_naming_it(api, lists, size):
    for url in lists:
        answer = api.get(url, {"page_size": size})
        assert answer.status_code == 400, (url, size)
        assert answer.json() == {"page_size": ["Must be a whole number from 1 to 500."]}


@pytest.mark.parametrize("size", ["1", "500"])
def test_a_page_size_in_range_is_the_page_s_length_bound(api, lists, size):
    for url in lists:
        answer = api.get(url, {"page_size": size})
        assert answer.status_code == 200 and len(answer.json()["results"]) == 1, url


def test_the_schema_gives_the_page_size_bounds(anon):
    schema = anon.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for path in ("/api/v1/runs/", "/api/v1/jobs/", "/api/v1/jobs/{id}/events/"):
        [size] = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "page_size"]
        assert size["schema"] == {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}


@pytest.fixture
def lateness(owner):
    """Runs on either side of the line, and backfills that would be late if
    they were anything else."""
    job = make_job(owner)
    now = db_now()
    runs = {
        "started_late": make_run(job, ago=700, lag_seconds=12.0),
        "started_on_time": make_run(job, ago=600, lag_seconds=0.2),
        "waiting_late": make_run(job, state="pending", ago=60),
        "waiting_fresh": make_run(
            job, state="pending", ago=-30, available_at=now + dt.timedelta(seconds=30)
        ),
        "backfill_done": make_run(job, ago=5000, kind="backfill", lag_seconds=4000.0),
        "backfill_waiting": make_run(job, state="pending", ago=4000, kind="backfill"),
    }
    return {name: str(run.pk) for name, run in runs.items()}


def ids(api, url, **params) -> set[str]:
    answer = api.get(url, params)
    assert answer.status_code == 200, answer.json()
    return {run["id"] for run in answer.json()["results"]}


def test_late_runs_are_those_that_started_or_wait_past_the_line_and_no_backfill(
    api, owner, lateness
):
    late = {lateness["started_late"], lateness["waiting_late"]}
    assert ids(api, RUNS, late="true") == late
    assert ids(api, RUNS, late="false") == set(lateness.values()) - late
    job = owner.jobs.get()
    assert ids(api, f"/api/v1/jobs/{job.pk}/runs/", late="true", state="pending") == {
        lateness["waiting_late"]
    }
    bad = api.get(RUNS, {"late": "maybe"})
    assert bad.status_code == 400 and list(bad.json()) == ["late"]


def test_the_admin_s_late_filter_shows_the_same_runs(owner, lateness):
    owner.is_staff = True
    owner.save()
    owner.groups.add(owners_group())
    client = Client()
    client.force_login(owner)
    page = client.get(reverse("admin:runs_run_changelist"), {"status": "late"}).content.decode()
    shown = {run_id for run_id in lateness.values() if f"/admin/runs/run/{run_id}/change/" in page}
    assert shown == {lateness["started_late"], lateness["waiting_late"]}

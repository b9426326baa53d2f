"""``GET /api/v1/jobs/export/``: the owner's live jobs as a list that a bulk
create takes as it is, secrets left out; a job made from it is the same job
(the same next fires), an interval job's phase included."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs.models import Job
from tests.integration.api.support import PUBLIC_URL

pytestmark = pytest.mark.django_db

JOBS = [
    {
        "name": "nightly report",
        "description": "Berlin's 02:30, weekdays",
        "cron": "30 2 * * 1-5",
        "timezone": "Europe/Berlin",
        "url": PUBLIC_URL,
        "payload": {"report": "sales", "rows": [1, 2]},
        "max_attempts": 5,
        "overlap_policy": "queue",
        "pause_after_failures": 3,
    },
    {"name": "every 7 minutes", "interval_seconds": 420, "url": PUBLIC_URL, "jitter_seconds": 5},
    {
        "name": "from a start",
        "interval_seconds": 3600,
        "start_at": "2026-01-01T00:17:00Z",
        "url": PUBLIC_URL,
    },
    {"name": "pulled", "cron": "@hourly", "target_kind": "pull"},
]


def test_an_export_is_a_bulk_create_that_makes_the_same_jobs(api, other_api, owner):
    made = api.post("/api/v1/jobs/", JOBS, format="json")
    assert made.status_code == 201, made.json()
    gone = {"name": "gone", "cron": "@daily", "url": PUBLIC_URL}
    deleted = api.post("/api/v1/jobs/", [gone], format="json")
    api.delete(f"/api/v1/jobs/{deleted.json()[0]['id']}/")

    exported = api.get("/api/v1/jobs/export/")
    assert exported.status_code == 200
    items = exported.json()
    assert [item["name"] for item in items] == sorted(job["name"] for job in JOBS)
    assert all("secret" not in item and "id" not in item for item in items)
    by_name = {item["name"]: item for item in items}
    assert by_name["nightly report"]["payload"] == {"report": "sales", "rows": [1, 2]}
    assert by_name["nightly report"]["pause_after_failures"] == 3
    # The 7-minute job's steps count from its creation: spelt out as start_at.
    original = Job.objects.get(owner=owner, name="every 7 minutes")
    assert original.start_at is None
    assert dt.datetime.fromisoformat(by_name["every 7 minutes"]["start_at"]) == original.created_at

    # As it is, to another owner: the same jobs, firing at the same times.
    again = other_api.post("/api/v1/jobs/", items, format="json")
    assert again.status_code == 201, again.json()
    for item in again.json():
        first = Job.objects.get(owner=owner, name=item["name"])
        copy = Job.objects.get(pk=item["id"])
        after = max(first.created_at, copy.created_at)
        assert first.schedule.next_fires(after, 5) == copy.schedule.next_fires(after, 5)
        assert first.signing_secrets(after) != copy.signing_secrets(after)
    assert other_api.get("/api/v1/jobs/export/").json() == items


def test_an_export_holds_only_the_owners_live_jobs(api, other_api):
    api.post("/api/v1/jobs/", JOBS[:2], format="json")
    assert other_api.get("/api/v1/jobs/export/").json() == []
    assert len(api.get("/api/v1/jobs/export/").json()) == 2


def test_an_export_needs_a_token(anon):
    assert anon.get("/api/v1/jobs/export/").status_code == 401

"""One way to make a job (jobs/creation.py ``create_jobs``): a job created in
the admin and one created over the API with the same fields get the same
row, schedule span, next fire and "created" event, but for the event's
channel. The owner's live jobs limit holds on both paths, with the same
words."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse

from jobs.models import Job, JobEvent, ScheduleSpan
from tests.admin_support import make_owner
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL, token_client

pytestmark = pytest.mark.django_db

ADD = reverse("admin:jobs_job_add")
JOBS = "/api/v1/jobs/"
START = dt.datetime(2030, 1, 1, 9, 0, tzinfo=dt.UTC)

# The same job, as each face is sent it. The admin reads start_at in its own
# time zone, UTC.
SCHEDULES = {
    "interval from start_at": (
        {"interval_seconds": 300, "start_at": START.isoformat()},
        {"interval_seconds": "300", "start_at_0": "2030-01-01", "start_at_1": "09:00:00"},
    ),
    "interval from creation": ({"interval_seconds": 300}, {"interval_seconds": "300"}),
    "cron in a zone": (
        {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "start_at": START.isoformat()},
        {
            "cron": "30 2 * * *",
            "timezone": "Europe/Berlin",
            "start_at_0": "2030-01-01",
            "start_at_1": "09:00:00",
        },
    ),
}


def api_body(name: str, schedule: dict) -> dict:
    return {
        "name": name,
        "url": PUBLIC_URL,
        "payload": {"report": "daily"},
        "max_attempts": 5,
        **schedule,
    }


def admin_form(name: str, schedule: dict) -> dict:
    data = {
        "name": name,
        "description": "",
        "cron": "",
        "interval_seconds": "",
        "timezone": "UTC",
        "start_at_0": "",
        "start_at_1": "",
        "target_kind": "webhook",
        "url": PUBLIC_URL,
        "payload": '{"report": "daily"}',
        "timeout_seconds": "30",
        "max_attempts": "5",
        "retry_backoff_seconds": "10",
        "jitter_seconds": "0",
        "misfire_policy": "skip",
        "max_catchup": "3",
        "misfire_grace_seconds": "60",
        "overlap_policy": "skip",
        "pause_after_failures": "",
    }
    data.update(schedule)
    return data


@pytest.fixture
def ann(db):
    return make_owner("ann")


@pytest.fixture
def ann_client(ann):
    client = Client()
    client.force_login(ann)
    return client


# What a job's row and span must agree on, whichever face made it.
JOB_FIELDS = [
    "cron",
    "interval_seconds",
    "timezone",
    "start_at",
    "url",
    "payload",
    "max_attempts",
    "state",
    "version",
    "consecutive_failures",
    "missed_count",
]
SPAN_FIELDS = ["state", "cron", "interval_seconds", "timezone", "start_at", "missed_count"]


def made(name: str) -> tuple[Job, ScheduleSpan, JobEvent]:
    job = Job.objects.get(name=name)
    [span] = ScheduleSpan.objects.filter(job=job)
    [event] = JobEvent.objects.filter(job=job)
    return job, span, event


@pytest.mark.parametrize("fields", SCHEDULES.values(), ids=SCHEDULES.keys())
def test_admin_and_api_creates_get_the_same_span_next_fire_and_event(ann, ann_client, fields):
    api_fields, admin_fields = fields
    answer = token_client(ann).post(JOBS, api_body("by-api", api_fields), format="json")
    assert answer.status_code == 201, answer.json()
    response = ann_client.post(ADD, admin_form("by-admin", admin_fields))
    assert response.status_code == 302, response.context["adminform"].form.errors

    by_api, by_admin = made("by-api"), made("by-admin")
    for job, span, event in (by_api, by_admin):
        # The row: its creation time (the database's) anchors its span, and
        # its next fire is the schedule's first after that time.
        assert job.next_fire_at == job.schedule.next_fire(job.created_at)
        assert job.secret_encrypted and job.updated_at
        # The span: open since the creation, holding the row's schedule.
        assert (span.started_at, span.anchor, span.ended_at) == (job.created_at,) * 2 + (None,)
        assert span.schedule == job.schedule
        # The event: "created", by the owner, with the job's first values.
        assert (event.action, event.actor, event.owner_id) == ("created", ann, ann.pk)
        assert event.changes["name"] == job.name and "whsec_" not in str(event.changes)
    (api_job, api_span, api_event), (admin_job, admin_span, admin_event) = by_api, by_admin
    assert [getattr(api_job, f) for f in JOB_FIELDS] == [getattr(admin_job, f) for f in JOB_FIELDS]
    assert [getattr(api_span, f) for f in SPAN_FIELDS] == [
        getattr(admin_span, f) for f in SPAN_FIELDS
    ]
    if api_job.start_at is not None:
        # Anchored at start_at: the very same next fire, whenever each was made.
        assert api_job.next_fire_at == admin_job.next_fire_at
    else:
        # Anchored at the creation: one interval after it, on both paths.
        step = dt.timedelta(seconds=300)
        assert api_job.next_fire_at - api_job.created_at == step
        assert admin_job.next_fire_at - admin_job.created_at == step
    assert (api_event.channel, admin_event.channel) == ("api", "admin")
    # The same first values, field for field (the payload as its digest).
    assert set(api_event.changes) == set(admin_event.changes)
    assert {**api_event.changes, "name": None} == {**admin_event.changes, "name": None}


def test_the_live_jobs_limit_refuses_on_both_paths_in_the_same_words(ann, ann_client, settings):
    settings.PUNCTUAL_MAX_JOBS_PER_OWNER = 1
    make_job(ann, name="the-one")
    answer = token_client(ann).post(
        JOBS, api_body("by-api", {"interval_seconds": 300}), format="json"
    )
    assert answer.status_code == 403, answer.json()
    response = ann_client.post(ADD, admin_form("by-admin", {"interval_seconds": "300"}))
    assert response.status_code == 200
    [admin_refusal] = response.context["adminform"].form.non_field_errors()
    assert "may have at most 1 (jobs_per_owner)" in admin_refusal
    assert answer.json() == {"detail": admin_refusal, "limit": "jobs_per_owner"}
    assert list(Job.objects.values_list("name", flat=True)) == ["the-one"]

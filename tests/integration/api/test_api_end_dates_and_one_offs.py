"""End dates and one-off jobs through the API: the fields, their previews,
``state=finished`` in the answers and the list's filter, warnings for a time
already past, the export made into jobs again, and bad input refused naming
the field, with nothing written (single, bulk and PATCH)."""

from __future__ import annotations

import datetime as dt

import pytest

from core.db import db_now
from jobs.models import Job, JobEvent
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
PREVIEW = "/api/v1/schedules/preview/"
MIN = dt.timedelta(minutes=1)


def iso(value: dt.datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def counts() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


def test_a_one_off_job_is_created_with_its_one_fire_next(api):
    run_at = (db_now() + 60 * MIN).replace(microsecond=0)
    answer = api.post(
        JOBS,
        {"name": "once", "run_at": iso(run_at), "timezone": "Europe/Berlin", "url": PUBLIC_URL},
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    data = answer.json()
    assert (data["cron"], data["interval_seconds"], data["end_at"]) == (None, None, None)
    assert dt.datetime.fromisoformat(data["run_at"]) == run_at
    assert dt.datetime.fromisoformat(data["next_fire_at"]) == run_at
    assert data["state"] == "active" and data["warnings"] == []
    fires = api.get(f"{JOBS}{data['id']}/preview/").json()["fires"]
    assert [dt.datetime.fromisoformat(f) for f in fires] == [run_at]


def test_the_schedule_preview_stops_at_the_end_and_names_a_one_off(api):
    answer = api.post(
        PREVIEW,
        {
            "cron": "0 9 * * *",
            "timezone": "Europe/Berlin",
            "after": "2027-03-01T00:00:00Z",
            "end_at": "2027-03-03T08:00:00Z",
            "count": 10,
        },
        format="json",
    )
    assert answer.status_code == 200, answer.json()
    # The fire exactly at end_at is the last one.
    assert answer.json()["fires"] == [
        "2027-03-01T08:00:00Z",
        "2027-03-02T08:00:00Z",
        "2027-03-03T08:00:00Z",
    ]
    assert answer.json()["description"].endswith("until 2027-03-03 09:00 (Europe/Berlin)")
    once = api.post(
        PREVIEW,
        {"run_at": "2027-03-01T17:30:00Z", "timezone": "Europe/Berlin", "count": 5},
        format="json",
    )
    assert once.status_code == 200, once.json()
    assert once.json()["fires"] == ["2027-03-01T17:30:00Z"]
    assert once.json()["description"] == "once, at 2027-03-01 18:30 (Europe/Berlin)"
    assert once.json()["local_fires"] == ["2027-03-01T18:30:00+01:00"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "@daily", "run_at": "2027-01-01T00:00:00Z"}, "run_at"),
        ({"run_at": "2027-01-01T00:00:00"}, "run_at"),
        ({"run_at": "2027-01-01T00:00:00Z", "end_at": "2027-01-01T00:00:00Z"}, "end_at"),
        (
            {"cron": "@daily", "start_at": "2027-01-01T00:00Z", "end_at": "2026-01-01T00:00Z"},
            "end_at",
        ),
        ({"run_at": "2027-01-01T00:00:00Z", "start_at": "2026-01-01T00:00:00Z"}, "start_at"),
    ],
)
def test_the_schedule_preview_refuses_what_a_create_refuses(api, body, field):
    answer = api.post(PREVIEW, body, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.json()
    create = api.post(JOBS, {"name": "x", "url": PUBLIC_URL, **body}, format="json")
    assert create.status_code == 400 and field in create.json(), create.json()


def test_a_time_already_past_is_saved_with_a_warning_and_shows_finished(api):
    past = iso(db_now() - 60 * MIN)
    once = api.post(JOBS, {"name": "late", "run_at": past, "url": PUBLIC_URL}, format="json")
    assert once.status_code == 201, once.json()
    assert once.json()["state"] == "finished" and once.json()["next_fire_at"] is None
    assert any("run_at is already past" in w for w in once.json()["warnings"])
    ended = api.post(
        JOBS, {"name": "ended", "cron": "@hourly", "end_at": past, "url": PUBLIC_URL}, format="json"
    )
    assert ended.status_code == 201, ended.json()
    assert ended.json()["state"] == "finished"
    assert any("end_at is already past" in w for w in ended.json()["warnings"])


def test_state_finished_lists_the_jobs_with_no_fire_left_apart_from_the_active(api, owner):
    make_job(owner, name="ongoing", cron="@daily")
    make_job(owner, name="done-once", run_at=db_now() - MIN)
    make_job(owner, name="ended", cron="@daily", end_at=db_now() - MIN)
    make_job(owner, name="ends-later", cron="@daily", end_at=db_now() + 24 * 60 * MIN)

    def names(**params) -> list[str]:
        answer = api.get(JOBS, params)
        assert answer.status_code == 200, answer.json()
        return [job["name"] for job in answer.json()["results"]]

    assert names(state="finished") == ["done-once", "ended"]
    assert names(state="active") == ["ends-later", "ongoing"]
    assert names(state="paused") == []
    assert api.get(JOBS, {"state": "done"}).status_code == 400


def test_a_patch_of_the_end_brings_a_finished_job_back(api, owner):
    job = make_job(owner, name="ended", cron="@hourly", end_at=db_now() - MIN)
    later = iso(db_now() + 24 * 60 * MIN)
    answer = api.patch(f"{JOBS}{job.pk}/", {"end_at": later}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["state"] == "active" and answer.json()["next_fire_at"] is not None
    [event] = JobEvent.objects.filter(job=job, action="updated")
    assert "end_at" in event.changes


def test_an_export_with_ends_and_one_offs_is_taken_back_as_it_is(api, other_api, owner):
    now = db_now()
    jobs = [
        {"name": "a-once", "run_at": iso(now + 60 * MIN), "url": PUBLIC_URL},
        {
            "name": "b-ending",
            "cron": "*/5 * * * *",
            "end_at": iso(now + 90 * MIN),
            "url": PUBLIC_URL,
        },
        {"name": "c-once-past", "run_at": iso(now - 60 * MIN), "url": PUBLIC_URL},
        {
            "name": "d-ended",
            "interval_seconds": 60,
            "end_at": iso(now - 60 * MIN),
            "url": PUBLIC_URL,
        },
    ]
    made = api.post(JOBS, jobs, format="json")
    assert made.status_code == 201, made.json()
    items = api.get(f"{JOBS}export/").json()
    by_name = {item["name"]: item for item in items}
    assert dt.datetime.fromisoformat(by_name["a-once"]["run_at"]) == now + 60 * MIN
    assert dt.datetime.fromisoformat(by_name["b-ending"]["end_at"]) == now + 90 * MIN
    again = other_api.post(JOBS, items, format="json")
    assert again.status_code == 201, again.json()
    for item in again.json():
        first = Job.objects.get(owner=owner, name=item["name"])
        copy = Job.objects.get(pk=item["id"])
        assert (copy.run_at, copy.end_at) == (first.run_at, first.end_at)
        assert copy.next_fire_at == first.next_fire_at or first.cron
        assert item["state"] == first.status


def test_a_bulk_create_names_the_item_and_field_of_a_bad_end_and_writes_nothing(api):
    before = counts()
    body = [
        {"name": "fine", "cron": "@daily", "url": PUBLIC_URL},
        {
            "name": "bad-end",
            "cron": "@daily",
            "start_at": "2027-01-02T00:00Z",
            "end_at": "2027-01-01T00:00Z",
            "url": PUBLIC_URL,
        },
        {
            "name": "two-kinds",
            "interval_seconds": 60,
            "run_at": "2027-01-01T00:00Z",
            "url": PUBLIC_URL,
        },
    ]
    answer = api.post(JOBS, body, format="json")
    assert answer.status_code == 400
    errors = answer.json()
    assert set(errors) == {"1", "2"}
    assert list(errors["1"]) == ["end_at"]
    assert set(errors["2"]) == {"interval_seconds", "run_at"}
    assert counts() == before


def test_a_bad_patch_of_the_new_fields_changes_nothing(api, owner):
    job = make_job(owner, name="mine", cron="@daily", url=PUBLIC_URL)
    before = (Job.objects.get(pk=job.pk).version, counts())
    for body, field in [
        ({"end_at": "2020-01-01T00:00:00Z", "start_at": "2021-01-01T00:00:00Z"}, "end_at"),
        ({"run_at": "2027-01-01T00:00:00Z"}, "run_at"),
        (
            {"cron": None, "run_at": "2027-01-01T00:00:00Z", "start_at": "2026-01-01T00:00Z"},
            "start_at",
        ),
    ]:
        answer = api.patch(f"{JOBS}{job.pk}/", body, format="json")
        assert answer.status_code == 400 and field in answer.json(), answer.json()
    assert (Job.objects.get(pk=job.pk).version, counts()) == before

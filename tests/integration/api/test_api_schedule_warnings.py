"""Every answer that saves or previews a schedule carries its warnings (fires
a DST change skips or repeats, days some months lack), and a single create
answers its job's URL in Location."""

from __future__ import annotations

import pytest

from jobs.models import Job
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
# 02:30 does not exist in Berlin on the spring change, and happens twice in autumn.
RISKY = {"cron": "30 2 * * *", "interval_seconds": None, "timezone": "Europe/Berlin"}
SAFE = {"cron": "0 9 * * *", "interval_seconds": None, "timezone": "Europe/Berlin"}


def job_body(name="nightly", **fields):
    return {"name": name, "url": PUBLIC_URL, **RISKY, **fields}


def assert_dst_warnings(warnings):
    assert len(warnings) == 2, warnings
    assert "02:30 does not exist in Europe/Berlin" in warnings[0]
    assert "02:30 happens twice in Europe/Berlin" in warnings[1]


def test_a_create_answers_the_schedule_s_warnings_and_its_location(api):
    answer = api.post(JOBS, job_body(), format="json")
    assert answer.status_code == 201
    body = answer.json()
    assert_dst_warnings(body["warnings"])
    assert answer["Location"] == f"{JOBS}{body['id']}/"
    assert api.get(answer["Location"]).json()["id"] == body["id"]
    # Warned, and saved all the same.
    assert Job.objects.get(pk=body["id"]).cron == "30 2 * * *"


@pytest.mark.parametrize(
    "schedule", [SAFE, {"cron": None, "interval_seconds": 60, "timezone": "Europe/Berlin"}]
)
def test_a_schedule_without_surprises_answers_no_warnings(api, schedule):
    answer = api.post(JOBS, job_body(**schedule), format="json")
    assert answer.status_code == 201 and answer.json()["warnings"] == []


def test_a_replayed_create_answers_the_location_too(api):
    headers = {"HTTP_IDEMPOTENCY_KEY": "create-1"}
    first = api.post(JOBS, job_body(), format="json", **headers)
    again = api.post(JOBS, job_body(), format="json", **headers)
    assert again["Idempotent-Replayed"] == "true"
    assert again["Location"] == first["Location"] == f"{JOBS}{first.json()['id']}/"
    assert_dst_warnings(again.json()["warnings"])


def test_a_bulk_create_answers_each_job_s_warnings_and_no_location(api):
    items = [job_body("a"), job_body("b", **SAFE), job_body("c")]
    answer = api.post(JOBS, items, format="json")
    assert answer.status_code == 201
    assert "Location" not in answer
    first, second, third = answer.json()
    assert_dst_warnings(first["warnings"])
    assert second["warnings"] == []
    assert third["warnings"] == first["warnings"]


@pytest.mark.parametrize("method", ["put", "patch"])
def test_an_update_answers_the_saved_schedule_s_warnings(api, owner, method):
    job = make_job(owner, name="nightly", url=PUBLIC_URL, **SAFE)
    url = f"{JOBS}{job.pk}/"
    risky = getattr(api, method)(url, job_body(), format="json")
    assert risky.status_code == 200
    assert_dst_warnings(risky.json()["warnings"])
    # A save that leaves the schedule alone still says what the schedule does.
    renamed = api.patch(url, {"name": "renamed"}, format="json")
    assert_dst_warnings(renamed.json()["warnings"])
    safe = getattr(api, method)(url, job_body(**SAFE), format="json")
    assert safe.status_code == 200 and safe.json()["warnings"] == []


def test_both_previews_answer_the_warnings(api, owner):
    job = make_job(owner, url=PUBLIC_URL, **RISKY)
    assert_dst_warnings(api.get(f"{JOBS}{job.pk}/preview/").json()["warnings"])
    adhoc = api.post("/api/v1/schedules/preview/", RISKY, format="json").json()
    assert_dst_warnings(adhoc["warnings"])
    safe = make_job(owner, url=PUBLIC_URL, **SAFE)
    assert api.get(f"{JOBS}{safe.pk}/preview/").json()["warnings"] == []

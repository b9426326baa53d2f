"""``POST /api/v1/jobs/{id}/test/``: the admin's "Send test delivery" through the
API (docs/reference/api.md; docs/concepts/pause-and-resume.md "Run it now, while
paused"): the same verb, the same limit, the trigger's answer."""

from __future__ import annotations

import pytest

from core.db import db_now
from jobs.models import Job, JobEvent, JobState, OwnerLimits
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
CLAIM = "/api/v1/runs/claim/"


def send_test(api, job: Job, **headers):
    return api.post(f"{JOBS}{job.pk}/test/", **headers)


def test_a_test_delivery_answers_its_run_as_a_trigger_does(api, owner):
    job = make_job(owner)
    before = db_now()
    answer = send_test(api, job)
    assert answer.status_code == 201, answer.json()
    run = Run.objects.get(pk=answer.json()["id"])
    assert (run.kind, run.state, run.max_attempts, run.job_id) == ("test", "pending", 1, job.pk)
    assert before <= run.scheduled_at <= db_now()
    triggered = api.post(f"{JOBS}{job.pk}/trigger/").json()
    assert set(answer.json()) == set(triggered)
    event = JobEvent.objects.get(job=job, action="test_delivery")
    assert (event.channel, event.changes) == ("api", {"run": str(run.pk)})


def test_a_paused_pull_job_s_test_delivery_is_claimed_at_once_and_the_job_stays_paused(api, owner):
    job = make_job(owner, target_kind="pull", url="")
    assert api.post(f"{JOBS}{job.pk}/pause/", {}, format="json").status_code == 200
    sent = send_test(api, job).json()
    claimed = api.post(CLAIM, {"worker": "w1", "limit": 10}, format="json").json()
    assert [(c["id"], c["kind"]) for c in claimed] == [(sent["id"], "test")]
    job.refresh_from_db()
    assert job.state == JobState.PAUSED


def test_another_owner_s_job_is_404_and_makes_nothing(other_api, owner):
    job = make_job(owner)
    answer = send_test(other_api, job)
    assert answer.status_code == 404
    assert not Run.objects.filter(job=job).exists()


def test_a_deleted_job_is_404(api, owner):
    job = make_job(owner)
    job_verbs.soft_delete(job)
    assert send_test(api, job).status_code == 404


def test_past_triggers_per_minute_is_429_shared_with_triggers_and_makes_nothing(api, owner):
    OwnerLimits.objects.create(owner=owner, triggers_per_minute=2)
    job = make_job(owner)
    assert api.post(f"{JOBS}{job.pk}/trigger/").status_code == 201
    assert send_test(api, job).status_code == 201
    refused = send_test(api, job)
    assert refused.status_code == 429, refused.json()
    assert refused.json()["limit"] == "triggers_per_minute"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert Run.objects.filter(job=job).count() == 2


def test_a_body_is_refused_with_a_400(api, owner):
    job = make_job(owner)
    answer = api.post(f"{JOBS}{job.pk}/test/", {"url": "http://elsewhere/"}, format="json")
    assert answer.status_code == 400
    assert not Run.objects.filter(job=job).exists()


def test_a_repeat_with_its_idempotency_key_answers_the_same_run(api, owner):
    job = make_job(owner)
    first = send_test(api, job, HTTP_IDEMPOTENCY_KEY="t1")
    again = send_test(api, job, HTTP_IDEMPOTENCY_KEY="t1")
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert Run.objects.filter(job=job).count() == 1


def test_the_endpoint_is_in_the_schema(api):
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    paths = schema.json()["paths"]
    assert "post" in paths["/api/v1/jobs/{id}/test/"]

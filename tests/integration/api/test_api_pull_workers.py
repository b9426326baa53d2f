"""Pull workers over the API: claim, heartbeat and complete, with the leases and
fencing of runs/leases.py (in process; the gunicorn test does it over HTTP)."""

from __future__ import annotations

import datetime as dt

import pytest

from core.db import db_now
from runs import job_verbs
from runs.models import Attempt, Run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

CLAIM = "/api/v1/runs/claim/"


def pull_job(owner, **fields):
    return make_job(owner, target_kind="pull", url="", payload={"report": "daily"}, **fields)


def claim(api, worker="w1", **body):
    answer = api.post(CLAIM, {"worker": worker, **body}, format="json")
    assert answer.status_code == 200, answer.json()
    return answer.json()


def expire_lease(run_id):
    Run.objects.filter(pk=run_id).update(lease_until=db_now() - dt.timedelta(seconds=1))


def test_claim_answers_the_run_with_its_payload_and_lease(api, owner):
    job = pull_job(owner)
    run = job_verbs.trigger(job)
    [claimed] = claim(api, lease_seconds=60)
    assert claimed["id"] == str(run.pk) and claimed["job"] == str(job.pk)
    assert (claimed["job_name"], claimed["kind"], claimed["attempt"]) == (job.name, "manual", 1)
    assert claimed["payload"] == {"report": "daily"}
    run.refresh_from_db()
    assert (run.state, run.lease_owner) == ("running", f"pull:{owner.pk}:w1")
    assert claim(api) == []  # taken


def test_claim_takes_only_the_caller_s_own_pull_jobs(api, other_api, owner, other_owner):
    mine = job_verbs.trigger(pull_job(owner))
    job_verbs.trigger(pull_job(other_owner))
    job_verbs.trigger(make_job(owner))  # a webhook job: for the internal workers
    assert [c["id"] for c in claim(api, limit=100)] == [str(mine.pk)]


def test_claim_of_one_job(api, owner, other_owner):
    first, second = pull_job(owner), pull_job(owner)
    job_verbs.trigger(first)
    run = job_verbs.trigger(second)
    assert [c["id"] for c in claim(api, job=str(second.pk), limit=10)] == [str(run.pk)]


def test_claim_of_another_owner_s_job_is_the_same_404_as_no_job(api, other_owner):
    theirs = pull_job(other_owner)
    job_verbs.trigger(theirs)
    answer = api.post(CLAIM, {"worker": "w", "job": str(theirs.pk)}, format="json")
    missing = api.post(CLAIM, {"worker": "w", "job": str(theirs.pk)[:-4] + "0000"}, format="json")
    assert answer.status_code == missing.status_code == 404
    assert answer.json() == missing.json()
    assert Run.objects.get(job=theirs).state == "pending"


def test_claim_of_a_webhook_job_is_a_400(api, owner):
    job = make_job(owner)
    answer = api.post(CLAIM, {"worker": "w", "job": str(job.pk)}, format="json")
    assert answer.status_code == 400 and list(answer.json()) == ["job"]


@pytest.mark.parametrize(
    "body,field",
    [
        ({}, "worker"),
        ({"worker": ""}, "worker"),
        ({"worker": "x" * 101}, "worker"),
        ({"worker": "tab\there"}, "worker"),
        ({"worker": "w", "limit": 0}, "limit"),
        ({"worker": "w", "limit": 101}, "limit"),
        ({"worker": "w", "lease_seconds": 4}, "lease_seconds"),
        ({"worker": "w", "lease_seconds": 3601}, "lease_seconds"),
        ({"worker": "w", "job": "not-a-uuid"}, "job"),
    ],
)
def test_bad_claims_are_400(api, body, field):
    answer = api.post(CLAIM, body, format="json")
    assert answer.status_code == 400 and field in answer.json()


def test_heartbeat_extends_the_lease(api, owner):
    run = job_verbs.trigger(pull_job(owner))
    [claimed] = claim(api, lease_seconds=10)
    answer = api.post(
        f"/api/v1/runs/{run.pk}/heartbeat/", {"attempt": 1, "lease_seconds": 20}, format="json"
    )
    assert answer.status_code == 200
    assert answer.json()["lease_until"] > claimed["lease_until"]


def test_a_lost_lease_answers_409_to_heartbeat_and_complete(api, owner):
    run = job_verbs.trigger(pull_job(owner))
    claim(api, worker="w1")
    expire_lease(run.pk)
    [again] = claim(api, worker="w2")
    assert again["attempt"] == 2
    url = f"/api/v1/runs/{run.pk}/"
    assert api.post(f"{url}heartbeat/", {"attempt": 1}, format="json").status_code == 409
    stale = api.post(f"{url}complete/", {"attempt": 1, "status": "succeeded"}, format="json")
    assert stale.status_code == 409 and "detail" in stale.json()
    # Naming the old worker does not help either: owner and attempt must both match.
    assert (
        api.post(
            f"{url}complete/", {"attempt": 2, "status": "succeeded", "worker": "w1"}, format="json"
        ).status_code
        == 409
    )
    done = api.post(f"{url}complete/", {"attempt": 2, "status": "succeeded"}, format="json")
    assert done.status_code == 200 and done.json()["state"] == "succeeded"
    outcomes = list(Attempt.objects.filter(run=run).values_list("number", "outcome", "worker"))
    assert outcomes == [
        (1, "lease_expired", f"pull:{owner.pk}:w1"),
        (2, "succeeded", f"pull:{owner.pk}:w2"),
    ]


def test_a_retryable_failure_with_attempts_left_is_retried_with_backoff(api, owner):
    run = job_verbs.trigger(pull_job(owner, max_attempts=3, retry_backoff_seconds=60))
    claim(api)
    before = db_now()
    answer = api.post(
        f"/api/v1/runs/{run.pk}/complete/",
        {"attempt": 1, "status": "failed", "error": "disk full"},
        format="json",
    ).json()
    assert (answer["state"], answer["last_error"]) == ("retrying", "disk full")
    run.refresh_from_db()
    # Full jitter (runs/retry.py): anywhere in [0, 60 s] from the completion,
    # which may be a moment before the test reads the clock again.
    assert before <= run.available_at <= db_now() + dt.timedelta(seconds=61)


def test_complete_keeps_the_output_as_the_response_and_a_success_has_no_error(api, owner):
    run = job_verbs.trigger(pull_job(owner))
    claim(api)
    url = f"/api/v1/runs/{run.pk}/complete/"
    refused = api.post(url, {"attempt": 1, "status": "succeeded", "error": "x"}, format="json")
    assert refused.status_code == 400 and list(refused.json()) == ["error"]
    assert Run.objects.get(pk=run.pk).state == "running"  # nothing written
    output = "1,204 rows synced; " + "x" * 600
    answer = api.post(url, {"attempt": 1, "status": "succeeded", "response": output}, format="json")
    assert answer.status_code == 200
    body = answer.json()
    assert (body["state"], body["last_error"]) == ("succeeded", "")
    assert body["last_response"] == output[:500]
    assert body["attempts"][0]["response"] == output[:500]
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["last_response"] == output[:500]


def test_a_non_retryable_failure_fails_the_run_at_once(api, owner):
    run = job_verbs.trigger(pull_job(owner, max_attempts=5))
    claim(api)
    answer = api.post(
        f"/api/v1/runs/{run.pk}/complete/",
        {"attempt": 1, "status": "failed", "retryable": False},
        format="json",
    ).json()
    assert (answer["state"], answer["reason"]) == ("failed", "permanent error")
    assert answer["attempts"][0]["outcome"] == "permanent"


def test_the_last_attempt_failing_fails_the_run_and_counts_toward_auto_pause(api, owner):
    job = pull_job(owner, max_attempts=1, pause_after_failures=1)
    run = job_verbs.trigger(job)
    claim(api)
    answer = api.post(
        f"/api/v1/runs/{run.pk}/complete/", {"attempt": 1, "status": "failed"}, format="json"
    ).json()
    assert (answer["state"], answer["reason"]) == ("failed", "attempts exhausted")
    job.refresh_from_db()
    assert job.state == "paused" and "consecutive failed runs" in job.pause_note


def test_another_owner_s_worker_cannot_heartbeat_or_complete(api, other_api, owner):
    run = job_verbs.trigger(pull_job(owner))
    claim(api, worker="shared-name")
    for action, body in (
        ("heartbeat", {"attempt": 1, "worker": "shared-name"}),
        ("complete", {"attempt": 1, "status": "failed", "worker": "shared-name"}),
    ):
        answer = other_api.post(f"/api/v1/runs/{run.pk}/{action}/", body, format="json")
        assert answer.status_code == 404
    run.refresh_from_db()
    assert (run.state, run.attempt) == ("running", 1)


def _lease_case(run_id, case, api):
    """Put w1's lease on ``run_id`` into one of the states of the lease rule."""
    past = db_now() - dt.timedelta(seconds=1)
    if case == "expired_not_taken_over":
        Run.objects.filter(pk=run_id).update(lease_until=past)
    elif case == "taken_over":
        Run.objects.filter(pk=run_id).update(lease_until=past)
        [again] = claim(api, worker="w2")
        assert again["attempt"] == 2
    elif case == "deadline_passed":
        Run.objects.filter(pk=run_id).update(lease_until=past, deadline_at=past)


@pytest.mark.parametrize("verb", ["heartbeat", "complete"])
@pytest.mark.parametrize(
    "case,held",
    [
        ("live", True),
        ("expired_not_taken_over", True),
        ("taken_over", False),
        ("deadline_passed", False),
    ],
)
def test_heartbeat_and_complete_answer_by_one_lease_rule(api, owner, case, held, verb):
    # docs/guides/pull-worker.md "The protocol": an expired lease nobody took
    # over is still the holder's; a takeover or the attempt deadline ends it (409).
    run = job_verbs.trigger(pull_job(owner))
    claim(api, worker="w1", lease_seconds=30)
    _lease_case(run.pk, case, api)
    body = {"attempt": 1, "worker": "w1"}
    if verb == "complete":
        body["status"] = "succeeded"
    answer = api.post(f"/api/v1/runs/{run.pk}/{verb}/", body, format="json")
    assert answer.status_code == (200 if held else 409), answer.json()

"""The delivery engine in-process (``Worker.run_once``) against the real
loopback receiver."""

from __future__ import annotations

import pytest
from django.test import override_settings

from dispatch.worker import Worker
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job


@pytest.mark.django_db
@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True)
def test_run_once_delivers_retries_and_fails_by_status(owner, receiver_url):
    ok = job_verbs.trigger(make_job(owner, url=receiver_url("ok")))
    flaky = job_verbs.trigger(make_job(owner, url=receiver_url("status/503"), max_attempts=2))
    bad = job_verbs.trigger(make_job(owner, url=receiver_url("status/404")))
    assert Worker(concurrency=10, lease_seconds=5).run_once() == 3

    ok, flaky, bad = (Run.objects.get(pk=r.pk) for r in (ok, flaky, bad))
    assert (ok.state, ok.attempt, ok.last_status_code) == ("succeeded", 1, 200)
    assert (flaky.state, flaky.last_status_code) == ("retrying", 503)
    assert flaky.available_at > flaky.started_at
    assert (bad.state, bad.reason) == ("failed", "permanent error")
    assert list(ok.attempts.values_list("number", "outcome", "status_code")) == [
        (1, "succeeded", 200)
    ]


@pytest.mark.django_db
@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True)
def test_the_receiver_s_answer_is_kept_as_the_response_and_a_success_has_no_error(
    owner, receiver_url
):
    ok = job_verbs.trigger(make_job(owner, url=receiver_url("ok")))
    flaky = job_verbs.trigger(make_job(owner, url=receiver_url("status/503"), max_attempts=2))
    assert Worker(concurrency=10, lease_seconds=5).run_once() == 2

    ok, flaky = (Run.objects.get(pk=r.pk) for r in (ok, flaky))
    assert (ok.state, ok.last_error, ok.last_response) == ("succeeded", "", "ok")
    assert list(ok.attempts.values_list("error", "response")) == [("", "ok")]
    # A failure keeps both: what went wrong, and what the receiver said.
    assert (flaky.state, flaky.last_response) == ("retrying", "status")
    assert "503" in flaky.last_error
    assert list(flaky.attempts.values_list("response", flat=True)) == ["status"]


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True)
def test_a_failing_test_delivery_makes_one_attempt_and_leaves_the_failure_streak(
    owner, receiver_url
):
    job = make_job(owner, url=receiver_url("status/503"), max_attempts=5, pause_after_failures=1)
    test = job_verbs.send_test_delivery(job, actor=owner)
    assert Worker(concurrency=10, lease_seconds=5).run_once() == 1
    test.refresh_from_db()
    # One attempt: failed at once, not retrying with four attempts left.
    assert (test.kind, test.state, test.attempt, test.last_status_code) == (
        "test",
        "failed",
        1,
        503,
    )
    job.refresh_from_db()
    assert (job.state, job.consecutive_failures, job.pause_note) == ("active", 0, "")

    # The same failure from a manual run counts, and pauses the job: the kind
    # is what kept the test delivery out of the streak.
    job.max_attempts = 1
    job.save(update_fields=["max_attempts"])
    manual = job_verbs.trigger(job)
    assert Worker(concurrency=10, lease_seconds=5).run_once() == 1
    manual.refresh_from_db()
    job.refresh_from_db()
    assert manual.state == "failed"
    assert (job.state, job.paused_by, job.consecutive_failures) == ("paused", "system", 1)

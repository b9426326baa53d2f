"""``wait_seconds`` on the pull claim (api/claim_waits.py), in process: bad
values, the empty answer when the wait ends, a run triggered during the wait,
and the cap on waiting claims. The wake-up by a real dispatcher, over HTTP, is
tests/processes/test_pull_claim_wait.py."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from api import claim_waits
from runs import job_verbs
from runs.models import Attempt, Run
from tests.factories import make_job
from tests.polling import wait_until

CLAIM = "/api/v1/runs/claim/"


@pytest.fixture(autouse=True)
def _close_the_listener():
    """Its connection would outlive the test database."""
    yield
    claim_waits.LISTENER.stop()


def pull_job(owner, **fields):
    return make_job(owner, target_kind="pull", url="", **fields)


@pytest.mark.django_db
@pytest.mark.parametrize("wait", [-1, 31, "x", "5", 2.5, True, None])
def test_a_bad_wait_is_a_400_naming_it_and_claims_nothing(api, owner, wait):
    run = job_verbs.trigger(pull_job(owner))
    answer = api.post(CLAIM, {"worker": "w1", "wait_seconds": wait}, format="json")
    assert answer.status_code == 400, answer.json()
    assert list(answer.json()) == ["wait_seconds"]
    run.refresh_from_db()
    assert (run.state, run.attempt, run.lease_owner) == ("pending", 0, "")
    assert not Attempt.objects.exists()


@pytest.mark.django_db
def test_a_waiting_claim_that_finds_nothing_answers_empty_when_the_wait_ends(api, owner):
    pull_job(owner, interval_seconds=3600)
    started = time.monotonic()
    answer = api.post(CLAIM, {"worker": "w1", "wait_seconds": 1}, format="json")
    assert (answer.status_code, answer.json()) == (200, [])
    assert time.monotonic() - started >= 1
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_claim_that_finds_a_run_does_not_wait(api, owner):
    run = job_verbs.trigger(pull_job(owner))
    answer = api.post(CLAIM, {"worker": "w1", "wait_seconds": 30}, format="json")
    assert [c["id"] for c in answer.json()] == [str(run.pk)]
    assert not claim_waits.LISTENER._waiting


@pytest.mark.django_db(transaction=True)
def test_a_run_triggered_during_the_wait_is_answered_and_no_transaction_is_held(api, owner):
    job = pull_job(owner)
    answers = []
    in_transaction = []
    real_poll = claim_waits.LISTENER.poll_seconds

    def poll_seconds():
        # Between two claims of the waiting request, on its own thread.
        in_transaction.append(connection.in_atomic_block)
        return real_poll()

    claim_waits.LISTENER.poll_seconds = poll_seconds
    try:

        def wait() -> None:
            try:
                answers.append(api.post(CLAIM, {"worker": "w1", "wait_seconds": 30}, format="json"))
            finally:
                connection.close()

        waiting = threading.Thread(target=wait)
        waiting.start()
        wait_until(lambda: claim_waits.LISTENER.listening and in_transaction, message="the wait")
        run = job_verbs.trigger(job)
        waiting.join(timeout=60)
    finally:
        del claim_waits.LISTENER.poll_seconds
    [answer] = answers
    assert [c["id"] for c in answer.json()] == [str(run.pk)]
    assert in_transaction and not any(in_transaction)
    run.refresh_from_db()
    assert run.state == "running"


@pytest.mark.django_db
def test_past_the_cap_a_claim_that_finds_nothing_is_a_429_and_one_that_finds_a_run_answers_it(
    api, owner, settings
):
    settings.PUNCTUAL_CLAIM_WAITERS = 0
    job = pull_job(owner)
    refused = api.post(CLAIM, {"worker": "w1", "wait_seconds": 5}, format="json")
    assert refused.status_code == 429
    assert refused["Retry-After"] == str(claim_waits.RETRY_AFTER)
    run = job_verbs.trigger(job)
    answer = api.post(CLAIM, {"worker": "w1", "wait_seconds": 5}, format="json")
    assert [c["id"] for c in answer.json()] == [str(run.pk)]

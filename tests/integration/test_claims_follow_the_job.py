"""Claims follow the job as it is now: no attempt of a paused or deleted job's
run starts (but a manual run or test delivery made during the pause:
test_run_it_now_while_paused.py), and the overlap rule is the job's current policy
(docs/concepts/pause-and-resume.md "Pause and delete";
docs/concepts/misfire-and-overlap.md "A changed overlap policy"). The races are
in test_pause_races.py."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs.models import Job
from runs import job_verbs, leases, outcomes
from runs.models import Run
from tests.factories import at, make_job

pytestmark = pytest.mark.django_db

T0 = at("2026-06-01T12:00:00")
S = dt.timedelta(seconds=1)
STOP_VERBS = {"pause": "paused", "soft_delete": "deleted"}


def waiting_run(job: Job, when: dt.datetime = T0, **fields) -> Run:
    fields.setdefault("max_attempts", job.max_attempts)
    fields.setdefault("exclusive", job.overlap_policy != "allow")
    return Run.objects.create(
        job=job, scheduled_at=when, available_at=when, target_kind=job.target_kind, **fields
    )


def stop(verb: str, job: Job) -> None:
    getattr(job_verbs, verb)(Job.objects.get(pk=job.pk))


@pytest.mark.parametrize("max_attempts", [3, 1])
@pytest.mark.parametrize("verb", list(STOP_VERBS))
def test_a_stopped_job_s_run_whose_worker_died_is_cancelled_not_redelivered(
    owner, verb, max_attempts
):
    run = waiting_run(make_job(owner, max_attempts=max_attempts))
    leases.claim("dead", limit=1, lease_seconds=5, now=T0)
    stop(verb, run.job)  # the run is running: it is left to finish its attempt

    # The worker died: its lease expired. Nobody takes the run over.
    assert leases.claim("w2", limit=10, lease_seconds=5, now=T0 + 6 * S) == []
    assert outcomes.fail_exhausted(now=T0 + 6 * S) == 0
    assert outcomes.cancel_stopped(now=T0 + 6 * S) == 1

    run.refresh_from_db()
    assert (run.state, run.reason, run.attempt) == ("cancelled", STOP_VERBS[verb], 1)
    assert (run.lease_owner, run.lease_until, run.finished_at) == ("", None, T0 + 6 * S)
    assert list(run.attempts.values_list("number", "outcome", "worker")) == [
        (1, "interrupted", "dead")
    ]
    assert leases.claim("w2", limit=10, lease_seconds=5, now=T0 + 60 * S) == []


def test_a_stopped_job_s_live_lease_is_left_to_finish_its_attempt(owner):
    run = waiting_run(make_job(owner))
    leases.claim("w1", limit=1, lease_seconds=5, now=T0)
    stop("pause", run.job)
    assert outcomes.cancel_stopped(now=T0 + 4 * S) == 0
    run.refresh_from_db()
    assert (run.state, run.lease_owner) == ("running", "w1")
    # Its retry is cancelled when it reports back.
    failed = outcomes.Result(
        run_id=run.pk, job_id=run.job_id, attempt=1, state="retrying", retry_in=0
    )
    assert outcomes.complete("w1", [failed], now=T0 + 4 * S).applied == [run.pk]
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", "paused")


@pytest.mark.parametrize("verb", list(STOP_VERBS))
def test_a_retry_left_waiting_on_a_stopped_job_is_never_claimed_and_is_cancelled(owner, verb):
    job = make_job(owner)
    stop(verb, job)
    # A retry written after the pause cancelled the waiting runs (a worker
    # released it at shutdown, or a completion raced an automatic pause).
    run = waiting_run(job, state="retrying", attempt=1)
    assert leases.claim("w1", limit=10, lease_seconds=5, now=T0 + S) == []
    assert outcomes.cancel_stopped(now=T0 + S) == 1
    run.refresh_from_db()
    assert (run.state, run.reason, run.available_at) == ("cancelled", STOP_VERBS[verb], None)
    assert not run.attempts.exists()  # no attempt was in flight


def test_a_run_backfilled_while_paused_starts_once_the_job_is_resumed(owner):
    job = make_job(owner, interval_seconds=60)
    stop("pause", job)
    job_verbs.backfill(Job.objects.get(pk=job.pk), job.created_at, job.created_at + S)
    [run] = Run.objects.filter(job=job)
    later = run.available_at + S
    assert leases.claim("w1", limit=10, lease_seconds=5, now=later) == []
    assert outcomes.cancel_stopped(now=later) == 0  # kept: the owner asked for it
    job_verbs.resume(Job.objects.get(pk=job.pk))
    claimed = leases.claim("w1", limit=10, lease_seconds=5, now=later)
    assert [c.run_id for c in claimed] == [run.pk]


def test_a_run_created_as_its_job_was_deleted_is_cancelled(owner):
    job = make_job(owner)
    stop("soft_delete", job)
    run = waiting_run(job)
    assert leases.claim("w1", limit=10, lease_seconds=5, now=T0 + S) == []
    assert outcomes.cancel_stopped(now=T0 + S) == 1
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", "deleted")


@pytest.mark.parametrize("policy", ["skip", "queue"])
def test_a_change_to_skip_or_queue_holds_back_runs_made_under_allow(owner, policy):
    job = make_job(owner, overlap_policy="allow")
    first = waiting_run(job, T0)
    second = waiting_run(job, T0 + S)
    assert not first.exclusive and not second.exclusive
    [c] = leases.claim("w1", limit=1, lease_seconds=30, now=T0 + 2 * S)
    assert c.run_id == first.pk
    Job.objects.filter(pk=job.pk).update(overlap_policy=policy)

    assert leases.claim("w2", limit=10, lease_seconds=30, now=T0 + 3 * S) == []
    outcomes.complete("w1", [outcomes.Result(first.pk, job.pk, 1, "succeeded")], now=T0 + 4 * S)
    [c] = leases.claim("w2", limit=10, lease_seconds=30, now=T0 + 5 * S)
    assert c.run_id == second.pk


def test_a_change_to_allow_lets_new_runs_start_side_by_side_without_breaking_the_index(owner):
    job = make_job(owner, overlap_policy="queue")
    queued = waiting_run(job, T0)
    behind = waiting_run(job, T0 + S)  # made under queue: flagged exclusive
    leases.claim("w1", limit=1, lease_seconds=30, now=T0 + 2 * S)
    Job.objects.filter(pk=job.pk).update(overlap_policy="allow")
    fresh = waiting_run(job, T0 + 2 * S, exclusive=False)  # made under allow

    # The run made under allow starts beside the running one; the one made
    # under queue waits for it, as the unique index of exclusive runs requires.
    claimed = leases.claim("w2", limit=10, lease_seconds=30, now=T0 + 3 * S)
    assert [c.run_id for c in claimed] == [fresh.pk]
    outcomes.complete("w1", [outcomes.Result(queued.pk, job.pk, 1, "succeeded")], now=T0 + 4 * S)
    claimed = leases.claim("w2", limit=10, lease_seconds=30, now=T0 + 5 * S)
    assert [c.run_id for c in claimed] == [behind.pk]

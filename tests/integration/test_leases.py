"""Claim, heartbeat, complete and release: leases and fencing (docs/design/guarantees.md,
guarantees 1 to 4)."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs.models import Job
from runs import job_verbs, leases, outcomes
from runs.after_attempt import GONE_NOTE
from runs.models import Attempt, Run
from tests.factories import at, make_job

pytestmark = pytest.mark.django_db

T0 = at("2026-06-01T12:00:00")
S = dt.timedelta(seconds=1)


def pending_run(job: Job, when: dt.datetime = T0, **fields) -> Run:
    fields.setdefault("max_attempts", job.max_attempts)
    return Run.objects.create(
        job=job,
        scheduled_at=when,
        available_at=when,
        target_kind=job.target_kind,
        exclusive=job.overlap_policy != "allow",
        **fields,
    )


def result(run: Run, attempt: int, state: str = "succeeded", **kw) -> outcomes.Result:
    return outcomes.Result(run_id=run.pk, job_id=run.job_id, attempt=attempt, state=state, **kw)


def test_claim_takes_a_due_run_with_a_lease_and_counts_the_attempt(owner):
    run = pending_run(make_job(owner, timeout_seconds=30))
    [c] = leases.claim("w1", limit=10, lease_seconds=10, now=T0 + S)
    assert (c.run_id, c.attempt, c.lease_until) == (run.pk, 1, T0 + 11 * S)
    run.refresh_from_db()
    assert (run.state, run.lease_owner, run.attempt) == ("running", "w1", 1)
    assert run.deadline_at == T0 + S + dt.timedelta(seconds=30 + leases.DEADLINE_GRACE_SECONDS)
    assert run.lag_seconds == pytest.approx(1.0)
    assert leases.claim("w2", limit=10, lease_seconds=10, now=T0 + 2 * S) == []


def test_runs_not_yet_available_are_not_claimed(owner):
    pending_run(make_job(owner), when=T0 + 60 * S)
    assert leases.claim("w1", limit=10, lease_seconds=10, now=T0) == []


def test_heartbeat_extends_the_lease_but_never_past_the_deadline(owner):
    run = pending_run(make_job(owner, timeout_seconds=5))
    leases.claim("w1", limit=1, lease_seconds=4, now=T0)
    kept = leases.heartbeat("w1", [(run.pk, 1)], now=T0 + 3 * S)
    assert kept == {run.pk: T0 + 7 * S}
    deadline = T0 + (5 + leases.DEADLINE_GRACE_SECONDS) * S
    kept = leases.heartbeat("w1", [(run.pk, 1)], now=T0 + 6 * S)
    assert kept == {run.pk: deadline}
    assert leases.heartbeat("w2", [(run.pk, 1)], now=T0 + 6 * S) == {}


def test_expired_lease_is_taken_over_and_the_stale_completion_changes_nothing(owner):
    run = pending_run(make_job(owner))
    leases.claim("zombie", limit=1, lease_seconds=5, now=T0)
    # The zombie stops heartbeating; after its lease expires, w2 takes over.
    [c] = leases.claim("w2", limit=1, lease_seconds=5, now=T0 + 6 * S)
    assert (c.run_id, c.attempt) == (run.pk, 2)
    lost = Attempt.objects.get(run=run, number=1)
    assert (lost.outcome, lost.worker) == ("lease_expired", "zombie")

    done = outcomes.complete("zombie", [result(run, 1, "failed")], now=T0 + 7 * S)
    assert (done.applied, done.stale) == ([], [run.pk])
    run.refresh_from_db()
    assert (run.state, run.lease_owner, run.attempt) == ("running", "w2", 2)
    assert leases.heartbeat("zombie", [(run.pk, 1)], now=T0 + 7 * S) == {}

    done = outcomes.complete("w2", [result(run, 2, status_code=200)], now=T0 + 8 * S)
    assert done.applied == [run.pk]
    run.refresh_from_db()
    assert (run.state, run.attempt, run.finished_at) == ("succeeded", 2, T0 + 8 * S)
    assert list(run.attempts.values_list("number", "outcome")) == [
        (1, "lease_expired"),
        (2, "succeeded"),
    ]


def test_a_claim_told_not_to_look_for_expired_leases_leaves_them_for_the_next(owner):
    """A worker looks for expired leases once a second (EXPIRED_EVERY), not in
    every claim: a claim without the look takes only waiting runs."""
    lost = pending_run(make_job(owner))
    leases.claim("zombie", limit=1, lease_seconds=5, now=T0)
    waiting = pending_run(make_job(owner), when=T0 + 5 * S)
    taken = leases.claim("w2", limit=10, lease_seconds=5, now=T0 + 6 * S, expired=False)
    assert [(c.run_id, c.attempt) for c in taken] == [(waiting.pk, 1)]
    [c] = leases.claim("w2", limit=10, lease_seconds=5, now=T0 + 6 * S)
    assert (c.run_id, c.attempt) == (lost.pk, 2)


def test_retrying_run_becomes_claimable_after_its_backoff(owner):
    run = pending_run(make_job(owner))
    leases.claim("w1", limit=1, lease_seconds=5, now=T0)
    outcomes.complete("w1", [result(run, 1, "retrying", retry_in=30, status_code=500)], now=T0 + S)
    run.refresh_from_db()
    assert (run.state, run.available_at, run.last_status_code) == ("retrying", T0 + 31 * S, 500)
    assert leases.claim("w1", limit=1, lease_seconds=5, now=T0 + 30 * S) == []
    [c] = leases.claim("w1", limit=1, lease_seconds=5, now=T0 + 31 * S)
    assert c.attempt == 2


def test_last_attempt_losing_its_lease_fails_the_run_with_a_reason(owner):
    run = pending_run(make_job(owner, max_attempts=1))
    leases.claim("w1", limit=1, lease_seconds=5, now=T0)
    assert leases.claim("w2", limit=1, lease_seconds=5, now=T0 + 10 * S) == []
    assert outcomes.fail_exhausted(now=T0 + 10 * S) == 1
    run.refresh_from_db()
    assert (run.state, run.reason) == ("failed", "lease expired on the last attempt")


def test_fail_exhausted_leaves_live_leases_and_runs_with_attempts_left(owner):
    last = pending_run(make_job(owner, max_attempts=1))
    more = pending_run(make_job(owner, max_attempts=2))
    leases.claim("w1", limit=2, lease_seconds=5, now=T0)
    assert outcomes.fail_exhausted(now=T0 + 4 * S) == 0  # both leases still live
    assert outcomes.fail_exhausted(now=T0 + 10 * S) == 1
    last.refresh_from_db(), more.refresh_from_db()
    assert (last.state, more.state) == ("failed", "running")
    assert list(last.attempts.values_list("number", "outcome")) == [(1, "lease_expired")]


# docs/design/guarantees.md "Fencing": one lease rule for heartbeat and
# completion. The run is claimed by w1 at T0 with a 5 s lease and a 30 s
# timeout (deadline T0 + 35 s); each case is the moment w1 answers.
LEASE_CASES = {
    "live": (2, True),
    "expired_not_taken_over": (6, True),
    "taken_over": (6, False),
    "deadline_passed": (36, False),
}


@pytest.mark.parametrize("verb", ["heartbeat", "complete"])
@pytest.mark.parametrize("case", list(LEASE_CASES))
def test_heartbeat_and_complete_follow_one_lease_rule(owner, case, verb):
    run = pending_run(make_job(owner, timeout_seconds=30))
    leases.claim("w1", limit=1, lease_seconds=5, now=T0)
    seconds, held = LEASE_CASES[case]
    now = T0 + seconds * S
    c = None
    if case == "taken_over":
        [c] = leases.claim("w2", limit=1, lease_seconds=5, now=now)
        assert c.attempt == 2
    if verb == "heartbeat":
        kept = leases.heartbeat("w1", [(run.pk, 1)], now=now)
        assert (run.pk in kept) is held
    else:
        done = outcomes.complete("w1", [result(run, 1)], now=now)
        assert (done.applied == [run.pk]) is held
    run.refresh_from_db()
    if held and verb == "complete":
        assert (run.state, run.lease_owner) == ("succeeded", "")
    elif held:
        # A revived lease is the holder's again: no claim takes it meanwhile.
        assert run.lease_until == now + 5 * S
        assert leases.claim("w2", limit=1, lease_seconds=5, now=now) == []
    else:
        assert run.state == "running" and run.lease_owner == ("w2" if c else "w1")
        assert run.attempt == (2 if c else 1)


@pytest.mark.parametrize("policy", ["skip", "queue"])
def test_exclusive_jobs_run_one_at_a_time_oldest_first(owner, policy):
    job = make_job(owner, overlap_policy=policy)
    first, second = pending_run(job, T0), pending_run(job, T0 + S)
    claimed = leases.claim("w1", limit=10, lease_seconds=5, now=T0 + 2 * S)
    assert [c.run_id for c in claimed] == [first.pk]
    outcomes.complete("w1", [result(first, 1)], now=T0 + 3 * S)
    claimed = leases.claim("w1", limit=10, lease_seconds=5, now=T0 + 3 * S)
    assert [c.run_id for c in claimed] == [second.pk]


def test_allow_policy_runs_side_by_side(owner):
    job = make_job(owner, overlap_policy="allow")
    pending_run(job, T0), pending_run(job, T0 + S)
    assert len(leases.claim("w1", limit=10, lease_seconds=5, now=T0 + 2 * S)) == 2


def test_a_retry_of_a_paused_job_is_cancelled_not_rescheduled(owner):
    job = make_job(owner)
    run = pending_run(job)
    leases.claim("w1", limit=1, lease_seconds=5, now=T0)
    job_verbs.pause(job, note="stop")
    run.refresh_from_db()
    assert run.state == "running"  # the running attempt is left to finish
    outcomes.complete("w1", [result(run, 1, "retrying", retry_in=5)], now=T0 + S)
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", "paused")


def test_release_gives_the_run_back_without_using_an_attempt(owner):
    run = pending_run(make_job(owner, max_attempts=1))
    leases.claim("w1", limit=1, lease_seconds=5, now=T0)
    assert leases.release("someone-else", [(run.pk, 1)], now=T0 + S) == 0
    assert leases.release("w1", [(run.pk, 1)], now=T0 + S) == 1
    [c] = leases.claim("w2", limit=1, lease_seconds=5, now=T0 + S)
    assert (c.attempt, c.max_attempts) == (2, 2)
    lost = Attempt.objects.get(run=run, number=1)
    assert (lost.outcome, lost.worker) == ("interrupted", "w1")


def test_failure_streak_pauses_the_job_after_pause_after_failures(owner):
    job = make_job(owner, pause_after_failures=2, overlap_policy="allow")
    runs = [pending_run(job, T0 + k * S) for k in range(2)]
    leases.claim("w1", limit=2, lease_seconds=5, now=T0 + 5 * S)
    done = outcomes.complete(
        "w1", [result(r, 1, "failed", reason="permanent error") for r in runs], now=T0 + 6 * S
    )
    assert [job_id for job_id, _ in done.pauses] == [job.pk]  # in the same transaction
    job.refresh_from_db()
    assert (job.state, job.consecutive_failures) == ("paused", 2)
    assert "2 consecutive failed runs" in job.pause_note


def test_gone_pauses_the_job_with_a_note(owner):
    job = make_job(owner)
    run = pending_run(job)
    leases.claim("w1", limit=1, lease_seconds=5, now=T0)
    done = outcomes.complete("w1", [result(run, 1, "failed", pause_note=GONE_NOTE)], now=T0 + S)
    assert done.pauses == [(job.pk, GONE_NOTE)]
    job.refresh_from_db()
    assert job.state == "paused" and "410 Gone" in job.pause_note


def test_pull_claims_only_the_callers_own_pull_jobs(owner, other_owner):
    mine = make_job(owner, target_kind="pull", url="")
    theirs = make_job(other_owner, target_kind="pull", url="")
    webhook = make_job(owner)
    for j in (mine, theirs, webhook):
        pending_run(j)
    claimed = leases.claim(
        "p1", limit=10, lease_seconds=5, target_kind="pull", job_owner_id=owner.pk, now=T0
    )
    assert [c.job_id for c in claimed] == [mine.pk]


def test_test_deliveries_neither_add_to_nor_reset_the_failure_streak(owner):
    job = make_job(owner, pause_after_failures=3, overlap_policy="allow")
    Job.objects.filter(pk=job.pk).update(consecutive_failures=2)
    failing, passing, lost = (
        pending_run(job, T0 + k * S, kind="test", max_attempts=1) for k in range(3)
    )
    leases.claim("w1", limit=3, lease_seconds=5, now=T0 + 5 * S)
    done = outcomes.complete(
        "w1",
        [result(failing, 1, "failed", reason="permanent error"), result(passing, 1)],
        now=T0 + 6 * S,
    )
    assert done.pauses == []
    # The third one's only attempt loses its lease: failed by the housekeeping.
    assert outcomes.fail_exhausted(now=T0 + 20 * S) == 1
    job.refresh_from_db()
    assert (job.state, job.consecutive_failures) == ("active", 2)
    assert Run.objects.get(pk=lost.pk).state == "failed"


def test_a_test_delivery_answered_410_gone_still_pauses_the_job(owner):
    job = make_job(owner)
    run = pending_run(job, kind="test", max_attempts=1)
    leases.claim("w1", limit=1, lease_seconds=5, now=T0)
    done = outcomes.complete("w1", [result(run, 1, "failed", pause_note=GONE_NOTE)], now=T0 + S)
    assert done.pauses == [(job.pk, GONE_NOTE)]
    job.refresh_from_db()
    assert (job.state, job.paused_by, job.consecutive_failures) == ("paused", "system", 0)

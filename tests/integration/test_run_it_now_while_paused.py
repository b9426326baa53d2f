"""A manual run or a test delivery made while its job is paused starts at
once; the paused job's scheduled, catch-up and backfill runs do not
(docs/concepts/pause-and-resume.md "Run it now, while paused"; the rule is
runs/leases.py RUN_MAY_START). The worker's claim, the pull API's claim, the
completion, the dispatcher's housekeeping, the health figures and the
auditor all follow the one rule."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from dispatch.models import ProcessHeartbeat
from jobs.models import Job, JobState, ScheduleSpan
from ops import health
from ops.audit import Rule, audit
from runs import job_verbs, leases, outcomes
from runs.models import Run, RunKind
from tests.factories import make_job

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
HAND_MADE = {"trigger": RunKind.MANUAL, "send_test_delivery": RunKind.TEST}


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def paused_job(owner, **fields) -> Job:
    job = make_job(owner, **fields)
    job_verbs.pause(fresh(job), note="on hold")
    return fresh(job)


def by_hand(verb: str, job: Job) -> Run:
    return getattr(job_verbs, verb)(fresh(job))


def claim(target: str = "webhook", owner=None, **kwargs) -> list[leases.Claimed]:
    scope = {"job_owner_id": owner.pk} if target == "pull" else {}
    return leases.claim("w1", limit=10, lease_seconds=30, target_kind=target, **scope, **kwargs)


def failed_attempt(claimed: leases.Claimed) -> outcomes.Result:
    return outcomes.Result(
        run_id=claimed.run_id,
        job_id=claimed.job_id,
        attempt=claimed.attempt,
        state="retrying",
        retry_in=0,
        status_code=500,
        attempt_outcome="failed",
        scheduled_at=claimed.scheduled_at,
    )


@pytest.mark.parametrize("target", ["webhook", "pull"])
@pytest.mark.parametrize("verb", list(HAND_MADE))
def test_a_run_made_by_hand_while_paused_is_claimed_at_once(owner, verb, target):
    job = paused_job(owner, target_kind=target)
    run = by_hand(verb, job)

    assert [(c.run_id, c.kind) for c in claim(target, owner)] == [(run.pk, HAND_MADE[verb])]
    job = fresh(job)
    assert (job.state, job.pause_note, job.next_fire_at) == (JobState.PAUSED, "on hold", None)


def test_scheduled_catch_up_and_backfill_runs_of_a_paused_job_wait_for_the_resume(owner):
    job = make_job(owner, interval_seconds=60, overlap_policy="allow")
    job_verbs.pause(fresh(job))
    start = job.created_at
    assert job_verbs.backfill(fresh(job), start, start + dt.timedelta(minutes=3))["created"] == 3
    # A scheduled and a catch-up run left waiting on the paused job (the
    # pause cancels the waiting ones; these stand for any that get there).
    for kind, when in (("scheduled", start - 60 * S), ("catch_up", start - 120 * S)):
        Run.objects.create(
            job=job, kind=kind, scheduled_at=when, available_at=when, exclusive=False
        )
    later = start + dt.timedelta(minutes=10)

    assert claim(now=later) == []
    assert outcomes.cancel_stopped(now=later) == 0  # the backfill is kept for the resume
    assert health.oldest_claimable(now=later) is None
    job_verbs.resume(fresh(job))
    claimed = claim(now=later)
    assert sorted(c.kind for c in claimed) == ["backfill"] * 3 + ["catch_up", "scheduled"]


def test_a_manual_run_made_before_the_pause_is_cancelled_with_it(owner):
    job = make_job(owner)
    run = job_verbs.trigger(fresh(job))
    job_verbs.pause(fresh(job))
    assert claim() == []
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", "paused")


def test_a_manual_run_in_flight_at_the_pause_has_its_retry_cancelled(owner):
    job = make_job(owner)
    job_verbs.trigger(fresh(job))
    [claimed] = claim()
    job_verbs.pause(fresh(job))
    outcomes.complete("w1", [failed_attempt(claimed)])
    run = Run.objects.get(pk=claimed.run_id)
    assert (run.state, run.reason) == ("cancelled", "paused")


def test_a_manual_run_made_while_paused_keeps_its_retries(owner):
    job = paused_job(owner, max_attempts=2)
    run = job_verbs.trigger(fresh(job))
    [first] = claim()
    assert outcomes.complete("w1", [failed_attempt(first)]).applied == [run.pk]
    run.refresh_from_db()
    assert run.state == "retrying"
    assert outcomes.cancel_stopped() == 0
    [second] = claim(now=run.available_at)
    assert (second.run_id, second.attempt) == (run.pk, 2)


def test_a_manual_run_made_while_paused_is_taken_over_when_its_worker_dies(owner):
    job = paused_job(owner, max_attempts=2)
    run = job_verbs.trigger(fresh(job))
    [first] = leases.claim("dead", limit=1, lease_seconds=5)
    later = first.lease_until + S
    assert outcomes.cancel_stopped(now=later) == 0
    [taken] = leases.claim("w2", limit=10, lease_seconds=30, now=later)
    assert (taken.run_id, taken.attempt) == (run.pk, 2)
    assert list(Run.objects.get(pk=run.pk).attempts.values_list("number", "outcome")) == [
        (1, "lease_expired")
    ]


def test_a_manual_run_made_while_paused_fails_when_its_last_attempt_is_lost(owner):
    job = paused_job(owner, max_attempts=1)
    run = job_verbs.trigger(fresh(job))
    [first] = leases.claim("dead", limit=1, lease_seconds=5)
    later = first.lease_until + S
    assert outcomes.fail_exhausted(now=later) == 1
    run.refresh_from_db()
    assert (run.state, run.reason) == ("failed", "lease expired on the last attempt")


@pytest.mark.parametrize("policy", ["skip", "queue"])
def test_a_backfill_waiting_for_the_resume_does_not_hold_back_a_trigger(owner, policy):
    job = paused_job(owner, interval_seconds=60, overlap_policy=policy)
    start = job.created_at
    assert job_verbs.backfill(fresh(job), start, start + dt.timedelta(minutes=2))["created"] == 2
    run = job_verbs.trigger(fresh(job))
    assert [c.run_id for c in claim()] == [run.pk]


def test_a_run_in_flight_still_holds_back_a_trigger_under_skip(owner):
    job = make_job(owner, overlap_policy="skip")
    job_verbs.trigger(fresh(job))
    [running] = claim()
    job_verbs.pause(fresh(job))
    run = job_verbs.trigger(fresh(job))
    assert claim() == []
    outcomes.complete("w1", [outcomes.Result(running.run_id, job.pk, running.attempt, "succeeded")])
    assert [c.run_id for c in claim()] == [run.pk]


def test_a_run_made_while_paused_is_cancelled_by_a_delete(owner):
    job = paused_job(owner)
    run = job_verbs.trigger(fresh(job))
    job_verbs.soft_delete(fresh(job))
    assert claim() == []
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", "deleted")


def test_health_and_the_auditor_count_a_paused_job_s_trigger_as_waiting(owner):
    job = paused_job(owner)
    run = job_verbs.trigger(fresh(job))
    later = run.available_at + 60 * S
    assert health.oldest_claimable(now=later)["run_id"] == run.pk
    ProcessHeartbeat.objects.create(
        name="w-alive",
        kind="worker",
        host="test",
        pid=1,
        started_at=run.available_at - dt.timedelta(hours=1),
        last_seen=later,
    )
    with_worker = audit(run.available_at - 60 * S, job_ids=[job.pk], now=later)
    assert [v.rule for v in with_worker.violations] == [Rule.STUCK_WAITING]


def receiver_log(path, runs_and_arrivals) -> str:
    """A loopback receiver log (ops/loopback_receiver.py) of one delivery of
    each run, arriving at the given database time."""
    with open(path, "w") as f:
        for run, arrived in runs_and_arrivals:
            line = {
                "event": "start",
                "t": arrived.timestamp(),
                "webhook_id": str(run.pk),
                "run_id": str(run.pk),
                "job_id": str(run.job_id),
                "attempt": 1,
                "scheduled_at": run.scheduled_at.isoformat(),
            }
            f.write(json.dumps(line) + "\n")
    return str(path)


def test_the_auditor_accepts_a_delivery_made_during_the_pause_and_flags_one_made_before(
    owner, tmp_path
):
    job = make_job(owner)
    before = job_verbs.trigger(fresh(job))  # cancelled by the pause
    job_verbs.pause(fresh(job))
    during = job_verbs.trigger(fresh(job))
    # A schedule edit while paused opens a new paused span: the pause goes on.
    job_verbs.edit(fresh(job), {"interval_seconds": 120})
    spans = ScheduleSpan.objects.filter(job=job, state="paused").order_by("started_at")
    assert len(spans) == 2
    late = spans[1].started_at + 60 * S
    log = receiver_log(tmp_path / "r.jsonl", [(during, late)])
    assert audit(job_ids=[job.pk], receiver_log=log).ok

    log = receiver_log(tmp_path / "r2.jsonl", [(during, late), (before, late)])
    report = audit(job_ids=[job.pk], receiver_log=log)
    assert [(v.rule, str(v.run_id)) for v in report.violations] == [
        (Rule.DELIVERED_AFTER_PAUSE, str(before.pk))
    ]

"""Parked jobs (docs/concepts/misfire-and-overlap.md "Parked while its run is
active"), on a real database: the dispatcher's fast path, when it finds
several fires of an interval job under overlap ``skip`` due at once (it is
behind) while the job's run is still active, parks the job, with one skipped
row for all the fires it declines, and the end of that run, whichever path
ends it, unparks it in the same transaction. The auditor accounts for every
fire.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection

from dispatch.dispatcher import Dispatcher
from jobs.models import Job, JobState, JobStatus
from ops.audit import audit
from runs import job_verbs, leases, outcomes
from runs.models import Run
from tests.factories import at, make_job, rewrite_job

pytestmark = pytest.mark.django_db

T0 = at("2026-06-01T12:00:00")
S = dt.timedelta(seconds=1)
STEP = 10 * S  # the jobs' interval


def runs_of(job: Job) -> list[Run]:
    return list(Run.objects.filter(job=job).order_by("scheduled_at"))


def ten_second_job(owner, **fields) -> Job:
    """A 10 s job (overlap skip) whose first fire is T0."""
    job = make_job(owner, interval_seconds=10, **fields)
    rewrite_job(job, created_at=T0 - STEP, start_at=None, next_fire_at=T0)
    return job


def fire_then_fall_behind() -> None:
    """The tick that makes the runs of T0, then one that finds the fires of
    T0 + 10 s and T0 + 20 s due at once (the dispatcher is behind): it parks
    every ten_second_job whose run of T0 is still pending, from T0 + 10 s on."""
    Dispatcher().tick(now=T0 + S)
    Dispatcher().tick(now=T0 + 2 * STEP + S)


def parked_job(owner, **fields) -> tuple[Job, Run]:
    """A job whose run of T0 is still pending when the dispatcher, behind,
    finds its fires of T0 + 10 s and T0 + 20 s due: the tick parks it from
    T0 + 10 s on."""
    job = ten_second_job(owner, **fields)
    Dispatcher().tick(now=T0 + S)
    [held] = runs_of(job)
    Dispatcher().tick(now=T0 + 2 * STEP + S)
    job.refresh_from_db()
    held.refresh_from_db()
    return job, held


def claimed_and_completed(job: Job, when: dt.datetime, state: str = "succeeded") -> None:
    """A worker claims the job's waiting run and completes it at ``when``."""
    [c] = leases.claim("w1", limit=10, lease_seconds=60, now=when - S)
    result = outcomes.Result(run_id=c.run_id, job_id=job.pk, attempt=c.attempt, state=state)
    assert outcomes.complete("w1", [result], now=when).applied == [c.run_id]


def test_a_dispatcher_that_keeps_up_skips_each_declined_fire_on_a_row_of_its_own(owner):
    """While the dispatcher keeps up, a fire declined by the active run is a
    skipped row of its own and the job steps on: cheaper than a parking when
    a run declines a fire or two (docs/benchmarks.md, "Overload")."""
    job = ten_second_job(owner)
    for k in range(4):
        Dispatcher().tick(now=T0 + k * STEP + S)
    assert [(r.scheduled_at, r.state, r.fires) for r in runs_of(job)] == [
        (T0, "pending", 1),
        (T0 + STEP, "skipped", 1),
        (T0 + 2 * STEP, "skipped", 1),
        (T0 + 3 * STEP, "skipped", 1),
    ]
    job.refresh_from_db()
    assert (job.parked_since, job.next_fire_at) == (None, T0 + 4 * STEP)


def test_a_dispatcher_behind_a_declined_fire_parks_the_job_under_one_row(owner):
    job, _held = parked_job(owner)
    _first, declined = runs_of(job)
    assert (declined.scheduled_at, declined.state, declined.reason) == (
        T0 + STEP,
        "skipped",
        "overlap",
    )
    assert declined.fires is None  # every fire from here on, while parked
    assert (job.next_fire_at, job.parked_since) == (None, T0 + STEP)
    # Parked is active, not finished: it fires again once its run ends.
    assert job.state == JobState.ACTIVE and job.status == JobStatus.ACTIVE
    assert not Job.objects.finished().filter(pk=job.pk).exists()
    assert Job.objects.shown_as(JobStatus.ACTIVE).filter(pk=job.pk).exists()
    # Its later fires cost no row and no tick.
    for k in range(2, 8):
        assert Dispatcher().tick(now=T0 + k * STEP + S).created == {}
    assert len(runs_of(job)) == 2


def test_the_end_of_the_run_unparks_the_job_and_counts_the_fires_declined(owner):
    job, _held = parked_job(owner)
    claimed_and_completed(job, T0 + 35 * S)
    job.refresh_from_db()
    # Declined: T0+10, T0+20, T0+30; the next fire is the first from the end on.
    assert (job.next_fire_at, job.parked_since) == (T0 + 4 * STEP, None)
    declined = runs_of(job)[1]
    assert declined.fires == 3
    assert Dispatcher().tick(now=T0 + 4 * STEP + S).created == {"pending": 1}
    assert [r.scheduled_at for r in runs_of(job)] == [T0, T0 + STEP, T0 + 4 * STEP]
    report = audit(now=T0 + 4 * STEP + 2 * S)
    assert report.ok, report.render()
    assert (report.counts["slots"], report.counts["slots_run"]) == (5, 5)


def test_one_completion_of_several_runs_unparks_each_of_their_jobs(owner):
    """The trigger ends the parkings of a whole statement at once
    (runs/migrations/0015): each job of the batch gets its own count and
    next fire, and the claim and heartbeat before it end none."""
    jobs = [ten_second_job(owner, name=f"parked-{n}") for n in range(3)]
    fire_then_fall_behind()
    claimed = leases.claim("w1", limit=10, lease_seconds=60, now=T0 + 30 * S)
    assert len(claimed) == 3
    assert leases.heartbeat("w1", [(c.run_id, c.attempt) for c in claimed], now=T0 + 31 * S)
    for job in jobs:
        job.refresh_from_db()
        assert (job.next_fire_at, job.parked_since) == (None, T0 + STEP)
    results = [
        outcomes.Result(run_id=c.run_id, job_id=c.job_id, attempt=c.attempt, state="succeeded")
        for c in claimed
    ]
    assert len(outcomes.complete("w1", results, now=T0 + 35 * S).applied) == 3
    for job in jobs:
        job.refresh_from_db()
        assert (job.next_fire_at, job.parked_since) == (T0 + 4 * STEP, None)
        assert runs_of(job)[1].fires == 3
    report = audit(now=T0 + 4 * STEP)
    assert report.ok, report.render()


RUN_ROWS_READ = """
    SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.inhrelid)), 0)
    FROM pg_inherits AS i
    WHERE i.inhparent IN ('runs_run'::regclass, 'run_fire_range_idx'::regclass)
"""


def run_rows_read() -> int:
    """Rows of runs_run read by sequential scans plus entries of
    run_fire_range_idx read, every partition's, in this transaction so far."""
    with connection.cursor() as cur:
        cur.execute(RUN_ROWS_READ)
        return int(cur.fetchone()[0])


def test_the_end_of_a_parking_finds_its_skipped_run_by_key_whatever_the_join(owner):
    """The end of a parking reads its skipped run by key whatever join the
    planner picks: PL/pgSQL keeps the plan it made first in a session, and
    one made while the day's partition was nearly empty joined the skipped
    runs with a read of the whole run_fire_range_idx per job (runs/migrations/
    0015: 23,626 entries per job under overload). Here the join is made a
    hash join, and 20,000 unanalyzed runs that stand for several fires lie
    beside the one to find."""
    job, _held = parked_job(owner)
    Run.objects.bulk_create(
        Run(
            job_id=uuid.uuid4(),
            owner_id=owner.pk,
            scheduled_at=T0 + n * S / 1000,
            state="skipped",
            reason="overlap",
            fires=None,
            finished_at=T0,
        )
        for n in range(20_000)
    )
    [c] = leases.claim("w1", limit=10, lease_seconds=60, now=T0 + 34 * S)
    with connection.cursor() as cur:
        cur.execute("DISCARD PLANS")  # whatever plan this session kept
        cur.execute("SET LOCAL enable_nestloop = off")
        cur.execute("SET LOCAL enable_mergejoin = off")
    before = run_rows_read()
    result = outcomes.Result(run_id=c.run_id, job_id=job.pk, attempt=c.attempt, state="succeeded")
    assert outcomes.complete("w1", [result], now=T0 + 35 * S).applied == [c.run_id]
    read = run_rows_read() - before
    job.refresh_from_db()
    assert (job.parked_since, runs_of(job)[1].fires) == (None, 3)
    assert read <= 50, f"{read} runs read to end one parking"


def test_a_completion_that_ends_one_run_and_retries_another_unparks_only_the_first(owner):
    """The trigger takes the runs that left the active states, not every
    run the statement touched: a retry in the same batch keeps its job parked."""
    ended, retried = (ten_second_job(owner, name=n, max_attempts=3) for n in ("ended", "retried"))
    fire_then_fall_behind()
    claimed = {c.job_id: c for c in leases.claim("w1", limit=10, lease_seconds=60, now=T0 + 30 * S)}
    results = [
        outcomes.Result(
            run_id=c.run_id,
            job_id=c.job_id,
            attempt=c.attempt,
            state="succeeded" if c.job_id == ended.pk else "retrying",
        )
        for c in claimed.values()
    ]
    assert len(outcomes.complete("w1", results, now=T0 + 35 * S).applied) == 2
    ended.refresh_from_db()
    retried.refresh_from_db()
    assert (ended.next_fire_at, ended.parked_since) == (T0 + 4 * STEP, None)
    assert (retried.next_fire_at, retried.parked_since) == (None, T0 + STEP)


def test_a_run_that_ends_on_a_fire_lets_that_fire_run(owner):
    """The fires declined are those before the run's end: a fire at the very
    instant it ended is the job's next."""
    job, _held = parked_job(owner)
    claimed_and_completed(job, T0 + 3 * STEP)
    job.refresh_from_db()
    assert job.next_fire_at == T0 + 3 * STEP
    assert runs_of(job)[1].fires == 2


def test_a_run_that_ends_before_the_next_fire_declines_only_the_first(owner):
    job, _held = parked_job(owner)
    claimed_and_completed(job, T0 + STEP + 2 * S)
    job.refresh_from_db()
    assert job.next_fire_at == T0 + 2 * STEP
    assert runs_of(job)[1].fires == 1


@pytest.mark.parametrize("state", ["failed", "retrying"])
def test_a_failed_run_unparks_the_job_and_a_retrying_one_keeps_it_parked(owner, state):
    job, _held = parked_job(owner, max_attempts=3)
    claimed_and_completed(job, T0 + 25 * S, state=state)
    job.refresh_from_db()
    if state == "failed":
        assert (job.next_fire_at, job.parked_since) == (T0 + 3 * STEP, None)
    else:
        assert (job.next_fire_at, job.parked_since) == (None, T0 + STEP)


def test_a_lease_that_expires_on_the_last_attempt_unparks_the_job(owner):
    job, _held = parked_job(owner, max_attempts=1)
    [c] = leases.claim("w1", limit=10, lease_seconds=5, now=T0 + 12 * S)
    assert c.attempt == 1
    assert outcomes.fail_exhausted(now=T0 + 41 * S) == 1
    job.refresh_from_db()
    assert (job.next_fire_at, job.parked_since) == (T0 + 5 * STEP, None)
    assert runs_of(job)[1].fires == 4  # T0+10 .. T0+40


def test_an_end_at_caps_the_fires_declined_and_finishes_the_job(owner):
    job, _held = parked_job(owner)
    rewrite_job(job, end_at=T0 + 25 * S)
    claimed_and_completed(job, T0 + 65 * S)
    job.refresh_from_db()
    assert (job.next_fire_at, job.parked_since) == (None, None)
    assert job.status == JobStatus.FINISHED
    assert runs_of(job)[1].fires == 2  # T0+10, T0+20; none past the end


def test_a_pause_of_a_parked_job_counts_the_fires_declined_until_then(owner):
    job, held = parked_job(owner)
    # The verb reads the database clock: the parking spans T0 + 10 s to now.
    job_verbs.pause(job, note="maintenance")
    job.refresh_from_db()
    assert job.state == JobState.PAUSED and job.parked_since is None
    declined = runs_of(job)[1]
    assert declined.fires is not None and declined.fires >= 1
    held.refresh_from_db()
    assert held.state == "cancelled"
    report = audit()
    assert report.ok, report.render()


@pytest.mark.parametrize("verb", ["edit", "delete", "overlap"])
def test_an_owner_verb_ends_the_parking_before_it_changes_the_job(owner, verb):
    job, _held = parked_job(owner)
    if verb == "edit":
        job_verbs.edit(job, {"interval_seconds": 30})
    elif verb == "overlap":
        job_verbs.edit(job, {"overlap_policy": "allow"})
    else:
        job_verbs.soft_delete(job)
    job.refresh_from_db()
    assert job.parked_since is None
    declined = runs_of(job)[1]
    assert declined.fires is not None and declined.fires >= 1
    if verb != "delete":
        assert job.next_fire_at is not None
    # The verbs read the database clock: the parking spans T0 + 10 s to now,
    # months of fires on one row. The run of T0 waits with no worker alive.
    report = audit()
    assert {v.rule for v in report.violations} <= {"no worker"}, report.render()
    assert report.counts["slots"] == report.counts["slots_run"] > 1000


def test_a_still_parked_job_passes_the_audit(owner):
    """The open range (fires NULL) stands for every slot from its first."""
    parked_job(owner)
    for k in range(2, 6):
        Dispatcher().tick(now=T0 + k * STEP + S)
    report = audit(now=T0 + 5 * STEP + 2 * S)
    # The run of T0 waits with no worker alive; every slot is accounted for.
    assert {v.rule for v in report.violations} == {"no worker"}, report.render()
    assert (report.counts["slots"], report.counts["slots_run"]) == (6, 6)


def test_an_audit_window_that_starts_inside_a_parking_counts_its_fires(owner):
    job, _held = parked_job(owner)
    claimed_and_completed(job, T0 + 55 * S)
    Dispatcher().tick(now=T0 + 6 * STEP + S)
    report = audit(since=T0 + 25 * S, until=T0 + 6 * STEP + S, now=T0 + 6 * STEP + 2 * S)
    assert report.ok, report.render()
    # T0+30, +40, +50 are the range's, T0+60 a run.
    assert (report.counts["slots"], report.counts["slots_run"]) == (4, 4)


def test_a_fire_missing_beside_a_parking_is_still_a_gap(owner):
    job, _held = parked_job(owner)
    claimed_and_completed(job, T0 + 35 * S)
    Dispatcher().tick(now=T0 + 4 * STEP + S)
    Run.objects.filter(job=job, scheduled_at=T0 + 4 * STEP).delete()
    [gap] = audit(now=T0 + 4 * STEP + 2 * S).violations
    assert gap.rule == "gap" and gap.scheduled_at == T0 + 4 * STEP


@pytest.mark.parametrize("policy", ["queue", "allow"])
def test_only_overlap_skip_parks(owner, policy):
    job, _held = parked_job(owner, overlap_policy=policy)
    assert job.parked_since is None and job.next_fire_at == T0 + 3 * STEP


def test_a_cron_job_is_not_parked(owner):
    job = make_job(owner, cron="* * * * *")
    rewrite_job(job, created_at=T0 - 60 * S, next_fire_at=T0)
    Dispatcher().tick(now=T0 + S)
    Dispatcher().tick(now=T0 + 61 * S)
    job.refresh_from_db()
    assert job.parked_since is None and job.next_fire_at == T0 + 120 * S
    assert [r.fires for r in runs_of(job)] == [1, 1]


def test_a_fire_that_already_has_a_run_does_not_park_the_job(owner):
    """The skipped row goes in first and the job parks only if it did: a
    parking whose first fire had a run already would count its fires nowhere."""
    job = ten_second_job(owner)
    Dispatcher().tick(now=T0 + S)
    Run.objects.create(
        job=job,
        scheduled_at=T0 + STEP,
        kind="backfill",
        state="succeeded",
        target_kind=job.target_kind,
        exclusive=True,
    )
    # Behind by two fires, its run still waiting: T0+10 had a run already,
    # so the job is not parked there; the planned path takes both fires.
    Dispatcher().tick(now=T0 + 2 * STEP + S)
    job.refresh_from_db()
    assert (job.parked_since, job.next_fire_at) == (None, T0 + 3 * STEP)
    # Behind again, with no run in the way of its first due fire: parked.
    Dispatcher().tick(now=T0 + 4 * STEP + S)
    job.refresh_from_db()
    assert (job.parked_since, job.next_fire_at) == (T0 + 3 * STEP, None)


def test_a_parked_job_found_without_an_interval_is_left_to_the_planned_path(owner):
    """Only interval jobs are parked and an edit unparks first; a parked job
    rewritten to a cron behind the verbs' back still gets a next fire when
    its run ends: the run's end, from which the planned path finds the cron's
    fires."""
    job, _held = parked_job(owner)
    rewrite_job(job, cron="* * * * *", interval_seconds=None)
    claimed_and_completed(job, T0 + 35 * S)
    job.refresh_from_db()
    assert (job.next_fire_at, job.parked_since) == (T0 + 35 * S, None)
    assert Dispatcher().tick(now=T0 + 61 * S).created == {"pending": 1}
    assert runs_of(job)[-1].scheduled_at == T0 + 60 * S


def test_a_run_whose_end_was_stamped_before_the_parking_still_counts_its_first_fire(owner):
    """A completion reads its time before it waits for the parking's mark:
    its run can end "before" the fire it made the job decline. That fire
    was declined all the same; the next one is the job's."""
    job, _held = parked_job(owner)
    claimed_and_completed(job, T0 + 5 * S)
    job.refresh_from_db()
    assert (job.next_fire_at, job.parked_since) == (T0 + 2 * STEP, None)
    assert runs_of(job)[1].fires == 1


def test_a_dispatcher_behind_a_job_with_an_active_run_parks_it_under_one_row(owner):
    """Several fires due at once (the dispatcher is behind), all within the
    grace, behind a run that was already active: all are overlaps, as the
    planned path would decide, and one row stands for them and the later
    ones. Without an active run the planned path takes the job."""
    job, _held = parked_job(owner)
    claimed_and_completed(job, T0 + 12 * S)  # unparked: its next fire T0+20
    busy = ten_second_job(owner)
    Dispatcher().tick(now=T0 + S)
    Dispatcher().tick(now=T0 + 4 * STEP + S)  # T0+10 .. T0+40 due
    rows = runs_of(busy)
    assert [(r.scheduled_at, r.state, r.fires) for r in rows] == [
        (T0, "pending", 1),
        (T0 + STEP, "skipped", None),
    ]
    busy.refresh_from_db()
    assert (busy.parked_since, busy.next_fire_at) == (T0 + STEP, None)
    # The first job, three fires due and no run in the way: the first runs,
    # the others are held back by it (missed, "no dispatcher"), on one row.
    assert [(r.scheduled_at, r.state, r.reason, r.fires) for r in runs_of(job)[2:]] == [
        (T0 + 2 * STEP, "pending", "", 1),
        (T0 + 3 * STEP, "missed", "no dispatcher", 2),
    ]
    job.refresh_from_db()
    assert job.next_fire_at == T0 + 5 * STEP
    report = audit(now=T0 + 4 * STEP + 2 * S)
    assert {v.rule for v in report.violations} <= {"no worker"}, report.render()
    assert report.counts["slots"] == report.counts["slots_run"] == 10


def test_a_backlog_with_a_run_among_its_fires_is_left_to_the_planned_path(owner):
    """A backfill made a run at one of the backlog's fires: one row could not
    stand for the others, so the planned path gives each its own."""
    job = ten_second_job(owner, overlap_policy="queue")
    Run.objects.create(
        job=job,
        scheduled_at=T0 + 2 * STEP,
        kind="backfill",
        state="succeeded",
        target_kind=job.target_kind,
        exclusive=True,
    )
    Dispatcher().tick(now=T0 + 3 * STEP + S)
    assert [(r.scheduled_at, r.state, r.fires) for r in runs_of(job)] == [
        (T0, "pending", 1),
        (T0 + STEP, "missed", 1),
        (T0 + 2 * STEP, "succeeded", 1),
        (T0 + 3 * STEP, "missed", 1),
    ]


def test_a_backlog_stops_at_the_end_of_its_job(owner):
    job = ten_second_job(owner)
    rewrite_job(job, end_at=T0 + 25 * S)
    # One job planned, by the fast path alone: it finishes the job itself.
    assert Dispatcher().tick(now=T0 + 5 * STEP + S).jobs == 1
    assert [(r.scheduled_at, r.state, r.fires) for r in runs_of(job)] == [
        (T0, "pending", 1),
        (T0 + STEP, "missed", 2),
    ]
    job.refresh_from_db()
    assert job.next_fire_at is None and job.status == JobStatus.FINISHED

"""A run that ends while the dispatcher parks its job (docs/concepts/misfire-and-overlap.md
"Parked while its run is active"): two live connections, the interleavings
forced with row locks and events, never with sleeps.

The fast path holds the active run under its row lock (FOR NO KEY UPDATE
SKIP LOCKED), so the run cannot end unseen between the tick's read and its
commit: either the run's end waits for the parking and unparks the job, or the
tick finds the run locked by its end, does not wait for it, and does not
park.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import transaction

from dispatch.dispatcher import Dispatcher
from jobs.models import Job
from runs import leases, outcomes
from runs.models import Run
from tests.factories import at, make_job, rewrite_job
from tests.integration import races

pytestmark = pytest.mark.django_db(transaction=True)

T0 = at("2026-06-01T12:00:00")
S = dt.timedelta(seconds=1)
STEP = 10 * S


def running_job(owner) -> tuple[Job, leases.Claimed]:
    """A 10 s job whose run of T0 a worker holds."""
    job = make_job(owner, interval_seconds=10)
    rewrite_job(job, created_at=T0 - STEP, start_at=None, next_fire_at=T0)
    Dispatcher().tick(now=T0 + S)
    [claimed] = leases.claim("w1", limit=1, lease_seconds=600, now=T0 + 2 * S)
    return job, claimed


def complete(job: Job, claimed: leases.Claimed, when: dt.datetime) -> None:
    result = outcomes.Result(
        run_id=claimed.run_id, job_id=job.pk, attempt=claimed.attempt, state="succeeded"
    )
    assert outcomes.complete("w1", [result], now=when).applied == [claimed.run_id]


def test_a_run_that_ends_while_the_tick_parks_its_job_unparks_it(owner):
    job, claimed = running_job(owner)
    with transaction.atomic():
        # The tick, behind (T0+10 and T0+20 due), parks the job and holds
        # the run; it has not committed.
        Dispatcher().tick(now=T0 + 2 * STEP + S)
        other = races.start(lambda: complete(job, claimed, T0 + 25 * S))
        races.wait_until_blocked_or_done(other, "the completion")
        assert other.is_alive(), "the completion did not wait for the tick's row lock"
    other.result()
    job.refresh_from_db()
    # The completion saw the committed parking: the job is unparked.
    assert (job.parked_since, job.next_fire_at) == (None, T0 + 3 * STEP)
    assert Run.objects.get(job=job, scheduled_at=T0 + STEP).fires == 2


def test_a_tick_does_not_wait_for_a_run_that_is_ending_and_does_not_park(owner):
    job, claimed = running_job(owner)
    ended, release = threading.Event(), threading.Event()

    def completion_holds_the_run():
        with transaction.atomic():
            complete(job, claimed, T0 + STEP + S)
            ended.set()
            assert release.wait(30)

    completion = races.start(completion_holds_the_run)
    assert ended.wait(30)
    try:
        tick = races.start(lambda: Dispatcher().tick(now=T0 + 2 * STEP + 2 * S))
        races.wait_until_blocked_or_done(tick, "the tick")
        assert not tick.is_alive(), "the tick waited for the run's row lock"
        result = tick.result()
    finally:
        release.set()
        completion.result()
    # The run was active as the tick read it: its two due fires are
    # skipped, a row each (the planned path took them), and the job steps on
    # instead of parking on a run that has ended.
    assert result.created == {"skipped": 2}
    job.refresh_from_db()
    assert (job.parked_since, job.next_fire_at) == (None, T0 + 3 * STEP)
    assert [r.fires for r in Run.objects.filter(job=job, state="skipped")] == [1, 1]

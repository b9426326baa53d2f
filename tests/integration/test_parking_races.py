"""A run that ends while the dispatcher parks its job (docs/concepts/misfire-and-overlap.md
"Parked while its run is active"): two live connections, the interleavings
forced with row locks and events, never with sleeps.

The end of an exclusive run locks its job (runs/migrations/0016) and the tick
holds its jobs under the same lock, so the run cannot end unseen between the
tick's read and its commit: either the run's end waits for the parking and
unparks the job, or the tick finds the job held by the run's end, does not
wait for it, and leaves the job until the run has ended.
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
        # The tick, behind (T0+10 and T0+20 due), parks the job, which it
        # holds; it has not committed.
        Dispatcher().tick(now=T0 + 2 * STEP + S)
        other = races.start(lambda: complete(job, claimed, T0 + 25 * S))
        races.wait_until_blocked_or_done(other, "the completion")
        assert other.is_alive(), "the completion did not wait for the tick's lock on the job"
    other.result()
    job.refresh_from_db()
    # The completion saw the committed parking: the job is unparked.
    assert (job.parked_since, job.next_fire_at) == (None, T0 + 3 * STEP)
    assert Run.objects.get(job=job, scheduled_at=T0 + STEP).fires == 2


def test_a_tick_does_not_wait_for_a_run_that_is_ending_and_leaves_its_job_until_it_has(owner):
    job, claimed = running_job(owner)
    ended, release = threading.Event(), threading.Event()

    def completion_holds_the_job():
        with transaction.atomic():
            complete(job, claimed, T0 + STEP + S)
            ended.set()
            assert release.wait(30)

    completion = races.start(completion_holds_the_job)
    assert ended.wait(30)
    try:
        tick = races.start(lambda: Dispatcher().tick(now=T0 + 2 * STEP + 2 * S))
        races.wait_until_blocked_or_done(tick, "the tick")
        assert not tick.is_alive(), "the tick waited for the run's end"
        result = tick.result()
    finally:
        release.set()
        completion.result()
    # The run's end holds the job (runs/migrations/0016): the tick leaves it,
    # due, and does not park it behind a run that has ended.
    assert result.created == {}
    job.refresh_from_db()
    assert (job.parked_since, job.next_fire_at) == (None, T0 + STEP)
    # The next tick finds no run in the way: the first due fire runs, the
    # other is missed (the dispatcher was behind), and the job steps on.
    assert Dispatcher().tick(now=T0 + 2 * STEP + 3 * S).created == {"pending": 1, "missed": 1}
    job.refresh_from_db()
    assert (job.parked_since, job.next_fire_at) == (None, T0 + 3 * STEP)
    fires = Run.objects.filter(job=job, scheduled_at__gt=T0).order_by("scheduled_at")
    assert [(r.scheduled_at, r.state) for r in fires] == [
        (T0 + STEP, "pending"),
        (T0 + 2 * STEP, "missed"),
    ]

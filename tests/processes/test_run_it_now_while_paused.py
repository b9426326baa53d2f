"""A paused job's trigger and test delivery reach the receiver at once through
a real ``manage.py work``, while ``manage.py dispatch`` makes none of its
fires and its backfill waits for the resume (docs/concepts/pause-and-resume.md
"Run it now, while paused")."""

from __future__ import annotations

import datetime as dt

import pytest

from core.db import db_now
from jobs.models import Job, JobState
from ops.audit import audit
from runs import job_verbs
from runs.models import Run, RunKind
from tests.factories import make_job, rewrite_job
from tests.processes.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

# From the run's making (its scheduled_at) to its attempt's start, both on the
# database clock: an idle worker is woken by the trigger's NOTIFY.
AT_ONCE = 2.0


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def delivered(receiver, run: Run) -> Run | None:
    """The run once it succeeded and the receiver logged its delivery."""
    run = Run.objects.get(pk=run.pk)
    if run.state != "succeeded":
        return None
    ids = {entry["webhook_id"] for entry in receiver.entries()}
    return run if str(run.pk) in ids else None


def test_a_paused_job_s_trigger_and_test_delivery_are_delivered_at_once_and_its_fires_never(
    owner, processes, receiver
):
    job = make_job(owner, interval_seconds=1, overlap_policy="allow", url=receiver.url("ok"))
    processes.manage("dispatch")
    processes.manage("work", "--name", "at-once")

    # The fleet is up: the schedule's fires are delivered.
    def a_delivered_fire():
        return Run.objects.filter(job=job, kind=RunKind.SCHEDULED, state="succeeded").exists()

    wait_until(a_delivered_fire, timeout=60, message="a scheduled fire to be delivered")

    # Another paused job, an hour old, whose backfill waits for its resume.
    held = make_job(owner, interval_seconds=60, url=receiver.url("ok"))
    job_verbs.pause(fresh(held))
    rewrite_job(held, created_at=db_now() - dt.timedelta(hours=1))
    window = held.created_at + dt.timedelta(minutes=10)
    backfill = job_verbs.backfill(fresh(held), window, window + dt.timedelta(minutes=10))
    assert backfill["created"] == 10

    job_verbs.pause(fresh(job), note="on hold")
    paused_at = fresh(job).paused_at

    for make in (job_verbs.trigger, job_verbs.send_test_delivery):
        run = make(fresh(job))
        done = wait_until(
            lambda run=run: delivered(receiver, run), timeout=60, message=f"the {run.kind} run"
        )
        assert done.lag_seconds is not None and done.lag_seconds < AT_ONCE, done.lag_seconds
        assert done.attempt == 1

    job = fresh(job)
    assert (job.state, job.pause_note, job.next_fire_at) == (JobState.PAUSED, "on hold", None)
    # The backfill's first run was due before the two hand-made ones, and the
    # worker claims in that order: still waiting, it was never claimable.
    waiting = Run.objects.filter(job=held, kind=RunKind.BACKFILL)
    assert sorted(waiting.values_list("state", "attempt")) == [("pending", 0)] * 10
    assert waiting.order_by("available_at")[0].available_at < paused_at
    # No fire was made since the pause, and none of the paused job's own runs ran.
    runs = Run.objects.filter(job=job, scheduled_at__gt=paused_at)
    assert sorted(runs.values_list("kind", flat=True)) == ["manual", "test"]
    assert not Run.objects.filter(
        job=job, kind=RunKind.SCHEDULED, attempt_started_at__gt=paused_at
    ).exists()

    job_verbs.resume(fresh(held))
    wait_until(
        lambda: not waiting.exclude(state="succeeded").exists(),
        timeout=60,
        message="the backfill to run after the resume",
    )
    report = audit(job_ids=[job.pk], receiver_log=receiver.log_path)
    assert report.ok, report.render()

"""Fires due while no dispatcher ran read "no dispatcher", not "overlap"
(docs/concepts/misfire-and-overlap.md "A backlog after an outage").

A 1 s job under ``overlap_policy=skip`` with a 30 s grace delivers to a
receiver that takes 2.5 s, so while the dispatcher runs, fires come due
while the previous run is still running: ``skipped``, reason ``overlap``.
The only dispatcher is stopped for 6 s (every fire of the gap stays within
the grace) and started again once the last delivery has finished. Its
recovery tick finds the gap's fires together: the first runs, and each of
the others is ``missed`` with reason ``no dispatcher``, none ``overlap``.
"""

from __future__ import annotations

import datetime as dt

import pytest

from core.db import db_now
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job
from tests.processes.conftest import wait_until
from tests.processes.faults.conftest import active_runs, assert_audit_clean, drain, registered

pytestmark = [pytest.mark.django_db(transaction=True)]

GAP = dt.timedelta(seconds=6)


def test_fires_of_a_stopped_dispatcher_read_no_dispatcher_and_overlaps_overlap(
    owner, processes, receiver, since
):
    processes.manage("work", "--lease-seconds", "10")
    before = processes.manage("dispatch", "--name", "before", name="before")
    wait_until(lambda: registered("before"), timeout=60, message="the dispatcher to start")
    job = make_job(
        owner,
        interval_seconds=1,
        misfire_grace_seconds=30,
        overlap_policy="skip",
        url=receiver.url("slow/2.5"),
    )
    wait_until(
        lambda: (
            Run.objects.filter(job=job, state="skipped", reason="overlap").exists()
            and Run.objects.filter(job=job, state="succeeded").exists()
        ),
        timeout=60,
        message="a delivery, and an overlap skip while the dispatcher runs",
    )
    assert processes.stop(before) == 0
    down = db_now()
    last_before = Run.objects.filter(job=job).order_by("-scheduled_at").first().scheduled_at
    # The delivery in flight finishes; nothing of the job is active when the
    # dispatcher comes back, so nothing from before holds the gap's fires.
    drain([job], timeout=30, message="the delivery in flight to finish")
    # The first fire owed: the one after the last run made, or, if the job
    # was parked behind that delivery, the first from its end on (its
    # skipped run counts the fires between).
    job.refresh_from_db()
    owed = job.next_fire_at
    assert owed is not None and job.parked_since is None
    wait_until(lambda: db_now() - down >= GAP, timeout=60, interval=0.2, message="a 6 s gap")
    processes.manage("dispatch", "--name", "after", name="after")
    wait_until(
        lambda: Run.objects.filter(job=job, created_at__gt=down).exists(),
        timeout=60,
        message="the recovery tick",
    )
    recovered_at = (
        Run.objects.filter(job=job, created_at__gt=down).order_by("created_at").first().created_at
    )
    recovery = list(Run.objects.filter(job=job, created_at=recovered_at).order_by("scheduled_at"))
    # Every fire since the stop, up to the recovery tick, within the grace.
    assert recovery[0].scheduled_at == owed
    assert owed - last_before >= dt.timedelta(seconds=1)
    # The held-back fires may share one row that counts them (runs/models.py
    # Run.fires): the dispatcher's fast path writes a backlog so.
    assert sum(r.fires for r in recovery) >= 5
    assert recovery[0].state in ("pending", "running", "succeeded")
    assert [(r.state, r.reason) for r in recovery[1:]] == [("missed", "no dispatcher")] * (
        len(recovery) - 1
    )
    assert all(r.attempt == 0 for r in recovery[1:])
    # The overlaps while the dispatcher ran still say so.
    assert Run.objects.filter(
        job=job, scheduled_at__lte=last_before, state="skipped", reason="overlap"
    ).exists()
    assert not Run.objects.filter(job=job, reason="no dispatcher", scheduled_at__lte=last_before)

    # The scenario is over: paused, the job owes nothing more, and the
    # auditor reconciles every fire, the gap's included.
    job_verbs.pause(job, note="scenario over")
    drain([job], timeout=30)
    assert active_runs([job]) == 0
    assert_audit_clean(since, receiver=receiver, jobs=[job])

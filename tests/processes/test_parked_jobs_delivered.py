"""A job whose deliveries outlast its interval, through a real ``manage.py
dispatch`` and ``manage.py work`` delivering to a real receiver
(docs/concepts/misfire-and-overlap.md "Parked while its run is active"):
while the dispatcher keeps up, each fire the active run declines is a
skipped row of its own; a dispatcher that falls behind (here stopped with
SIGSTOP, as a starved host stops it) parks the job on its return, the run's
end unparks it, its next run is its first fire from that end on, and the
auditor finds every fire accounted for, the fires of the parking on one
skipped row that counts them."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import signal

import pytest

from core.db import db_now
from dispatch.models import ProcessHeartbeat
from jobs.models import Job
from ops.audit import audit
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job
from tests.processes.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

S = dt.timedelta(seconds=1)


def test_a_job_slower_than_its_interval_is_parked_and_every_fire_accounted_for(
    owner, processes, receiver
):
    dispatcher = processes.manage("dispatch", "--name", "parking")
    processes.manage("work", "--name", "parking-worker")
    wait_until(
        lambda: ProcessHeartbeat.objects.filter(name="parking").exists(),
        timeout=60,
        message="the dispatcher to start",
    )
    # Each delivery takes 8 s; the job fires every second (overlap skip).
    job = make_job(owner, name="slow", interval_seconds=1, url=receiver.url("slow/8"))
    skipped = Run.objects.filter(job=job, state="skipped", reason="overlap")
    # Keeping up: the fires the first run declines are a row each.
    wait_until(lambda: skipped.count() >= 2, timeout=120, message="two declined fires")
    assert {r.fires for r in skipped} == {1}
    # Behind: stopped just after a delivery started, for three of its fires
    # (the delivery has about five seconds left when the dispatcher resumes).
    running = Run.objects.filter(job=job, state="running")
    wait_until(
        lambda: running.filter(attempt_started_at__gte=db_now() - S).exists(),
        timeout=120,
        message="a delivery that has just started",
    )
    os.kill(dispatcher.pid, signal.SIGSTOP)
    try:
        stopped_at = db_now()
        wait_until(lambda: db_now() >= stopped_at + 3 * S, timeout=60, message="three missed ticks")
    finally:
        os.kill(dispatcher.pid, signal.SIGCONT)
    wait_until(
        lambda: skipped.filter(fires__isnull=False, fires__gte=2).exists(),
        timeout=120,
        message="a parking that counts several fires",
    )
    succeeded = Run.objects.filter(job=job, state="succeeded")
    wait_until(lambda: succeeded.count() >= 3, timeout=120, message="three slow deliveries")
    # A pause ends whatever parking is open, at its own time, and stops it.
    job_verbs.pause(job, note="enough")
    wait_until(
        lambda: (
            not Run.objects.filter(job=job, state__in=["pending", "running", "retrying"]).exists()
        ),
        timeout=60,
        message="the last run to end",
    )

    runs = list(Run.objects.filter(job=job).order_by("scheduled_at"))
    delivered = [r for r in runs if r.state == "succeeded"]
    skipped = [r for r in runs if r.state == "skipped" and r.reason == "overlap"]
    # Parked once behind: one row stands for several declined fires, and no
    # parking is left open.
    assert any(r.fires and r.fires >= 2 for r in skipped), [(r.scheduled_at, r.fires) for r in runs]
    assert all(r.fires is not None for r in runs)
    assert Job.objects.get(pk=job.pk).parked_since is None
    # Each run after the first is the job's first fire from the end of the
    # one before it: neither a fire too early (while it ran) nor one too
    # late (a fire lost after its end).
    for before, after in itertools.pairwise(delivered):
        gap = after.scheduled_at - before.finished_at
        assert dt.timedelta(0) <= gap <= S, (before.finished_at, after.scheduled_at)
    # Every delivery once, and every fire accounted for.
    ids = [entry["webhook_id"] for entry in receiver.entries()]
    assert sorted(ids) == sorted(str(r.pk) for r in delivered)
    report = audit(job_ids=[job.pk], receiver_log=receiver.log_path)
    assert report.ok, report.render()
    assert report.counts["slots"] == report.counts["slots_run"]
    assert report.counts["slots"] == sum(r.fires for r in runs if r.kind == "scheduled")
    assert report.counts["slots"] > len(runs)

"""A job whose deliveries outlast its interval, through a real ``manage.py
dispatch`` and ``manage.py work`` delivering to a real receiver
(docs/concepts/misfire-and-overlap.md "Parked while its run is active"):
the dispatcher parks it while its run is active, the run's end unparks it,
its next run is its first fire from that end on, and the auditor finds
every fire accounted for, the declined ones on a few skipped rows that
count them."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

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
    processes.manage("dispatch", "--name", "parking")
    processes.manage("work", "--name", "parking-worker")
    wait_until(
        lambda: ProcessHeartbeat.objects.filter(name="parking").exists(),
        timeout=60,
        message="the dispatcher to start",
    )
    # Each delivery takes 3.5 s; the job fires every second (overlap skip).
    job = make_job(owner, name="slow", interval_seconds=1, url=receiver.url("slow/3.5"))
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
    # Parked: the declined fires are counted on few rows, at least one of
    # which stands for several of them, and no parking is left open.
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

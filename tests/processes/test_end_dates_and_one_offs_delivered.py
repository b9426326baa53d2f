"""End dates and one-off jobs through a real ``manage.py dispatch`` and
``manage.py work`` delivering to a real receiver (docs/concepts/schedules.md
"End dates and one-off jobs"): a job with an ``end_at`` fires up to it and
not after, a one-off fires once, both end finished, and the auditor finds
every fire delivered once and none past the end."""

from __future__ import annotations

import datetime as dt

import pytest

from core.db import db_now
from dispatch.models import ProcessHeartbeat
from jobs.models import Job, JobStatus
from ops.audit import audit
from runs.models import Run
from tests.factories import make_job
from tests.processes.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

S = dt.timedelta(seconds=1)


def test_a_real_dispatcher_stops_at_the_end_and_fires_a_one_off_once(owner, processes, receiver):
    processes.manage("dispatch", "--name", "ending")
    processes.manage("work", "--name", "ending-worker")
    wait_until(
        lambda: ProcessHeartbeat.objects.filter(name="ending").exists(),
        timeout=60,
        message="the dispatcher to start",
    )
    now = db_now()
    start = now + 3 * S
    ending = make_job(
        owner,
        name="ending",
        interval_seconds=1,
        overlap_policy="allow",
        start_at=start,
        end_at=start + 3 * S,
        url=receiver.url("ok"),
    )
    once = make_job(owner, name="once", run_at=now + 4 * S, url=receiver.url("ok"))
    jobs = [ending, once]

    def all_delivered_and_finished() -> bool:
        runs = Run.objects.filter(job__in=jobs)
        finished = Job.objects.filter(pk__in=[j.pk for j in jobs]).finished().count() == 2
        return finished and runs.count() == 5 and not runs.exclude(state="succeeded").exists()

    wait_until(all_delivered_and_finished, timeout=90, message="every fire, delivered")

    fires = list(
        Run.objects.filter(job=ending)
        .order_by("scheduled_at")
        .values_list("scheduled_at", flat=True)
    )
    # The fire exactly at end_at is the last one.
    assert fires == [start + k * S for k in range(4)]
    [one] = Run.objects.filter(job=once)
    assert (one.scheduled_at, one.kind) == (once.run_at, "scheduled")
    assert {Job.objects.get(pk=j.pk).status for j in jobs} == {JobStatus.FINISHED}

    delivered = [entry["webhook_id"] for entry in receiver.entries()]
    runs = Run.objects.filter(job__in=jobs)
    assert sorted(delivered) == sorted(str(r.pk) for r in runs)
    report = audit(job_ids=[j.pk for j in jobs], receiver_log=receiver.log_path)
    assert report.ok, report.render()
    assert (report.counts["slots"], report.counts["slots_run"]) == (5, 5)

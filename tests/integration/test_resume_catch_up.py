"""Resume with catch_up after a long pause runs the newest fires of the pause."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from core.db import db_now
from jobs.models import Job
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def paused_since(job: Job, ago: dt.timedelta) -> dt.datetime:
    job_verbs.pause(job)
    began = db_now() - ago
    Job.objects.filter(pk=job.pk).update(created_at=began, paused_at=began)
    job.refresh_from_db()
    return began


def catch_up_runs(job: Job) -> list[dt.datetime]:
    return sorted(
        Run.objects.filter(job=job, kind="catch_up").values_list("scheduled_at", flat=True)
    )


def test_a_per_minute_cron_paused_for_two_years_catches_up_its_newest_fires(owner):
    """Over a million fires inside the pause: the catch-up runs are the three
    minutes before the resume, not fires from a year and more ago."""
    job = make_job(owner, cron="* * * * *", max_catchup=3)
    paused_since(job, dt.timedelta(days=730))
    before = db_now()
    plan = job_verbs.resume(job, catch_up=True)
    fires = catch_up_runs(job)
    assert plan["created"] == 3 and len(fires) == 3
    newest = before.replace(second=0, microsecond=0)
    # The last fire before the resume's own clock reading, which is a little
    # after `before` (possibly in the next minute).
    assert newest <= fires[-1] <= newest + dt.timedelta(minutes=1)
    assert [b - a for a, b in itertools.pairwise(fires)] == [dt.timedelta(minutes=1)] * 2


def test_a_one_second_interval_paused_for_twelve_days_catches_up_its_newest_fires(owner):
    """1,036,800 fires inside the pause, more than any list of them would hold."""
    job = make_job(owner, interval_seconds=1, max_catchup=2)
    paused_since(job, dt.timedelta(days=12))
    before = db_now()
    job_verbs.resume(job, catch_up=True)
    fires = catch_up_runs(job)
    assert len(fires) == 2
    assert fires[-1] >= before - dt.timedelta(seconds=1)
    assert fires[1] - fires[0] == dt.timedelta(seconds=1)

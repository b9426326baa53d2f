"""End dates and one-off jobs (docs/concepts/schedules.md "End dates and
one-off jobs") through the dispatcher's tick, the verbs, the schedule history
and the auditor, on a real database.

A job's ``end_at``: no fire after it (one exactly at it fires), whichever path
of the dispatcher takes the job, after an outage too. A one-off (``run_at``)
fires once, under the misfire policy if it was missed. Then the job is
finished: active, with no next fire, so the dispatcher never looks at it.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, InternalError, ProgrammingError, connection, transaction

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from dispatch.models import ProcessHeartbeat
from jobs.models import Job, JobState, JobStatus, ScheduleSpan
from ops.audit import Rule, audit
from runs import job_verbs
from runs.models import Run
from tests.factories import at, make_job, rewrite_job

pytestmark = pytest.mark.django_db

T0 = at("2026-06-01T12:00:00")
S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)


def runs_of(job: Job) -> list[Run]:
    return list(Run.objects.filter(job=job).order_by("scheduled_at"))


def placed(job: Job, *, born: dt.datetime, first: dt.datetime | None, **fields) -> Job:
    """``job`` as if created at ``born``, its next fire ``first``."""
    rewrite_job(job, created_at=born, next_fire_at=first, **fields)
    return job


def tick_every_minute(job: Job, start: dt.datetime, end: dt.datetime) -> None:
    t = start
    while t <= end:
        Dispatcher().tick(now=t)
        t += MIN
    job.refresh_from_db()


# -- the dispatcher ------------------------------------------------------------


def test_an_interval_job_fires_up_to_its_end_at_then_is_finished(owner):
    """The SQL fast path (an interval job, no jitter): the fire exactly at
    end_at runs, and the advance past it is NULL."""
    job = make_job(owner, interval_seconds=60, overlap_policy="allow")
    placed(job, born=T0 - MIN, first=T0, start_at=T0, end_at=T0 + 3 * MIN)
    tick_every_minute(job, T0 + S, T0 + 10 * MIN)
    assert [r.scheduled_at for r in runs_of(job)] == [T0 + k * MIN for k in range(4)]
    assert {r.state for r in runs_of(job)} == {"pending"}
    assert job.next_fire_at is None and job.state == JobState.ACTIVE
    assert job.status == JobStatus.FINISHED
    assert Job.objects.finished().filter(pk=job.pk).exists()
    assert Dispatcher().tick(now=T0 + 60 * MIN).created == {}


def test_a_jittered_interval_job_stops_at_its_end_on_the_planned_path(owner):
    job = make_job(owner, interval_seconds=60, jitter_seconds=5, overlap_policy="allow")
    end = T0 + 2 * MIN + 30 * S
    placed(job, born=T0 - MIN, first=T0, start_at=T0, end_at=end)
    tick_every_minute(job, T0 + S, T0 + 10 * MIN)
    assert [r.scheduled_at for r in runs_of(job)] == [T0, T0 + MIN, T0 + 2 * MIN]
    assert job.status == JobStatus.FINISHED


def test_an_outage_past_the_end_records_the_fires_up_to_the_end_only(owner):
    job = make_job(owner, cron="* * * * *", misfire_grace_seconds=30)
    placed(job, born=T0 - MIN, first=T0, end_at=T0 + 5 * MIN)
    result = Dispatcher().tick(now=T0 + 60 * MIN)
    assert result.created == {"missed": 6}
    assert [r.scheduled_at for r in runs_of(job)] == [T0 + k * MIN for k in range(6)]
    job.refresh_from_db()
    assert job.next_fire_at is None and job.missed_count == 0


def test_an_outage_past_the_end_catches_up_only_fires_before_it(owner):
    job = make_job(owner, interval_seconds=60, misfire_policy="catch_up", max_catchup=2)
    placed(job, born=T0 - MIN, first=T0, start_at=T0, end_at=T0 + 4 * MIN)
    Dispatcher().tick(now=T0 + 30 * MIN)
    runs = runs_of(job)
    assert [(r.scheduled_at, r.state) for r in runs] == [
        (T0, "missed"),
        (T0 + MIN, "missed"),
        (T0 + 2 * MIN, "missed"),
        (T0 + 3 * MIN, "pending"),
        (T0 + 4 * MIN, "pending"),
    ]
    assert {r.kind for r in runs[3:]} == {"catch_up"}


def test_a_one_off_fires_once_at_its_run_at_and_is_finished(owner):
    job = make_job(owner, run_at=T0)
    placed(job, born=T0 - 10 * MIN, first=T0)
    assert Dispatcher().tick(now=T0 - S).created == {}
    assert Dispatcher().tick(now=T0 + S).created == {"pending": 1}
    [run] = runs_of(job)
    assert (run.scheduled_at, run.kind, run.state) == (T0, "scheduled", "pending")
    job.refresh_from_db()
    assert job.next_fire_at is None and job.status == JobStatus.FINISHED
    assert Dispatcher().tick(now=T0 + 24 * 60 * MIN).created == {}
    assert len(runs_of(job)) == 1


@pytest.mark.parametrize(
    ("policy", "state", "kind"),
    [("skip", "missed", "scheduled"), ("catch_up", "pending", "catch_up")],
)
def test_a_one_off_missed_while_no_dispatcher_ran_follows_the_misfire_policy(
    owner, policy, state, kind
):
    job = make_job(owner, run_at=T0, misfire_policy=policy, misfire_grace_seconds=60)
    placed(job, born=T0 - 10 * MIN, first=T0)
    Dispatcher().tick(now=T0 + 3 * 60 * MIN)
    [run] = runs_of(job)
    assert (run.scheduled_at, run.state, run.kind) == (T0, state, kind)
    job.refresh_from_db()
    assert job.status == JobStatus.FINISHED


def test_a_one_off_created_with_its_time_past_is_finished_and_never_fires(owner):
    job = make_job(owner, run_at=db_now() - MIN)
    assert job.next_fire_at is None and job.status == JobStatus.FINISHED
    Dispatcher().tick(now=db_now() + MIN)
    assert runs_of(job) == []


# -- the verbs ------------------------------------------------------------------


def test_a_later_end_brings_a_finished_job_back_and_an_earlier_one_finishes_it(owner):
    now = db_now()
    job = make_job(owner, interval_seconds=60, end_at=now + 30 * S)
    job = placed(job, born=now - 10 * MIN, first=None, end_at=now - 5 * MIN)
    assert job.status == JobStatus.FINISHED
    job_verbs.edit(job, {"end_at": now + 2 * 60 * MIN})
    job.refresh_from_db()
    assert job.status == JobStatus.ACTIVE and job.next_fire_at is not None
    job_verbs.edit(job, {"end_at": None})
    job_verbs.edit(job, {"end_at": db_now()})
    job.refresh_from_db()
    assert job.status == JobStatus.FINISHED


def test_a_new_run_at_fires_a_finished_one_off_again(owner):
    now = db_now()
    job = make_job(owner, run_at=now - MIN)
    assert job.status == JobStatus.FINISHED
    job_verbs.edit(job, {"run_at": now + 60 * MIN})
    job.refresh_from_db()
    assert job.next_fire_at == now + 60 * MIN


def test_a_finished_job_can_still_be_run_by_hand(owner):
    job = make_job(owner, run_at=db_now() - MIN)
    run = job_verbs.trigger(job)
    assert (run.kind, run.state) == ("manual", "pending")
    job.refresh_from_db()
    assert job.status == JobStatus.FINISHED


def test_a_backfill_makes_no_run_after_the_end_and_one_for_a_one_off(owner):
    now = db_now()
    ended = make_job(owner, interval_seconds=60, end_at=now - 30 * MIN)
    ended = placed(ended, born=now - 60 * MIN, first=None, end_at=now - 30 * MIN)
    made = job_verbs.backfill(ended, now - 40 * MIN, now - MIN)
    assert made["created"] == 11  # the fires from 40 to 30 minutes ago, the end's included
    assert max(r.scheduled_at for r in runs_of(ended)) == now - 30 * MIN
    once = make_job(owner, run_at=now - 20 * MIN)
    assert job_verbs.backfill(once, now - 60 * MIN, now)["slots"] == [(now - 20 * MIN).isoformat()]


def test_resuming_with_catch_up_runs_a_one_off_that_fell_inside_the_pause(owner):
    now = db_now()
    job = make_job(owner, run_at=now + 60 * MIN)
    job_verbs.pause(job, note="hold it")
    Job.objects.filter(pk=job.pk).update(paused_at=now - 60 * MIN)
    job.refresh_from_db()
    # Its time inside the pause: only with catch-up, as any fire of a pause.
    job.run_at = now - 30 * MIN
    ScheduleSpan.objects.filter(job=job).update(run_at=job.run_at)
    Job.objects.filter(pk=job.pk).update(run_at=job.run_at)
    plan = job_verbs.resume(job, catch_up=True)
    assert plan["created"] == 1 and plan["next_fire_at"] is None
    [run] = runs_of(job)
    assert (run.scheduled_at, run.kind) == (job.run_at, "catch_up")
    job.refresh_from_db()
    assert job.status == JobStatus.FINISHED


# -- the schedule history -------------------------------------------------------


def test_the_history_keeps_each_end_and_one_off_time_in_its_spans(owner):
    now = db_now()
    job = make_job(owner, interval_seconds=60, end_at=now + 60 * MIN)
    job_verbs.edit(job, {"end_at": now + 120 * MIN})
    job_verbs.edit(job, {"interval_seconds": None, "run_at": now + 90 * MIN})
    spans = list(ScheduleSpan.objects.filter(job=job).order_by("started_at", "id"))
    assert [(s.interval_seconds, s.run_at, s.end_at) for s in spans] == [
        (60, None, now + 60 * MIN),
        (60, None, now + 120 * MIN),
        (None, now + 90 * MIN, now + 120 * MIN),
    ]
    assert [s.ended_at is None for s in spans] == [False, False, True]
    assert spans[2].schedule.next_fires(now, 5) == [now + 90 * MIN]
    assert spans[1].schedule.count_fires_between(now, now + 24 * 60 * MIN) == 120


@pytest.mark.parametrize("column", ["end_at", "run_at"])
def test_an_end_or_one_off_change_without_a_span_is_refused_at_commit(owner, column):
    job = make_job(owner, cron="@daily")
    with connection.cursor() as cur:
        # The job's insert is checked now, so that only the update is left.
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED")
    sql = {
        "end_at": "UPDATE jobs_job SET end_at = now() + interval '1 day' WHERE id = %s",
        "run_at": "UPDATE jobs_job SET cron = NULL, run_at = now() + interval '1 day'"
        " WHERE id = %s",
    }[column]
    with (
        pytest.raises((IntegrityError, InternalError, ProgrammingError)) as refused,
        transaction.atomic(),
        connection.cursor() as cur,
    ):
        cur.execute(sql, [job.pk])
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
    assert "schedule history" in str(refused.value)


# -- the auditor ----------------------------------------------------------------


def beat_dispatcher() -> None:
    now = db_now()
    ProcessHeartbeat.objects.create(
        name="dispatcher-test",
        kind="dispatcher",
        host="test",
        pid=1,
        started_at=now - 60 * MIN,
        last_seen=now,
    )


def delivered(job: Job) -> None:
    Run.objects.filter(job=job).update(state="succeeded", attempt=1)


def ended_job(owner) -> Job:
    """A 60 s job made 10 minutes ago that ended 5 minutes ago, dispatched
    minute by minute up to now: its fires are the first five minutes'."""
    now = db_now()
    born = now - 10 * MIN
    job = make_job(owner, interval_seconds=60, overlap_policy="allow")
    placed(job, born=born, first=born + MIN, end_at=now - 5 * MIN)
    tick_every_minute(job, born + MIN, now)
    delivered(job)
    return job


def one_off_job(owner) -> Job:
    """A one-off made 10 minutes ago whose time came 5 minutes ago, dispatched."""
    now = db_now()
    job = make_job(owner, run_at=now + MIN)
    run_at = now - 5 * MIN
    placed(job, born=now - 10 * MIN, first=run_at, run_at=run_at)
    tick_every_minute(job, run_at, now)
    delivered(job)
    return job


@pytest.mark.parametrize("alive", [True, False], ids=["dispatcher alive", "no dispatcher"])
def test_the_auditor_expects_no_fire_after_the_end(owner, alive):
    if alive:
        beat_dispatcher()
    job = ended_job(owner)
    assert len(runs_of(job)) == 5 and job.status == JobStatus.FINISHED
    report = audit()
    assert report.ok, report.render()
    assert (report.counts["slots"], report.counts["slots_run"]) == (5, 5)


@pytest.mark.parametrize("alive", [True, False], ids=["dispatcher alive", "no dispatcher"])
def test_the_auditor_still_finds_a_missing_fire_before_the_end(owner, alive):
    if alive:
        beat_dispatcher()
    job = ended_job(owner)
    gone = runs_of(job)[-1]
    gone.delete()
    [gap] = audit().violations
    assert (gap.rule, gap.scheduled_at) == (Rule.GAP, gone.scheduled_at)


def test_a_run_after_the_end_is_off_schedule(owner):
    job = ended_job(owner)
    last = runs_of(job)[-1]
    stray = Run.objects.create(job=job, scheduled_at=last.scheduled_at + MIN, state="succeeded")
    [off] = audit().violations
    assert (off.rule, off.run_id) == (Rule.OFF_SCHEDULE, str(stray.pk))


@pytest.mark.parametrize("alive", [True, False], ids=["dispatcher alive", "no dispatcher"])
def test_the_auditor_expects_a_one_off_s_one_fire_and_no_other(owner, alive):
    if alive:
        beat_dispatcher()
    job = one_off_job(owner)
    [run] = runs_of(job)
    assert run.scheduled_at == job.run_at and job.status == JobStatus.FINISHED
    report = audit()
    assert report.ok, report.render()
    assert (report.counts["slots"], report.counts["slots_run"]) == (1, 1)


@pytest.mark.parametrize("alive", [True, False], ids=["dispatcher alive", "no dispatcher"])
def test_the_auditor_reports_a_missing_one_off_fire(owner, alive):
    if alive:
        beat_dispatcher()
    job = one_off_job(owner)
    runs_of(job)[0].delete()
    [gap] = audit().violations
    assert (gap.rule, gap.scheduled_at, gap.job_id) == (Rule.GAP, job.run_at, str(job.pk))


def test_a_second_scheduled_run_of_a_one_off_is_off_schedule(owner):
    job = one_off_job(owner)
    stray = Run.objects.create(job=job, scheduled_at=job.run_at + MIN, state="succeeded")
    [off] = audit().violations
    assert (off.rule, off.run_id) == (Rule.OFF_SCHEDULE, str(stray.pk))

"""Dispatcher.tick against a real database."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.expressions import RawSQL

from dispatch import queries
from dispatch.dispatcher import Dispatcher
from jobs.models import Job
from runs import job_verbs, planning
from runs.models import Run
from tests.factories import at, make_job, rewrite_job

pytestmark = pytest.mark.django_db

T0 = at("2026-06-01T12:00:00")
S = dt.timedelta(seconds=1)


def due_at(job: Job, when: dt.datetime) -> Job:
    rewrite_job(job, next_fire_at=when, created_at=when, start_at=when)
    job.refresh_from_db()
    return job


def runs_of(job: Job):
    return list(Run.objects.filter(job=job).order_by("scheduled_at"))


def test_due_fire_becomes_one_pending_run_and_next_fire_advances(owner):
    job = due_at(make_job(owner, interval_seconds=60), T0)
    result = Dispatcher().tick(now=T0 + S)
    assert result.created == {"pending": 1}
    [run] = runs_of(job)
    assert (run.scheduled_at, run.state, run.kind, run.attempt) == (T0, "pending", "scheduled", 0)
    assert run.available_at == T0
    job.refresh_from_db()
    assert job.next_fire_at == T0 + 60 * S


def test_ticking_again_at_the_same_time_creates_nothing(owner):
    job = due_at(make_job(owner, interval_seconds=60), T0)
    Dispatcher().tick(now=T0 + S)
    assert Dispatcher().tick(now=T0 + S).created == {}
    assert len(runs_of(job)) == 1


def test_a_fire_inserted_twice_is_one_run(owner):
    """The unique (job, scheduled_at) key, not code, makes a second insert a no-op."""
    job = make_job(owner)
    advance = queries.Advance(id=job.pk, next_fire_at=T0 + S)
    row = (0, T0, "scheduled", "pending", "")
    assert queries.insert_runs_and_advance(T0, [advance], [row]) == {"pending": 1}
    assert queries.insert_runs_and_advance(T0, [advance], [row]) == {}
    assert len(runs_of(job)) == 1


def test_paused_jobs_are_not_dispatched(owner):
    job = due_at(make_job(owner), T0)
    job_verbs.pause(job, note="maintenance")
    # The pause recorded the fires already due (none may run); the dispatcher
    # adds nothing after it.
    recorded = runs_of(job)
    assert recorded and {r.state for r in recorded} <= {"missed", "skipped"}
    assert Dispatcher().tick(now=T0 + S).created == {}
    assert runs_of(job) == recorded


def test_outage_under_skip_records_missed_runs_and_resumes_in_the_future(owner):
    job = due_at(make_job(owner, interval_seconds=60, misfire_grace_seconds=30), T0)
    Dispatcher().tick(now=T0 + dt.timedelta(minutes=5, seconds=10))
    runs = runs_of(job)
    assert [r.state for r in runs] == ["missed"] * 5 + ["pending"]
    assert all(r.reason == "past grace" and r.available_at is None for r in runs[:5])
    job.refresh_from_db()
    assert job.next_fire_at == T0 + dt.timedelta(minutes=6)


def test_outage_under_catch_up_runs_exactly_max_catchup(owner):
    job = due_at(
        make_job(owner, interval_seconds=60, misfire_policy="catch_up", misfire_grace_seconds=5),
        T0,
    )
    Dispatcher().tick(now=T0 + dt.timedelta(minutes=9, seconds=30))
    runs = runs_of(job)
    assert [(r.kind, r.state) for r in runs] == [("scheduled", "missed")] * 7 + [
        ("catch_up", "pending")
    ] * 3
    assert {r.reason for r in runs[:7]} == {"over catch-up cap"}


def test_overlap_skip_records_a_fire_while_a_run_is_active(owner):
    job = due_at(make_job(owner, interval_seconds=60), T0)
    Dispatcher().tick(now=T0 + S)
    Dispatcher().tick(now=T0 + 61 * S)
    assert [(r.state, r.reason) for r in runs_of(job)] == [("pending", ""), ("skipped", "overlap")]


def test_overlap_queue_keeps_one_fire_waiting_behind_the_running_run(owner):
    job = due_at(make_job(owner, interval_seconds=60, overlap_policy="queue"), T0)
    Dispatcher().tick(now=T0 + S)
    Run.objects.filter(job=job).update(state="running", attempt=1)  # a worker claimed it
    for k in (1, 2):
        Dispatcher().tick(now=T0 + (1 + 60 * k) * S)
    assert [r.state for r in runs_of(job)] == ["running", "pending", "skipped"]
    job.refresh_from_db()
    assert job.next_fire_at == T0 + 180 * S


@pytest.mark.parametrize("first", ["pending", "retrying"])
def test_overlap_queue_never_keeps_two_runs_waiting(owner, first):
    """Nothing running and one run waiting (for a worker, or for its retry):
    the next fire is skipped, not queued as a second waiting run."""
    job = due_at(make_job(owner, interval_seconds=60, overlap_policy="queue"), T0)
    Dispatcher().tick(now=T0 + S)
    Run.objects.filter(job=job).update(state=first)
    for k in (1, 2):
        Dispatcher().tick(now=T0 + (1 + 60 * k) * S)
    assert [(r.state, r.reason) for r in runs_of(job)] == [
        (first, ""),
        ("skipped", "overlap"),
        ("skipped", "overlap"),
    ]


@pytest.mark.parametrize("policy", ["skip", "queue", "allow"])
@pytest.mark.parametrize("active", [None, "pending", "retrying", "running"])
def test_the_fast_path_and_the_planned_path_apply_one_overlap_rule(owner, policy, active):
    """The dispatcher's SQL fast path (dispatch/queries.py OVERLAP_SKIPS)
    decides a fire's overlap itself, and writes a skipped fire as the planned
    path does (runs/planning.py overlap_skips): the same state, reason,
    availability and end, for every policy beside every kind of active run.
    The planned path is made to take its job by a jitter of one second."""
    rows = {}
    for path, jitter in (("fast", 0), ("planned", 1)):
        job = due_at(
            make_job(owner, interval_seconds=60, overlap_policy=policy, jitter_seconds=jitter), T0
        )
        if active:
            Run.objects.create_for_fires(job, [T0 - 60 * S], kind="scheduled")
            Run.objects.filter(job=job).update(state=active, attempt=int(active == "running"))
        if path == "fast":
            assert queries.dispatch_simple_intervals(T0 + S, limit=10)[0] == 1
        else:
            assert Dispatcher().tick(now=T0 + S).jobs == 1
        run = Run.objects.get(job=job, scheduled_at=T0)
        rows[path] = (run.state, run.reason, run.available_at is None, run.finished_at)
    running, waiting = int(active == "running"), int(active in ("pending", "retrying"))
    skipped = planning.overlap_skips(policy, running, waiting)
    assert rows["fast"] == rows["planned"]
    assert rows["fast"][:3] == (("skipped", "overlap", True) if skipped else ("pending", "", False))


def test_overlap_allow_runs_side_by_side(owner):
    job = due_at(make_job(owner, interval_seconds=60, overlap_policy="allow"), T0)
    Dispatcher().tick(now=T0 + S)
    Dispatcher().tick(now=T0 + 61 * S)
    assert [r.state for r in runs_of(job)] == ["pending", "pending"]
    assert not any(r.exclusive for r in runs_of(job))


def test_jitter_delays_delivery_but_keeps_the_nominal_time(owner):
    job = due_at(make_job(owner, interval_seconds=3600, jitter_seconds=600), T0)
    Dispatcher().tick(now=T0 + S)
    [run] = runs_of(job)
    assert run.scheduled_at == T0
    assert T0 <= run.available_at < T0 + dt.timedelta(seconds=600)


def test_batches_drain_all_due_jobs(owner):
    jobs = [due_at(make_job(owner, interval_seconds=10), T0) for _ in range(25)]
    d = Dispatcher(batch_size=10)
    created = sum(d.tick(now=T0 + S).runs for _ in range(4))
    assert created == 25
    assert Run.objects.filter(job__in=jobs).count() == 25


def test_shards_split_the_jobs_without_overlap(owner):
    jobs = [due_at(make_job(owner, interval_seconds=10), T0) for _ in range(30)]
    counts = [Dispatcher(shard=(k, 3)).tick(now=T0 + S).runs for k in range(3)]
    assert sum(counts) == 30
    assert Run.objects.filter(job__in=jobs).count() == 30


def test_a_sharded_dispatcher_sleeps_until_its_own_shards_next_fire(owner):
    """Another shard's overdue job is not this dispatcher's work: it must not
    make this one poll at its minimum sleep."""
    from dispatch.dispatcher import MAX_SLEEP, MIN_SLEEP

    Job.objects.all().delete()
    jobs = [make_job(owner, interval_seconds=60) for _ in range(40)]
    in_shard = RawSQL("mod(hashtext(id::text) & 2147483647, 2)", [])
    shard_of = dict(Job.objects.annotate(k=in_shard).values_list("pk", "k"))
    mine = [j for j in jobs if shard_of[j.pk] == 0]
    theirs = [j for j in jobs if shard_of[j.pk] == 1]
    assert mine and theirs
    Job.objects.filter(pk__in=[j.pk for j in mine]).update(next_fire_at=T0 + S / 2)
    Job.objects.filter(pk__in=[j.pk for j in theirs]).update(next_fire_at=T0 - 30 * S)

    wait = Dispatcher(shard=(0, 2)).seconds_until_next_fire(now=T0)

    assert wait == pytest.approx(0.5)
    assert Dispatcher(shard=(1, 2)).seconds_until_next_fire(now=T0) == MIN_SLEEP
    assert Dispatcher().seconds_until_next_fire(now=T0 + 10 * S) == MIN_SLEEP
    assert Dispatcher(shard=(0, 2)).seconds_until_next_fire(now=T0 - 10 * S) == MAX_SLEEP


def test_cron_job_in_a_zone_fires_at_the_local_time(owner):
    job = make_job(owner, cron="0 9 * * *", timezone="Europe/Berlin", interval_seconds=None)
    nine_berlin = at("2026-06-02T07:00:00")  # CEST = UTC+2
    Job.objects.filter(pk=job.pk).update(next_fire_at=nine_berlin)
    Dispatcher().tick(now=nine_berlin + S)
    assert [r.scheduled_at for r in runs_of(job)] == [nine_berlin]
    job.refresh_from_db()
    assert job.next_fire_at == nine_berlin + dt.timedelta(days=1)


def test_auto_resume_at_resume_at(owner):
    job = make_job(owner)
    job_verbs.pause(job, note="until later", resume_at=at("2000-01-01T00:00:00"))
    Dispatcher()._auto_resume()
    job.refresh_from_db()
    assert job.state == "active" and job.next_fire_at is not None
    assert list(job.events.values_list("action", flat=True))[:2] == ["resumed", "paused"]


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("timezone", "US/Pacific-New", "time zone: 'US/Pacific-New'"),
        ("cron", "61 * * * *", "61 * * * *"),
    ],
)
def test_a_job_whose_schedule_cannot_be_read_is_paused_and_the_rest_fire(
    owner, column, value, problem
):
    """Rows written around the API's checks (SQL, an older tzdata) must not
    stop the batch: the bad job is paused with a note, the others fire."""
    cron = dict(cron="0 * * * *", interval_seconds=None)
    good = [make_job(owner, **cron), make_job(owner, **cron), make_job(owner)]
    bad = make_job(owner, **cron)
    for job in [*good, bad]:
        rewrite_job(job, next_fire_at=T0, created_at=T0, start_at=None)
    rewrite_job(bad, **{column: value})

    result = Dispatcher().tick(now=T0 + S)

    assert result.fires == 3
    assert all([r.scheduled_at for r in runs_of(job)] == [T0] for job in good)
    assert runs_of(bad) == []
    bad.refresh_from_db()
    assert (bad.state, bad.next_fire_at) == ("paused", None)
    assert bad.pause_note.startswith("paused by the system: its schedule cannot be read: ")
    assert problem in bad.pause_note
    event = bad.events.get(action="paused")
    assert event.channel == "system" and event.changes["pause_note"] == ["", bad.pause_note]
    assert Dispatcher().tick(now=T0 + 2 * S).jobs == 0


def test_the_fleet_row_is_beaten_during_a_long_drain(owner):
    """run_once ticks until nothing is due and only then does housekeeping; a
    drain of many batches must still beat the fleet row on schedule, or
    health reports the dispatcher dead while it works through an outage."""
    from dispatch.models import ProcessHeartbeat

    now = queries.db_now()
    for _ in range(3):
        due_at(make_job(owner, interval_seconds=3600), now - S)

    seen: list[bool] = []

    class Observed(Dispatcher):
        def tick(self, now=None):
            beaten = ProcessHeartbeat.objects.filter(name=self.registration.name).exists()
            seen.append(beaten)
            return super().tick(now)

    dispatcher = Observed(batch_size=1)
    dispatcher.run_once()
    # Four ticks (three batches of one, then an empty one); the row exists
    # from the second on, long before the housekeeping after the last.
    assert seen == [False, True, True, True]


def test_misfires_past_the_row_cap_are_counted_on_the_job_and_its_open_span(owner):
    """A per-minute cron a day behind: 100 missed rows, the newest; every older
    fire is added to missed_count (the job's and its open schedule span's),
    the first of them as missed_since. A second outage adds to the count and
    keeps the first missed_since; a job with nothing counted is untouched."""
    from jobs.models import ScheduleSpan

    start = T0 - dt.timedelta(days=1)
    job = due_at(make_job(owner, cron="* * * * *", misfire_grace_seconds=30), start)
    quiet = due_at(make_job(owner, cron="* * * * *", misfire_grace_seconds=30), T0)
    now = T0 + 10 * S
    Dispatcher().tick(now=now)

    fires = 24 * 60 + 1  # every minute in [start, T0]
    runs = runs_of(job)
    assert [r.state for r in runs].count("missed") == 100
    assert len(runs) == 101 and runs[-1].scheduled_at == T0  # T0 is within grace
    job.refresh_from_db()
    assert job.missed_count == fires - 101
    assert job.missed_since == start
    span = ScheduleSpan.objects.get(job=job, ended_at__isnull=True)
    assert span.missed_count == fires - 101
    quiet.refresh_from_db()
    assert (quiet.missed_count, quiet.missed_since) == (0, None)

    # A second day-long outage adds its own count; missed_since stays the first.
    later = T0 + dt.timedelta(days=2)
    Dispatcher().tick(now=later + 10 * S)
    job.refresh_from_db()
    second = (later - (T0 + 60 * S)) // (60 * S) + 1  # fires in [T0 + 1 min, later]
    assert job.missed_count == (fires - 101) + (second - 101)
    assert job.missed_since == start
    span = ScheduleSpan.objects.get(job=job, ended_at__isnull=True)
    assert span.missed_count == job.missed_count


def test_a_recovery_writes_at_most_the_row_budget_per_locked_batch(owner, monkeypatch):
    """30 per-minute cron jobs a day behind are ~101 rows each; with a budget
    of 500 rows a batch plans at most five of them (the sixth would pass the
    budget), leaves the rest due and untouched, and the drain takes as many
    batches as it needs: each batch's locks are short whatever the outage."""
    from dispatch import dispatcher as dispatcher_module

    monkeypatch.setattr(dispatcher_module, "ROW_BUDGET", 500)
    jobs = [due_at(make_job(owner, cron="* * * * *"), T0 - dt.timedelta(days=1)) for _ in range(30)]
    dispatcher = Dispatcher(batch_size=1000)
    first = dispatcher.tick(now=T0)
    assert first.more and 1 <= first.jobs <= 5
    assert first.runs <= 500 + 101
    untouched = Job.objects.filter(pk__in=[j.pk for j in jobs], next_fire_at__lt=T0)
    assert untouched.count() == 30 - first.jobs
    # The next batch locks only as many jobs as the budget lets through,
    # rather than locking a thousand to plan five.
    assert dispatcher._planned_limit <= 5
    second = dispatcher.tick(now=T0)
    assert second.jobs <= 5 and second.runs <= 500 + 101
    while dispatcher.tick(now=T0).more:
        pass
    assert not untouched.exists()
    for job in jobs:
        job.refresh_from_db()
        assert len(runs_of(job)) + job.missed_count == 24 * 60 + 1

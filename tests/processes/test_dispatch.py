"""Real ``manage.py dispatch`` processes against PostgreSQL (docs/design/guarantees.md)."""

from __future__ import annotations

import datetime as dt
import itertools
import signal
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from django.db.models import Count

from core.db import db_now
from dispatch.models import ProcessHeartbeat
from jobs.models import Job
from runs import job_verbs
from runs.models import Run
from tests.database import subprocess_database_url
from tests.factories import make_job, rewrite_job
from tests.processes.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]
S = dt.timedelta(seconds=1)


def fires_by_job(jobs) -> dict:
    fires = defaultdict(list)
    for job_id, scheduled_at in (
        Run.objects.filter(job__in=jobs)
        .order_by("scheduled_at")
        .values_list("job_id", "scheduled_at")
    ):
        fires[job_id].append(scheduled_at)
    return fires


@pytest.mark.pooler
def test_three_dispatchers_make_exactly_one_run_per_fire(owner, processes):
    """150 jobs under overlap allow (a run for every fire) and 50 under skip
    (no worker runs: each fire after the first is skipped behind the waiting
    run, or, where a dispatcher fell behind the job, the job is parked,
    docs/concepts/misfire-and-overlap.md "Parked while its run is active"),
    three dispatchers sharing them."""
    allow = [
        make_job(owner, interval_seconds=1, overlap_policy="allow", name=f"every-second-{k}")
        for k in range(150)
    ]
    skip = [make_job(owner, interval_seconds=1, name=f"parked-{k}") for k in range(50)]
    dispatchers = [processes.manage("dispatch", name=f"dispatch{k}") for k in range(3)]

    # However long three processes take to start on this machine: wait for a
    # dozen fires of every job, then look at all of them.
    def with_a_dozen_fires() -> set:
        rows = Run.objects.values("job").annotate(n=Count("id")).filter(n__gte=12)
        parked = Job.objects.filter(parked_since__isnull=False).values_list("pk", flat=True)
        return {row["job"] for row in rows} | set(parked)

    wait_until(
        lambda: len(with_a_dozen_fires() & {j.pk for j in allow + skip}) == 200,
        timeout=120,
        interval=0.5,
        message="12 fires of every job (or a skip job parked)",
    )
    for proc in dispatchers:
        assert processes.stop(proc, signal.SIGTERM) == 0

    fires = fires_by_job(allow + skip)
    assert len(fires) == 200
    for job in allow + skip:
        # A row may count several fires (a backlog's held-back ones, found
        # together at a slow start): each stands for its own and those after.
        counts = dict(Run.objects.filter(job=job).values_list("scheduled_at", "fires"))
        times = [at + k * S for at in fires[job.pk] for k in range(counts[at] or 1)]
        # No gap and no duplicate: consecutive fires are exactly one interval apart.
        assert all(b - a == S for a, b in itertools.pairwise(times)), job.name
    outcomes = set(Run.objects.filter(job__in=allow).values_list("state", "reason"))
    assert outcomes <= {("pending", ""), ("missed", "past grace")}
    # Each skip job: one waiting run, and every later fire skipped behind it
    # (fires found together at a slow start read "no dispatcher"); a job
    # that a dispatcher found behind is parked on its last row, which stands
    # for every fire since.
    for job in skip:
        rows = list(Run.objects.filter(job=job).order_by("scheduled_at"))
        assert [r.state for r in rows].count("pending") == 1, job.name
        assert {(r.state, r.reason) for r in rows} <= {
            ("pending", ""),
            ("skipped", "overlap"),
            ("missed", "no dispatcher"),
        }, job.name
        assert all(r.fires for r in rows[:-1])
        job.refresh_from_db()
        if rows[-1].fires is None:
            assert (job.parked_since, job.next_fire_at) == (rows[-1].scheduled_at, None)
        else:
            assert job.parked_since is None


def test_dispatcher_outage_outcomes_follow_each_misfire_policy(owner, processes):
    common = dict(interval_seconds=1, misfire_grace_seconds=2, overlap_policy="allow")
    # The dispatcher is up before the jobs exist: a start-up slower than the
    # 2 s grace (a busy machine) would otherwise make misfires before the outage.
    dispatcher = processes.manage("dispatch", "--name", "before", name="before")
    wait_until(
        lambda: ProcessHeartbeat.objects.filter(name="before").exists(),
        timeout=60,
        message="the dispatcher to start",
    )
    skip = make_job(owner, name="skip", misfire_policy="skip", **common)
    catch_up = make_job(owner, name="catch-up", misfire_policy="catch_up", max_catchup=3, **common)
    wait_until(
        lambda: Run.objects.filter(job=skip).count() >= 2, timeout=60, message="fires before"
    )
    assert processes.stop(dispatcher) == 0
    stopped = db_now()
    wait_until(
        lambda: db_now() - stopped >= dt.timedelta(seconds=8),
        timeout=60,
        interval=0.5,
        message="an outage longer than the grace",
    )
    processes.manage("dispatch", name="after")
    # The outcomes of the outage are the runs made after it.
    recovered = Run.objects.filter(created_at__gt=stopped)
    wait_until(
        lambda: recovered.filter(job=catch_up, kind="catch_up").exists(),
        timeout=60,
        message="recovery",
    )
    # skip: the fires past grace are recorded as missed, and none is delivered.
    missed = recovered.filter(job=skip, state="missed")
    assert missed.count() >= 4
    assert set(missed.values_list("reason", flat=True)) == {"past grace"}
    assert not missed.filter(attempt__gt=0).exists()
    assert not Run.objects.filter(job=skip, kind="catch_up").exists()
    # catch_up: exactly max_catchup catch-up runs, the older misfires missed.
    assert recovered.filter(job=catch_up, kind="catch_up").count() == 3
    older = recovered.filter(job=catch_up, state="missed")
    assert older.count() >= 1
    assert set(older.values_list("reason", flat=True)) == {"over catch-up cap"}
    newest_missed = older.order_by("-scheduled_at").first().scheduled_at
    oldest_catch_up = (
        recovered.filter(job=catch_up, kind="catch_up").order_by("scheduled_at").first()
    )
    assert newest_missed < oldest_catch_up.scheduled_at
    for job in (skip, catch_up):
        times = fires_by_job([job])[job.pk]
        assert all(b - a == S for a, b in itertools.pairwise(times)), job.name


def test_dispatcher_writes_its_heartbeat_and_leaves_on_sigterm(owner, processes):
    proc = processes.manage("dispatch", "--name", "beating")
    wait_until(lambda: ProcessHeartbeat.objects.filter(name="beating").exists(), message="a beat")
    assert processes.stop(proc) == 0
    assert not ProcessHeartbeat.objects.filter(name="beating").exists()


def test_overlap_seen_at_the_receiver(owner, processes, receiver):
    """Under skip and queue no two deliveries of one job are in flight at once;
    under allow they are."""
    exclusive = [
        make_job(owner, name=p, interval_seconds=1, overlap_policy=p, url=receiver.url("slow/2.5"))
        for p in ("skip", "queue")
    ]
    processes.manage("dispatch")
    processes.manage("work", "--lease-seconds", "10")
    wait_until(
        lambda: Run.objects.filter(job__in=exclusive, state="succeeded").count() >= 6,
        timeout=90,
        message="several deliveries of the exclusive jobs",
    )
    assert receiver.stats()["max_in_flight_per_job"] == 1
    assert Run.objects.filter(job=exclusive[0], state="skipped", reason="overlap").exists()
    assert Run.objects.filter(job=exclusive[1], state="skipped", reason="overlap").exists()

    for job in exclusive:
        job_verbs.pause(job)
    make_job(
        owner,
        name="allow",
        interval_seconds=1,
        overlap_policy="allow",
        url=receiver.url("slow/2.5"),
    )
    receiver.reset_stats()
    wait_until(
        lambda: receiver.stats()["max_in_flight_per_job"] >= 2,
        timeout=60,
        message="overlapping deliveries under allow",
    )


def test_a_job_whose_schedule_cannot_be_read_does_not_stop_the_dispatcher(owner, processes):
    """A zone this host's tzdata lacks, set by SQL: that job is paused, the
    dispatcher keeps running, and every other job keeps firing."""
    # No worker runs: the interval jobs allow overlap, so each fire is a run.
    good = [
        make_job(owner, interval_seconds=1, overlap_policy="allow", name=f"good-{k}")
        for k in range(5)
    ]
    good.append(make_job(owner, cron="* * * * *", interval_seconds=None, name="good-cron"))
    bad = make_job(owner, cron="* * * * *", interval_seconds=None, name="bad-zone")
    Job.objects.filter(pk__in=[good[-1].pk, bad.pk]).update(next_fire_at=db_now())
    rewrite_job(bad, timezone="US/Pacific-New")
    dispatcher = processes.manage("dispatch")

    wait_until(
        lambda: Job.objects.filter(pk=bad.pk, state="paused").exists(),
        timeout=60,
        message="the bad job to be paused",
    )
    wait_until(
        lambda: all(Run.objects.filter(job=job).count() >= (1 if job.cron else 3) for job in good),
        timeout=60,
        message="fires of every good job",
    )
    assert dispatcher.poll() is None, "the dispatcher exited"
    assert processes.stop(dispatcher) == 0
    bad.refresh_from_db()
    assert "cannot be read" in bad.pause_note and "US/Pacific-New" in bad.pause_note
    assert not Run.objects.filter(job=bad).exists()


@pytest.mark.pooler
def test_fires_keep_coming_while_claims_hold_the_floor_and_the_raise_waits(owner, processes):
    """Regression: the dispatcher's housekeeping raised the active floor with
    a plain ``FOR UPDATE`` on its row, which the claims hold FOR SHARE. Behind
    overlapping claims it waited for ever (new share locks do not queue
    behind it), and the only dispatcher made no fires. Here another
    connection holds the row FOR SHARE for 20 s, as a claim would: fires go on
    being made on time, the raise is left for later rounds
    (runs/partitions.py FLOOR_LOCK_TIMEOUT), and it happens once the lock is
    gone. With the plain wait, no fire of those 20 s is made until the end."""
    job = make_job(owner, interval_seconds=1, overlap_policy="allow", name="every-second")
    runs = Run.objects.filter(job=job)
    proc = processes.manage("dispatch", name="dispatch")
    wait_until(lambda: runs.count() >= 2, timeout=60, message="the dispatcher's first fires")
    url = subprocess_database_url()
    low = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    hold = psycopg.connect(url)
    try:
        # A floor far below every run, held FOR SHARE: the next housekeeping
        # round would raise it. A round that ran between the update and the
        # hold raised it already: then set it and hold it again.
        def held_low() -> bool:
            hold.rollback()
            with psycopg.connect(url, autocommit=True) as setup:
                setup.execute("UPDATE runs_active_floor SET since = %s", [low])
            (since,) = hold.execute("SELECT since FROM runs_active_floor FOR SHARE").fetchone()
            return since == low

        wait_until(held_low, timeout=60, message="the low floor held FOR SHARE")
        held_from = db_now()
        # Four housekeeping rounds (one every 5 s) meet the held row.
        wait_until(lambda: db_now() - held_from >= 20 * S, timeout=60, message="20 s held")
        held_until = db_now()
        assert floor_now() == low  # not raised meanwhile
    finally:
        hold.close()
    during = runs.filter(scheduled_at__gt=held_from, scheduled_at__lte=held_until - 2 * S)
    assert during.count() >= 17
    late = [run.created_at - run.scheduled_at for run in during]
    print(f"{during.count()} fires made while the floor was held, the latest {max(late)} late")
    # On time: made within a few seconds however busy the machine (the wait
    # this guards against made them 20 s late).
    assert max(late) < 5 * S, late
    yesterday = dt.datetime.combine(db_now().date(), dt.time(), tzinfo=dt.UTC) - dt.timedelta(1)
    wait_until(lambda: floor_now() >= yesterday, timeout=60, message="the raise once released")
    assert processes.stop(proc) == 0
    assert "active floor not raised" in Path(proc.log_path).read_text()


def floor_now() -> dt.datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT since FROM runs_active_floor")
        return cur.fetchone()[0]

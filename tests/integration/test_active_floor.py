"""The active floor (runs/partitions.py): every unfinished run is scheduled at
or after it, and the claims and the dispatcher's ticks plan only the day
partitions from it on. Each test below fails with its guard removed: the
trigger that lowers the floor, the lock that keeps a raise behind an insert in
progress, the FOR SHARE that keeps a reader's floor, the bound in the hot
statements."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from runs import leases, partitions
from runs.models import Run, RunKind
from tests.factories import make_job, rewrite_job
from tests.integration import races
from tests.polling import wait_until

DAY = dt.timedelta(days=1)


def day_start(at: dt.datetime) -> dt.datetime:
    return dt.datetime.combine(at.astimezone(dt.UTC).date(), dt.time(), tzinfo=dt.UTC)


def floor() -> dt.datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT since FROM runs_active_floor")
        return cur.fetchone()[0]


def set_floor(since: dt.datetime) -> None:
    with connection.cursor() as cur:
        cur.execute("UPDATE runs_active_floor SET since = %s", [since])


def claimed_ids(limit: int = 50) -> set:
    return {c.run_id for c in leases.claim("w1", limit=limit, lease_seconds=30)}


def held_open(first: Callable[[], object], then: Callable[[], object] = lambda: None):
    """On another connection, one transaction: ``first``, then a wait until
    the returned event is set, then ``then`` (its value is the thread's
    result), then the commit. Returns once ``first`` is done."""
    done, release = threading.Event(), threading.Event()

    def body() -> object:
        with transaction.atomic():
            first()
            done.set()
            release.wait(30)
            return then()

    other = races.start(body)
    assert done.wait(30)
    return other, release


@pytest.mark.django_db
@pytest.mark.parametrize("own_partition", [False, True])
def test_a_backfill_older_than_the_floor_lowers_it_and_its_run_is_claimed(owner, own_partition):
    """Lowering (the trigger of migration 0011), with the old day in the
    default partition and in a day partition of its own. With the trigger
    disabled, the floor stays at yesterday and no claim ever sees the run."""
    now = db_now()
    old = now - 5 * DAY
    if own_partition:
        with connection.cursor() as cur:
            partitions._create_day(cur, old.date())
    assert partitions.raise_active_floor(now) == day_start(now) - DAY
    assert floor() == day_start(now) - DAY
    job = make_job(owner, overlap_policy="allow")
    Run.objects.create_for_fires(job, [old], kind=RunKind.BACKFILL)
    assert floor() == day_start(old)
    run = Run.objects.get(job=job)
    assert claimed_ids() == {run.pk}
    # While it is unfinished, a raise keeps the floor at its day.
    assert partitions.raise_active_floor(now) == day_start(old)


@pytest.mark.django_db
def test_a_retried_run_older_than_the_floor_is_claimable_at_once(owner):
    """Regression: an operator's retry moves a failed run back to waiting
    without an insert, so the trigger did not lower the floor, and no claim
    saw a run older than it until the next housekeeping lowered it
    (runs/partitions.py lower_active_floor, called by Run.retry)."""
    now = db_now()
    job = make_job(owner, overlap_policy="allow")
    Run.objects.create_for_fires(job, [now - 5 * DAY], kind=RunKind.BACKFILL)
    run = Run.objects.get(job=job)
    Run.objects.filter(pk=run.pk).update(state="failed", finished_at=now)
    assert partitions.raise_active_floor(now) == day_start(now) - DAY
    run.refresh_from_db()
    run.retry()
    assert floor() == day_start(run.scheduled_at)
    assert claimed_ids() == {run.pk}


@pytest.mark.django_db
def test_a_raise_stops_at_the_oldest_unfinished_run_and_passes_finished_ones(owner):
    now = db_now()
    set_floor(dt.datetime.min.replace(tzinfo=dt.UTC))
    job = make_job(owner, overlap_policy="allow")
    Run.objects.create_for_fires(job, [now - 9 * DAY, now - 3 * DAY], kind=RunKind.BACKFILL)
    oldest, newer = Run.objects.filter(job=job).order_by("scheduled_at")
    assert partitions.raise_active_floor(now) == day_start(oldest.scheduled_at)
    Run.objects.filter(pk=oldest.pk).update(state="cancelled", finished_at=now)
    assert partitions.raise_active_floor(now) == day_start(newer.scheduled_at)
    Run.objects.filter(pk=newer.pk).update(state="cancelled", finished_at=now)
    assert partitions.raise_active_floor(now) == day_start(now) - DAY


@pytest.mark.django_db(transaction=True)
def test_a_raise_never_passes_a_run_written_but_not_yet_committed(owner):
    """The raise holds FLOOR_LOCK_KEY exclusively, trying; the trigger holds
    it shared until its insert commits. Without the lock, the raise computes
    past the uncommitted run, and once that commits no claim sees it."""
    now = db_now()
    set_floor(dt.datetime.min.replace(tzinfo=dt.UTC))  # the insert has nothing to lower
    job = make_job(owner, overlap_policy="allow")
    other, release = held_open(
        lambda: Run.objects.create_for_fires(job, [now - 5 * DAY], kind=RunKind.BACKFILL)
    )
    try:
        assert partitions.raise_active_floor(now) is None  # an insert in progress
    finally:
        release.set()
        other.result()
    assert partitions.raise_active_floor(now) == day_start(now - 5 * DAY)
    assert claimed_ids() == {Run.objects.get(job=job).pk}


@pytest.mark.django_db(transaction=True)
def test_a_lowering_waits_for_the_transactions_that_read_the_floor(owner):
    """A claim or a tick reads the floor FOR SHARE: an insert that lowers it
    waits until they end, so none of them can miss its run behind a floor it
    read before. Without FOR SHARE the insert goes through at once."""
    now = db_now()
    partitions.raise_active_floor(now)
    job = make_job(owner, overlap_policy="allow")
    first, release = held_open(partitions.now_and_floor)
    try:
        second = races.start(
            lambda: Run.objects.create_for_fires(job, [now - 5 * DAY], kind=RunKind.BACKFILL)
        )
        wait_until(lambda: races.waits_for_a_lock(second.pid), message="the lowering waits")
    finally:
        release.set()
        first.result()
    assert second.result() == 1
    assert floor() == day_start(now - 5 * DAY)


@pytest.mark.django_db(transaction=True)
def test_a_raise_beside_a_tick_that_writes_runs_does_not_deadlock(owner, monkeypatch):
    """Regression: the raise took the advisory lock, then waited for the
    floor's row, which a tick held FOR SHARE; the tick's insert then waited
    for the advisory lock in its trigger, and PostgreSQL aborted one of the
    two as a deadlock. The raise now takes the row first. It waits for the
    row long enough here to be seen waiting (a dispatcher gives up after
    FLOOR_LOCK_TIMEOUT: the next test)."""
    monkeypatch.setattr(partitions, "FLOOR_LOCK_TIMEOUT", "30s")
    now = db_now()
    job = make_job(owner, overlap_policy="allow")
    ticking, go = held_open(
        partitions.now_and_floor,
        lambda: Run.objects.create_for_fires(job, [now], kind=RunKind.SCHEDULED),
    )
    try:
        raising = races.start(lambda: partitions.raise_active_floor(now))
        wait_until(lambda: races.waits_for_a_lock(raising.pid), message="the raise waits")
    finally:
        go.set()
    assert ticking.result() == 1
    # The tick's commit releases its hold on the floor's row and its advisory
    # lock in no set order: the raise can wake in between, find the advisory
    # lock still taken and leave the floor for the next round (None), which
    # is how a dispatcher behaves. Under load that happened in about 1 run of
    # 4. What this test guards is the deadlock: neither side failed.
    floor_set = raising.result()
    if floor_set is None:
        floor_set = partitions.raise_active_floor(now)
    assert floor_set == day_start(now) - DAY


@pytest.mark.django_db(transaction=True)
def test_a_raise_gives_up_on_a_row_the_claims_hold_and_comes_back(owner):
    """The claims and ticks hold the floor's row FOR SHARE, and a stream of
    them can hold it for ever: the raise waits FLOOR_LOCK_TIMEOUT at most,
    leaves the floor for the next round, and raises it once the row is free.
    Without the timeout the raise waits for as long as the row is held (the
    dispatcher's own loop with it: tests/processes/test_dispatch.py)."""
    now = db_now()
    set_floor(dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    holder, release = held_open(partitions.now_and_floor)
    try:
        raising = races.start(lambda: partitions.raise_active_floor(now))
        wait_until(lambda: not raising.is_alive(), timeout=30, message="the raise gives up")
        assert raising.result() is None
        assert floor() == dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    finally:
        release.set()
        holder.result()
    assert partitions.raise_active_floor(now) == day_start(now) - DAY


def _partition_days(node: dict) -> set[dt.date]:
    days = set()
    name = node.get("Relation Name", "")
    if name.startswith("runs_run_p"):
        days.add(dt.datetime.strptime(name[-8:], "%Y%m%d").date())
    for child in node.get("Plans", []):
        days |= _partition_days(child)
    return days


def _planned_days(statements: list[tuple[str, object]]) -> set[dt.date]:
    days: set[dt.date] = set()
    with connection.cursor() as cur:
        for sql, params in statements:
            cur.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            plan = cur.fetchone()[0]
            days |= _partition_days(plan[0]["Plan"])
    return days


@pytest.mark.django_db
def test_claims_and_ticks_plan_only_the_days_from_the_floor_on(owner, other_owner):
    """Thirty days of partitions, as retention keeps by default: the
    statements a claim and a tick send, explained as sent, reach no day
    before yesterday. Each statement without its bound reaches all 30."""
    now = db_now()
    today = now.date()
    with connection.cursor() as cur:
        existing = set(partitions.day_partitions())
        for k in range(1, 31):
            if today - k * DAY not in existing:
                partitions._create_day(cur, today - k * DAY)
    assert partitions.raise_active_floor(now) == day_start(now) - DAY
    # Due runs of two owners (the fair claim) and an expired lease.
    for who in (owner, other_owner):
        job = make_job(who, overlap_policy="skip")
        Run.objects.create_for_fires(job, [now - dt.timedelta(minutes=1)], kind=RunKind.SCHEDULED)
    # A due interval job (the tick's fast path) and a due job under skip
    # with a run waiting (its planned path and the active counts).
    fast = make_job(owner, interval_seconds=60, overlap_policy="skip")
    rewrite_job(fast, next_fire_at=now - dt.timedelta(seconds=1), created_at=now - DAY)
    planned = make_job(owner, cron="* * * * *", overlap_policy="skip")
    rewrite_job(planned, next_fire_at=now - dt.timedelta(seconds=1), created_at=now - DAY)
    sent: list[tuple[str, object]] = []

    def keep(execute, sql, params, many, context):
        if "runs_run" in sql and not sql.lstrip().startswith("SET"):
            sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        assert len(leases.claim("w1", limit=10, lease_seconds=30)) == 2
        result = Dispatcher().tick(now=now)
    assert result.jobs == 2
    assert len(sent) >= 6, [s for s, _ in sent]
    days = _planned_days(sent)
    assert days, "no day partition in the plans"
    assert min(days) >= today - DAY, sorted(days)

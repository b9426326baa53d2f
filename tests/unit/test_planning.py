"""The misfire and overlap rules of docs/concepts/misfire-and-overlap.md, case by case
(pure)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from runs.planning import MAX_MISSED_ROWS, DueJob, overlap_skips, plan_job

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def job(**kw) -> DueJob:
    base = dict(
        id=uuid.uuid4(),
        cron=None,
        interval_seconds=60,
        timezone="UTC",
        start_at=None,
        created_at=T0,
        next_fire_at=T0,
        misfire_policy="skip",
        max_catchup=3,
        misfire_grace_seconds=60,
        overlap_policy="skip",
    )
    base.update(kw)
    return DueJob(**base)


def states(plan):
    return [(r.scheduled_at - T0).total_seconds() for r in plan.runs], [
        (r.kind, r.state, r.reason) for r in plan.runs
    ]


def test_on_time_fire_runs_and_advances_one_interval():
    plan = plan_job(job(), T0 + dt.timedelta(seconds=1), running=0, waiting=0)
    assert [(r.scheduled_at, r.state) for r in plan.runs] == [(T0, "pending")]
    assert plan.next_fire_at == T0 + dt.timedelta(seconds=60)


def test_late_fire_within_grace_is_delayed_not_missed():
    plan = plan_job(job(), T0 + dt.timedelta(seconds=59), running=0, waiting=0)
    assert [r.state for r in plan.runs] == ["pending"]


def test_skip_policy_records_misfires_as_missed_and_continues_from_the_future():
    # 10 minutes of outage, interval 60 s, grace 60 s.
    now = T0 + dt.timedelta(minutes=10, seconds=5)
    plan = plan_job(job(), now)
    offsets, kinds = states(plan)
    # fires at 0..600 s; the one at 600 s is within grace and runs.
    assert offsets == [60.0 * k for k in range(11)]
    assert kinds[:10] == [("scheduled", "missed", "past grace")] * 10
    assert kinds[10] == ("scheduled", "pending", "")
    assert plan.next_fire_at == T0 + dt.timedelta(minutes=11)


def test_catch_up_runs_the_most_recent_max_catchup_misfires_oldest_first():
    now = T0 + dt.timedelta(minutes=10, seconds=5)
    plan = plan_job(job(misfire_policy="catch_up", misfire_grace_seconds=1), now)
    catch_up = [r for r in plan.runs if r.kind == "catch_up"]
    missed = [r for r in plan.runs if r.state == "missed"]
    assert [r.scheduled_at for r in catch_up] == [T0 + dt.timedelta(minutes=m) for m in (8, 9, 10)]
    assert all(r.reason == "over catch-up cap" for r in missed)
    assert len(missed) == 8


def test_missed_rows_are_capped_and_the_rest_only_counted():
    now = T0 + dt.timedelta(days=1)
    plan = plan_job(job(interval_seconds=1, misfire_grace_seconds=1), now)
    assert plan.count("missed") == MAX_MISSED_ROWS
    # 86,401 fires in [T0, now]; the last two are within the 1 s grace: the
    # first of them runs, the second is missed behind it (no dispatcher).
    assert plan.missed_counted == 86_400 + 1 - 1 - MAX_MISSED_ROWS
    assert plan.missed_since == T0
    # The rows recorded are the newest missed fires.
    missed = [(r.scheduled_at, r.reason) for r in plan.runs if r.state == "missed"]
    assert missed[-2:] == [(now - dt.timedelta(seconds=2), "past grace"), (now, "no dispatcher")]
    assert plan.next_fire_at == now + dt.timedelta(seconds=1)


def test_nothing_counted_when_every_misfire_has_a_row():
    plan = plan_job(job(), T0 + dt.timedelta(minutes=10, seconds=5))
    assert (plan.missed_counted, plan.missed_since) == (0, None)


def cron_job(**kw) -> DueJob:
    return job(cron="* * * * *", interval_seconds=None, **kw)


def test_a_long_cron_backlog_under_catch_up_runs_the_newest_fires():
    """A per-minute cron 200 days (288,000 fires) behind: the catch-up runs
    are the newest max_catchup misfires before now, not fires from months
    ago; the missed rows are the 100 before those, and every older fire is
    counted exactly, never listed."""
    start = T0 - dt.timedelta(days=200)
    now = T0 + dt.timedelta(seconds=30)
    plan = plan_job(
        cron_job(next_fire_at=start, misfire_policy="catch_up", misfire_grace_seconds=45), now
    )
    catch_up = [r.scheduled_at for r in plan.runs if r.kind == "catch_up"]
    missed = [(r.scheduled_at, r.reason) for r in plan.runs if r.state == "missed"]
    minute = dt.timedelta(minutes=1)
    assert catch_up == [T0 - 3 * minute, T0 - 2 * minute, T0 - minute]
    # T0 itself is 30 s old, within the 45 s grace, but the catch-up runs
    # wait ahead of it (overlap skip): no dispatcher ran when it was due.
    # It shares the 100 missed rows with the newest misfires before those.
    assert missed == [
        (T0 - (3 + k) * minute, "over catch-up cap") for k in range(MAX_MISSED_ROWS - 1, 0, -1)
    ] + [(T0, "no dispatcher")]
    total = 200 * 1440 + 1  # every minute in [start, T0]
    assert plan.missed_counted == total - 3 - MAX_MISSED_ROWS
    assert plan.missed_since == start
    assert plan.next_fire_at == T0 + minute


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("policy", ["skip", "catch_up"])
def test_counts_are_exact_across_dst(zone, policy):
    """Counted + listed = every fire of the outage, whatever the zone does.
    Days to months of a half-hourly wall-clock cron over a spring-forward and a
    fall-back, checked against plain enumeration."""
    j = job(
        cron="*/30 * * * *",
        interval_seconds=None,
        timezone=zone,
        next_fire_at=dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
        misfire_policy=policy,
        misfire_grace_seconds=1,
    )
    for now in (
        dt.datetime(2026, 3, 10, 0, 0, 5, tzinfo=dt.UTC),
        dt.datetime(2026, 4, 10, 0, 0, 5, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 9, 0, 0, 5, tzinfo=dt.UTC),
    ):
        fires = []
        for f in j.schedule.iter_fires(j.next_fire_at, inclusive=True):
            if f > now:
                break
            fires.append(f)
        plan = plan_job(j, now)
        assert plan.missed_counted + len(plan.runs) == len(fires)
        assert [r.scheduled_at for r in plan.runs] == fires[-len(plan.runs) :]
        assert plan.missed_since == fires[0]
        assert plan.next_fire_at == j.schedule.next_fire(now)


def test_interval_and_cron_count_the_same_backlog_alike():
    """A 60 s interval and a per-minute cron, both a day behind, plan alike."""
    now = T0 + dt.timedelta(days=1, seconds=5)
    by_interval = plan_job(job(), now)
    by_cron = plan_job(cron_job(), now)
    assert by_interval.missed_counted == by_cron.missed_counted == 1440 + 1 - 1 - MAX_MISSED_ROWS
    assert [r.scheduled_at for r in by_interval.runs] == [r.scheduled_at for r in by_cron.runs]


@pytest.mark.parametrize(
    ("policy", "running", "waiting", "expected"),
    [
        ("skip", 0, 0, ["pending"]),
        ("skip", 1, 0, ["skipped"]),
        ("skip", 0, 1, ["skipped"]),
        ("queue", 0, 0, ["pending"]),
        ("queue", 1, 0, ["pending"]),
        ("queue", 1, 1, ["skipped"]),
        ("queue", 0, 1, ["skipped"]),
        ("allow", 5, 5, ["pending"]),
    ],
)
def test_overlap_policy_given_running_and_waiting_runs(policy, running, waiting, expected):
    plan = plan_job(job(overlap_policy=policy), T0, running=running, waiting=waiting)
    assert [r.state for r in plan.runs] == expected
    assert all(r.reason == "overlap" for r in plan.runs if r.state == "skipped")


def test_several_on_time_fires_in_one_tick_respect_overlap_among_themselves():
    # interval 10 s, grace 60 s, dispatcher 25 s late: three fires within grace.
    # Under queue the first waits (behind the running run); the others do
    # not run, because the first of the backlog waits, not the running run.
    now = T0 + dt.timedelta(seconds=25)
    plan = plan_job(job(interval_seconds=10, overlap_policy="queue"), now, running=1, waiting=0)
    assert [(r.state, r.reason) for r in plan.runs] == [
        ("pending", ""),
        ("missed", "no dispatcher"),
        ("missed", "no dispatcher"),
    ]


@pytest.mark.parametrize("policy", ["skip", "queue"])
def test_a_backlog_within_grace_runs_its_first_fire_and_the_rest_read_no_dispatcher(policy):
    """A dispatcher back after 45 s finds five fires of a 10 s job within
    its 60 s grace: the first runs, and the others are missed because no
    dispatcher ran, not skipped for an overlap (no run of the job was
    active: the first of the backlog is what holds them back)."""
    now = T0 + dt.timedelta(seconds=45)
    plan = plan_job(job(interval_seconds=10, overlap_policy=policy), now)
    assert states(plan) == (
        [0.0, 10.0, 20.0, 30.0, 40.0],
        [("scheduled", "pending", "")] + [("scheduled", "missed", "no dispatcher")] * 4,
    )


def test_fires_behind_catch_up_runs_read_no_dispatcher():
    """Under catch_up and skip, the catch-up runs wait first; the fire within
    grace behind them did not run because of the outage, not an overlap."""
    now = T0 + dt.timedelta(minutes=10, seconds=5)
    plan = plan_job(job(misfire_policy="catch_up", misfire_grace_seconds=30), now)
    assert [(r.kind, r.state, r.reason) for r in plan.runs][-4:] == [
        ("catch_up", "pending", ""),
        ("catch_up", "pending", ""),
        ("catch_up", "pending", ""),
        ("scheduled", "missed", "no dispatcher"),
    ]


@pytest.mark.parametrize(("running", "waiting"), [(1, 0), (0, 1)])
def test_a_backlog_behind_a_run_already_active_reads_overlap(running, waiting):
    """A run from before the gap still running (or waiting) holds back every
    fire of the backlog, as it would have with a dispatcher alive: overlap."""
    now = T0 + dt.timedelta(seconds=45)
    plan = plan_job(job(interval_seconds=10), now, running=running, waiting=waiting)
    assert [(r.state, r.reason) for r in plan.runs] == [("skipped", "overlap")] * 5


def test_missed_rows_of_a_backlog_share_the_row_cap_with_misfires():
    """A 1 s job with a 60 s grace, a day behind: the 59 fires within grace
    behind the first are missed (no dispatcher), and with the misfires'
    rows they stay within the cap of 100 missed rows, the newest; every
    older fire is counted."""
    now = T0 + dt.timedelta(days=1)
    plan = plan_job(job(interval_seconds=1), now)
    missed = [r for r in plan.runs if r.state == "missed"]
    assert len(missed) == MAX_MISSED_ROWS
    assert [r.reason for r in missed].count("no dispatcher") == 60
    assert plan.count("pending") == 1
    assert plan.missed_counted + len(plan.runs) == 86_400 + 1
    assert plan.missed_since == T0
    assert [r.scheduled_at for r in plan.runs] == sorted(r.scheduled_at for r in plan.runs)
    assert plan.runs[-1].scheduled_at == now


def test_queue_never_plans_a_second_waiting_run():
    """A retrying run is waiting too: a fire behind it is skipped."""
    plan = plan_job(job(overlap_policy="queue"), T0, running=0, waiting=1)
    assert [(r.state, r.reason) for r in plan.runs] == [("skipped", "overlap")]


def test_cron_job_fires_follow_the_schedule():
    j = job(cron="*/15 * * * *", interval_seconds=None)
    plan = plan_job(j, T0 + dt.timedelta(minutes=31), running=0, waiting=0)
    assert [r.state for r in plan.runs][-1] == "pending"
    assert plan.next_fire_at == T0 + dt.timedelta(minutes=45)


@pytest.mark.parametrize("policy", ["skip", "queue", "allow"])
def test_no_policy_skips_a_fire_while_nothing_is_active(policy):
    """The dispatcher's SQL fast path relies on this: it takes only jobs for
    which the rule cannot skip their one fire, and never applies it itself."""
    assert not overlap_skips(policy, 0, 0)
    assert not overlap_skips("allow", 1_000, 1_000)


def test_queue_does_not_skip_a_fire_behind_a_running_run_alone():
    """The fast path takes a queue job whose only active run is running."""
    assert not overlap_skips("queue", 1, 0)
    assert overlap_skips("skip", 1, 0)

"""End dates and one-off schedules (jobs/schedules.py), and the dispatcher's
plan for them (runs/planning.py). Pure: no database, no clock.

Every way of reading a schedule agrees with ``iter_fires``, listed one by
one: the counter, the newest-fires search and the window list, across a
daylight-saving change, with the end on a fire, between fires and before
the first.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.schedules import Schedule, ScheduleError, end_problem, ending_warnings
from runs.planning import DueJob, plan_job

MIN = timedelta(minutes=1)
T0 = datetime(2026, 3, 28, 0, 0, tzinfo=UTC)  # Europe/Berlin springs forward on the 29th


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


SCHEDULES = [
    Schedule("30 2 * * *", None, "Europe/Berlin", end_at=utc("2026-04-01T00:30:00Z")),
    Schedule("*/20 * * * *", None, "Europe/Berlin", end_at=utc("2026-03-29T02:00:00Z")),
    Schedule(None, 3600, "UTC", anchor=T0, end_at=T0 + 30 * 60 * MIN),
    Schedule(None, 3600, "UTC", anchor=T0, end_at=T0 + 30 * 60 * MIN + 17 * MIN),
    Schedule(None, 3600, "UTC", anchor=T0, end_at=T0 - MIN),  # ends before its first fire
    Schedule(None, None, "Europe/Berlin", run_at=utc("2026-03-29T01:30:00Z")),
    Schedule(None, None, "UTC", run_at=T0 + 90 * MIN, end_at=T0 + 91 * MIN),
]


def listed(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """The fires in [start, end), one by one."""
    out = []
    for fire in schedule.iter_fires(start, inclusive=True):
        if fire >= end:
            break
        out.append(fire)
    return out


@pytest.mark.parametrize("schedule", SCHEDULES, ids=range(len(SCHEDULES)))
def test_every_reading_of_an_ending_schedule_agrees_with_its_fires(schedule):
    start, end = T0 - 60 * MIN, T0 + 10 * 24 * 60 * MIN
    fires = listed(schedule, start, end)
    assert all(schedule.end_at is None or f <= schedule.end_at for f in fires)
    assert schedule.count_fires_between(start, end) == len(fires)
    assert schedule.fires_between(start, end, limit=10_000) == fires
    for count in (1, 2, 5, 1000):
        assert schedule.latest_fires(start, end - timedelta(microseconds=1), count) == (
            fires[-count:] if fires else []
        )
    assert schedule.next_fire(end) is None


def test_a_fire_exactly_at_the_end_fires_and_none_after_it():
    schedule = Schedule(None, 60, "UTC", anchor=T0, end_at=T0 + 2 * MIN)
    assert schedule.next_fires(T0 - MIN, 10) == [T0, T0 + MIN, T0 + 2 * MIN]


def test_a_one_off_fires_once_at_its_time_and_not_again():
    run_at = utc("2026-03-29T01:30:00Z")
    schedule = Schedule(None, None, "Europe/Berlin", run_at=run_at)
    assert schedule.next_fires(run_at - 60 * MIN, 5) == [run_at]
    assert schedule.next_fire(run_at) is None
    assert schedule.iter_fires(run_at, inclusive=True).__next__() == run_at


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"cron": "@daily", "interval_seconds": None, "run_at": T0}, None, "exactly one"),
        ({"cron": None, "interval_seconds": None}, None, "exactly one"),
        ({"cron": None, "interval_seconds": None, "run_at": T0, "start_at": T0}, "start_at", ""),
        ({"cron": "@daily", "interval_seconds": None, "start_at": T0, "end_at": T0}, "end_at", ""),
        ({"cron": None, "interval_seconds": None, "run_at": T0, "end_at": T0 - MIN}, "end_at", ""),
        (
            {"cron": None, "interval_seconds": None, "run_at": T0.replace(tzinfo=None)},
            "run_at",
            "aware",
        ),
    ],
)
def test_bad_schedules_are_refused_naming_the_field(kwargs, field, words):
    with pytest.raises(ScheduleError) as refused:
        Schedule(**kwargs)
    assert refused.value.field == field
    assert words in str(refused.value)


def test_the_end_must_come_after_the_start_and_the_one_fire():
    assert end_problem(T0, None, T0 + MIN) is None
    assert "after start_at" in (end_problem(T0, None, T0) or "")
    assert "after run_at" in (end_problem(None, T0, T0) or "")
    assert end_problem(None, None, None) is None


def test_times_already_past_are_warned_about():
    assert ending_warnings(run_at=T0, end_at=None, now=T0 + MIN)
    assert ending_warnings(run_at=None, end_at=T0, now=T0)
    assert ending_warnings(run_at=T0 + MIN, end_at=T0 + 2 * MIN, now=T0) == []


def due(**fields) -> DueJob:
    base = dict(
        id="00000000-0000-0000-0000-000000000001",
        cron=None,
        interval_seconds=None,
        timezone="UTC",
        start_at=None,
        created_at=T0 - 60 * MIN,
        next_fire_at=T0,
        misfire_policy="skip",
        max_catchup=3,
        misfire_grace_seconds=60,
        overlap_policy="allow",
    )
    return DueJob(**{**base, **fields})


def test_the_plan_of_an_interval_job_past_its_end_is_its_fires_up_to_it_then_none():
    plan = plan_job(due(interval_seconds=60, end_at=T0 + 2 * MIN), T0 + 60 * MIN)
    assert [r.scheduled_at for r in plan.runs] == [T0, T0 + MIN, T0 + 2 * MIN]
    assert plan.next_fire_at is None


def test_the_plan_of_an_interval_job_before_its_end_moves_on():
    plan = plan_job(due(interval_seconds=60, end_at=T0 + 2 * MIN), T0 + MIN / 2)
    assert [r.scheduled_at for r in plan.runs] == [T0]
    assert plan.next_fire_at == T0 + MIN


def test_the_plan_of_a_one_off_is_its_fire_then_none():
    plan = plan_job(due(run_at=T0), T0 + MIN / 2)
    assert [(r.scheduled_at, r.state) for r in plan.runs] == [(T0, "pending")]
    assert plan.next_fire_at is None

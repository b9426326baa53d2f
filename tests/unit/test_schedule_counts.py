"""Schedule.count_fires_between and Schedule.latest_fires against brute force.

Both take shortcuts (a whole local day at once, a window searched back from
the end), so each is compared with plain enumeration by iter_fires, the
iterator every other rule in tests/unit/test_schedules.py pins, over seeded
random ranges: reproducible, and biased towards the days where zones change
their UTC offset, where a shortcut would go wrong first.
"""

from __future__ import annotations

import functools
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobs.schedules import Schedule

ZONES = (
    "America/New_York",
    "Europe/London",
    "Africa/Casablanca",  # two changes a year around Ramadan, at 02:00/03:00
    "Pacific/Chatham",  # +12:45 / +13:45
    "Australia/Lord_Howe",  # a 30-minute shift
    "America/Santiago",  # changes at midnight
    "America/Havana",  # 00:00 -> 01:00 and 01:00 -> 00:00
    "America/Nuuk",  # 23:00 -> 00:00: a gap that ends at midnight
    "UTC",
)
# Dense crons are enumerated by the brute force at ~50 us a fire, so their
# ranges stay short; sparse ones get months.
DENSE = (
    "* * * * *",
    "*/7 * * * *",
    "* 1-3 * * *",  # wall-clock, inside the hours that DST changes move
    "*/15 0-2 * * 0",
    "0-59 0-23 * * *",  # every minute, but fixed-time by cronie's rule
    "*/20 * * * 1-5",
)
SPARSE = (
    "0 * * * *",
    "@hourly",
    "30 2 * * *",  # fixed-time, in the skipped/repeated hour of many zones
    "15,45 1-3 * * *",
    "0 0 * * *",  # midnight: skipped where zones change at midnight
    "59 23 * * *",
    "0 0 13 * 5",  # day-of-month OR day-of-week
    "0 0 */2 * 1",  # *-prefixed day field: AND
    "0 9-9 * * *",
    "0 0 L * *",
    "0 12 15W * *",
    "0 1 * * 5#2",
    "0 3 * * L0",  # the last Sunday
    "@monthly",
)
YEAR = datetime(2026, 1, 1, tzinfo=UTC)


@functools.cache
def _offset_changes(zone: str) -> list[datetime]:
    """Hours (UTC) in 2026 just before the zone's offset changes."""
    tz = ZoneInfo(zone)
    out, t = [], YEAR
    offset = t.astimezone(tz).utcoffset()
    while t < YEAR + timedelta(days=366):
        t += timedelta(hours=1)
        if t.astimezone(tz).utcoffset() != offset:
            out.append(t - timedelta(hours=1))
            offset = t.astimezone(tz).utcoffset()
    return out


def brute_force(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Fires f with start <= f < end, one by one."""
    fires = []
    for fire in schedule.iter_fires(start, inclusive=True):
        if fire >= end:
            break
        fires.append(fire)
    return fires


def random_range(rng: random.Random, zone: str, dense: bool) -> tuple[datetime, datetime]:
    changes = _offset_changes(zone)
    if changes and rng.random() < 0.6:
        # Around a change: starting up to two days before it.
        start = rng.choice(changes) - timedelta(minutes=rng.randrange(0, 2 * 1440))
    else:
        start = YEAR + timedelta(minutes=rng.randrange(0, 365 * 1440))
    # Not always on a whole minute: the bounds must be cut exactly.
    start += timedelta(seconds=rng.choice((0, 0, 0, 1, 30, 59)))
    if dense:
        span = timedelta(minutes=rng.choice((0, 1, 2, 61, 1440, rng.randrange(0, 2 * 1440))))
    else:
        span = timedelta(minutes=rng.choice((0, 1, 1440, rng.randrange(0, 40 * 1440))))
    end = start + span + timedelta(microseconds=rng.choice((0, 0, 1, 500_000)))
    return start, end


def cases(seed: int, n: int):
    rng = random.Random(seed)
    for _ in range(n):
        dense = rng.random() < 0.4
        zone = rng.choice(ZONES)
        expr = rng.choice(DENSE if dense else SPARSE)
        start_at = None
        if rng.random() < 0.1:
            start_at = YEAR + timedelta(days=rng.randrange(0, 365), seconds=rng.randrange(86_400))
        schedule = Schedule(cron=expr, interval_seconds=None, timezone=zone, start_at=start_at)
        yield rng, schedule, *random_range(rng, zone, dense)


@pytest.mark.parametrize("seed", range(4))
def test_count_matches_brute_force(seed: int) -> None:
    for _rng, schedule, start, end in cases(seed, 50):
        expected = len(brute_force(schedule, start, end))
        got = schedule.count_fires_between(start, end)
        assert got == expected, (schedule.cron, schedule.timezone, start, end)


@pytest.mark.parametrize("seed", range(4))
def test_latest_fires_match_brute_force(seed: int) -> None:
    for rng, schedule, start, end in cases(100 + seed, 50):
        count = rng.choice((1, 2, 5, 104, 300))
        # latest_fires includes both bounds.
        expected = brute_force(schedule, start, end + timedelta(microseconds=1))[-count:]
        got = schedule.latest_fires(start, end, count)
        assert got == expected, (schedule.cron, schedule.timezone, start, end, count)


def test_every_offset_change_of_2026_in_every_zone() -> None:
    """Each change, dense and sparse crons, over the local midnights either side."""
    crons = {
        "* * * * *": 13,
        "0-59 0-23 * * *": 4,
        "30 2 * * *": 36,
        "0 * * * *": 36,
        "30 23,0 * * *": 36,
        "0,30 23,0 * * *": 36,
    }
    for zone in ZONES:
        for change in _offset_changes(zone):
            for expr, hours in crons.items():
                schedule = Schedule(cron=expr, interval_seconds=None, timezone=zone)
                start = change - timedelta(hours=hours)
                end = change + timedelta(hours=hours, minutes=7)
                fires = brute_force(schedule, start, end + timedelta(microseconds=1))
                below_end = [f for f in fires if f < end]
                assert schedule.count_fires_between(start, end) == len(below_end), (zone, expr)
                assert schedule.latest_fires(start, end, 100) == fires[-100:], (zone, expr)


def test_bounds_are_inclusive_for_latest_and_half_open_for_count() -> None:
    hourly = Schedule(cron="0 * * * *", interval_seconds=None)
    one, two = datetime(2026, 1, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 2, tzinfo=UTC)
    assert hourly.latest_fires(one, two, 10) == [one, two]
    assert hourly.latest_fires(one, one, 10) == [one]
    assert hourly.latest_fires(two, one, 10) == []
    assert hourly.latest_fires(one, two, 0) == []
    assert hourly.count_fires_between(one, two) == 1
    assert hourly.count_fires_between(one, one) == 0


def test_intervals_by_arithmetic() -> None:
    rng = random.Random(7)
    for _ in range(200):
        seconds = rng.choice((1, 7, 60, 3600, 86_400))
        anchor = YEAR + timedelta(seconds=rng.randrange(0, 10**6), microseconds=rng.randrange(10))
        schedule = Schedule(cron=None, interval_seconds=seconds, anchor=anchor)
        start = anchor + timedelta(seconds=rng.randrange(-5000, 10**5))
        end = start + timedelta(seconds=rng.randrange(0, 5000))
        count = rng.choice((1, 3, 100))
        assert schedule.count_fires_between(start, end) == len(brute_force(schedule, start, end))
        expected = brute_force(schedule, start, end + timedelta(microseconds=1))[-count:]
        assert schedule.latest_fires(start, end, count) == expected


def test_a_year_of_a_per_minute_cron_is_counted_a_day_at_a_time() -> None:
    """O(days), not O(fires): the count walks one run of fires per local day
    (plus single fires on the two DST days), never 525,600 fires."""
    schedule = Schedule(cron="* * * * *", interval_seconds=None, timezone="America/New_York")
    start = YEAR
    end = YEAR + timedelta(days=365)
    runs = list(schedule._cron_runs(start, end))
    assert len(runs) < 366 + 2 * 1500
    assert sum(len(minutes) for _, minutes in runs) == 525_600
    assert schedule.count_fires_between(start, end) == 525_600


def test_latest_fires_of_a_long_backlog_are_the_newest() -> None:
    """Two months of a per-minute cron: the last three are the three minutes
    before now, whatever the size of the backlog."""
    schedule = Schedule(cron="* * * * *", interval_seconds=None, timezone="Europe/London")
    now = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
    fires = schedule.latest_fires(now - timedelta(days=60), now, 3)
    assert fires == [now.replace(second=0) - timedelta(minutes=m) for m in (2, 1, 0)]

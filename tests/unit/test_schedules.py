"""Schedule math, pinned by tables of real dates (cronsim's TestDstTransitions style).

Two daylight-saving rules are pinned here, as cronie applies them:

* fixed-time crons (minute and hour fields not starting with "*"): a skipped
  local time fires once, at the first instant after the gap; a repeated one
  fires once, at its first occurrence;
* wall-clock crons (minute or hour field starting with "*"): every real
  occurrence of a matching local time fires, both passes of a repeated hour
  included, and a matching time inside a gap does not fire at all.

Offsets used to derive the expected values:

* Europe/Berlin: CET +01:00, CEST +02:00. Forward at 01:00Z on 2026-03-29 and
  2027-03-28 (02:00 CET -> 03:00 CEST); back at 01:00Z on 2026-10-25 and
  2027-10-31 (03:00 CEST -> 02:00 CET, so 02:00-03:00 happens twice).
* America/New_York: EST -05:00, EDT -04:00. Forward at 07:00Z on 2026-03-08 and
  2027-03-14 (02:00 EST -> 03:00 EDT); back at 06:00Z on 2026-11-01 and
  2027-11-07 (02:00 EDT -> 01:00 EST, so 01:00-02:00 happens twice).
* Australia/Lord_Howe: +10:30 standard, +11:00 summer, a 30-minute shift. Back
  at 15:00Z on 2026-04-04 (02:00 +11 -> 01:30 +10:30 on 04-05, so 01:30-02:00
  happens twice); forward at 15:30Z on 2026-10-03 (02:00 +10:30 -> 02:30 +11 on
  10-04, so 02:00-02:30 does not exist).
* Africa/Casablanca: +01:00, except +00:00 around Ramadan. Back at 02:00Z on
  2026-02-15 (03:00 +01 -> 02:00 +00, so 02:00-03:00 happens twice); forward
  at 02:00Z on 2026-03-22 (02:00 +00 -> 03:00 +01).
* Pacific/Chatham: +12:45 standard, +13:45 summer. Back at 14:00Z on 2026-04-04
  (03:45 +13:45 -> 02:45 +12:45 on 04-05, so 02:45-03:45 happens twice);
  forward at 14:00Z on 2026-09-26 (02:45 +12:45 -> 03:45 +13:45 on 09-27, so
  02:45-03:45 does not exist).
* Australia/Sydney: +10:00 standard, +11:00 summer. Back at 16:00Z on
  2026-04-04 (03:00 +11 -> 02:00 +10 on 04-05); forward at 16:00Z on 2026-10-03
  (02:00 +10 -> 03:00 +11 on 10-04).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from jobs.schedules import (
    MACROS,
    Schedule,
    ScheduleError,
    cron_risks,
    dst_transition_near,
    jitter_offset,
    validate_cron,
    validate_interval,
    validate_timezone,
)


class OverBudget(Exception):
    pass


def steps_taken(work: Callable[[], object], budget: int, raises: type[Exception] | None = None):
    """What ``work()`` returns (or the exception of type ``raises`` it raised)
    and how many lines of Python it executed: a measure of the work done that,
    unlike a stopwatch, does not depend on the machine or its load. Past
    ``budget`` lines it stops the work and fails at once."""
    steps = 0

    def count(frame, event, arg):
        nonlocal steps
        if event == "line":
            steps += 1
            if steps > budget:
                raise OverBudget(f"more than {budget:,} lines of Python")
        return count

    sys.settrace(count)
    try:
        result: object = work()
    except OverBudget as exc:
        pytest.fail(str(exc))
    except Exception as exc:
        if raises is None or not isinstance(exc, raises):
            raise
        result = exc
    finally:
        sys.settrace(None)
    return result, steps


def utc(iso: str) -> datetime:
    return datetime.fromisoformat(iso).astimezone(UTC)


def iso(value: datetime) -> str:
    assert value.tzinfo is UTC
    return value.isoformat().replace("+00:00", "Z")


def cron(expr: str, zone: str = "UTC", **kwargs: object) -> Schedule:
    return Schedule(cron=expr, interval_seconds=None, timezone=zone, **kwargs)  # type: ignore[arg-type]


def every(seconds: int, anchor: str, **kwargs: object) -> Schedule:
    return Schedule(cron=None, interval_seconds=seconds, anchor=utc(anchor), **kwargs)  # type: ignore[arg-type]


def quarters(first: str, count: int) -> list[str]:
    """``count`` ISO instants 15 minutes apart from ``first``."""
    return [iso(utc(first) + timedelta(minutes=15 * n)) for n in range(count)]


# -- daylight-saving transitions -------------------------------------------------

DST_CASES = [
    # Europe/Berlin, spring 2026: 02:00-03:00 local does not exist.
    # Fixed time: the skipped 02:30 fires once, at 03:00 CEST.
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
     ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]),
    # Wall clock: no fire for the missing 02:00, and 03:00 CEST fires once.
    ("0 * * * *", "Europe/Berlin", "2026-03-28T23:30:00Z",
     ["2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"]),
    # Wall clock ("*" minute): every 02:xx is missing, so nothing that day.
    ("*/15 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
     ["2026-03-30T00:00:00Z", "2026-03-30T00:15:00Z", "2026-03-30T00:30:00Z"]),
    ("*/15 * * * *", "Europe/Berlin", "2026-03-29T00:30:00Z",
     ["2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"]),
    # Europe/Berlin, autumn 2026: 02:00-03:00 local happens twice.
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
     ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]),
    # 02:00 CEST (00:00Z) and 02:00 CET (01:00Z) both fire.
    ("0 * * * *", "Europe/Berlin", "2026-10-24T22:30:00Z",
     ["2026-10-24T23:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z",
      "2026-10-25T02:00:00Z"]),
    ("*/15 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
     [*quarters("2026-10-25T00:00:00Z", 8), "2026-10-26T01:00:00Z"]),
    # Europe/Berlin, spring 2027.
    ("30 2 * * *", "Europe/Berlin", "2027-03-27T12:00:00Z",
     ["2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"]),
    ("0 * * * *", "Europe/Berlin", "2027-03-27T23:30:00Z",
     ["2027-03-28T00:00:00Z", "2027-03-28T01:00:00Z", "2027-03-28T02:00:00Z"]),
    ("*/15 2 * * *", "Europe/Berlin", "2027-03-27T12:00:00Z",
     ["2027-03-29T00:00:00Z", "2027-03-29T00:15:00Z", "2027-03-29T00:30:00Z"]),
    # Europe/Berlin, autumn 2027.
    ("30 2 * * *", "Europe/Berlin", "2027-10-30T12:00:00Z",
     ["2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"]),
    ("0 * * * *", "Europe/Berlin", "2027-10-30T22:30:00Z",
     ["2027-10-30T23:00:00Z", "2027-10-31T00:00:00Z", "2027-10-31T01:00:00Z",
      "2027-10-31T02:00:00Z"]),
    ("*/15 2 * * *", "Europe/Berlin", "2027-10-30T12:00:00Z",
     [*quarters("2027-10-31T00:00:00Z", 8), "2027-11-01T01:00:00Z"]),
    # America/New_York, spring 2026: 02:00-03:00 local does not exist.
    ("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
     ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]),
    ("0 * * * *", "America/New_York", "2026-03-08T05:30:00Z",
     ["2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"]),
    ("*/15 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
     ["2026-03-09T06:00:00Z", "2026-03-09T06:15:00Z", "2026-03-09T06:30:00Z"]),
    # America/New_York, autumn 2026: 01:00-02:00 local happens twice.
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
     ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]),
    # The second 01:00 (EST, 06:00Z) fires: no two-hour hole.
    ("0 * * * *", "America/New_York", "2026-11-01T03:30:00Z",
     ["2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z",
      "2026-11-01T07:00:00Z"]),
    ("*/15 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
     [*quarters("2026-11-01T05:00:00Z", 8), "2026-11-02T06:00:00Z"]),
    # ... and asked from inside the second pass of the repeated hour.
    ("0 * * * *", "America/New_York", "2026-11-01T06:15:00Z",
     ["2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"]),
    ("*/15 1 * * *", "America/New_York", "2026-11-01T06:10:00Z",
     ["2026-11-01T06:15:00Z", "2026-11-01T06:30:00Z", "2026-11-01T06:45:00Z",
      "2026-11-02T06:00:00Z"]),
    ("30 1 * * *", "America/New_York", "2026-11-01T06:10:00Z",
     ["2026-11-02T06:30:00Z"]),
    # America/New_York, spring 2027.
    ("30 2 * * *", "America/New_York", "2027-03-13T12:00:00Z",
     ["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"]),
    ("0 * * * *", "America/New_York", "2027-03-14T05:30:00Z",
     ["2027-03-14T06:00:00Z", "2027-03-14T07:00:00Z", "2027-03-14T08:00:00Z"]),
    ("*/15 2 * * *", "America/New_York", "2027-03-13T12:00:00Z",
     ["2027-03-15T06:00:00Z", "2027-03-15T06:15:00Z", "2027-03-15T06:30:00Z"]),
    # America/New_York, autumn 2027.
    ("30 1 * * *", "America/New_York", "2027-11-06T12:00:00Z",
     ["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"]),
    ("0 * * * *", "America/New_York", "2027-11-07T03:30:00Z",
     ["2027-11-07T04:00:00Z", "2027-11-07T05:00:00Z", "2027-11-07T06:00:00Z",
      "2027-11-07T07:00:00Z"]),
    ("*/15 1 * * *", "America/New_York", "2027-11-06T12:00:00Z",
     [*quarters("2027-11-07T05:00:00Z", 8), "2027-11-08T06:00:00Z"]),
    # Australia/Lord_Howe, April 2026: 01:30-02:00 local happens twice (30 min).
    ("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
     ["2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"]),
    # 01:00 +11, then 02:00 +10:30: 00:00-01:30 is not repeated, so one fire each.
    ("0 * * * *", "Australia/Lord_Howe", "2026-04-04T13:30:00Z",
     ["2026-04-04T14:00:00Z", "2026-04-04T15:30:00Z", "2026-04-04T16:30:00Z"]),
    # 01:30 +11 (14:30Z) and 01:30 +10:30 (15:00Z): every half hour in UTC.
    ("*/30 * * * *", "Australia/Lord_Howe", "2026-04-04T13:45:00Z",
     ["2026-04-04T14:00:00Z", "2026-04-04T14:30:00Z", "2026-04-04T15:00:00Z",
      "2026-04-04T15:30:00Z", "2026-04-04T16:00:00Z"]),
    # 01:30 and 01:45 fire in both passes.
    ("*/15 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
     [*quarters("2026-04-04T14:00:00Z", 6), "2026-04-05T14:30:00Z"]),
    # Australia/Lord_Howe, October 2026: 02:00-02:30 local does not exist.
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z",
     ["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"]),
    # 01:00 +10:30, no 02:00, then 03:00 +11.
    ("0 * * * *", "Australia/Lord_Howe", "2026-10-03T14:00:00Z",
     ["2026-10-03T14:30:00Z", "2026-10-03T16:00:00Z", "2026-10-03T17:00:00Z"]),
    # 01:30 +10:30, no 02:00, then 02:30 +11: still every half hour in UTC.
    ("*/30 * * * *", "Australia/Lord_Howe", "2026-10-03T14:45:00Z",
     ["2026-10-03T15:00:00Z", "2026-10-03T15:30:00Z", "2026-10-03T16:00:00Z"]),
    ("*/15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z",
     ["2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z", "2026-10-04T15:00:00Z"]),
    # Africa/Casablanca, February 2026: 02:00-03:00 local happens twice. Every
    # minute fires through both passes (02:59 +01, then 02:00 +00, ...).
    ("* * * * *", "Africa/Casablanca", "2026-02-15T01:57:00Z",
     ["2026-02-15T01:58:00Z", "2026-02-15T01:59:00Z", "2026-02-15T02:00:00Z",
      "2026-02-15T02:01:00Z"]),
    ("* * * * *", "Africa/Casablanca", "2026-02-15T02:30:00Z",
     ["2026-02-15T02:31:00Z", "2026-02-15T02:32:00Z"]),
    ("* * * * *", "Africa/Casablanca", "2026-02-15T02:58:00Z",
     ["2026-02-15T02:59:00Z", "2026-02-15T03:00:00Z"]),
    # Africa/Casablanca, March 2026: 02:00-03:00 local does not exist; 01:59 +00
    # is followed one minute later by 03:00 +01.
    ("* * * * *", "Africa/Casablanca", "2026-03-22T01:58:00Z",
     ["2026-03-22T01:59:00Z", "2026-03-22T02:00:00Z", "2026-03-22T02:01:00Z"]),
    ("30 2 * * *", "Africa/Casablanca", "2026-03-21T12:00:00Z",
     ["2026-03-22T02:00:00Z", "2026-03-23T01:30:00Z"]),
    # Pacific/Chatham, September 2026: 02:45-03:45 local does not exist. 02:00
    # +12:45, no 03:00, 04:00 +13:45: an hour apart, not 03:45 and 04:00.
    ("@hourly", "Pacific/Chatham", "2026-09-26T12:30:00Z",
     ["2026-09-26T13:15:00Z", "2026-09-26T14:15:00Z", "2026-09-26T15:15:00Z"]),
    # Pacific/Chatham, April 2026: 02:45-03:45 local happens twice: 03:00 +13:45
    # and 03:00 +12:45 both fire.
    ("@hourly", "Pacific/Chatham", "2026-04-04T11:30:00Z",
     ["2026-04-04T12:15:00Z", "2026-04-04T13:15:00Z", "2026-04-04T14:15:00Z",
      "2026-04-04T15:15:00Z"]),
    # A "*" minute with a fixed hour is a wall-clock job too. 03:00-03:44 is
    # missing in September, so only 03:45-03:59 +13:45 (14:00Z-14:14Z) fire.
    ("* 3 * * *", "Pacific/Chatham", "2026-09-26T12:00:00Z",
     [*(iso(utc("2026-09-26T14:00:00Z") + timedelta(minutes=n)) for n in range(15)),
      "2026-09-27T13:15:00Z"]),
    # In April 03:00-03:44 happens twice: 03:44 +13:45 (13:59Z), then 02:45-02:59
    # +12:45 do not match, then 03:00 +12:45 (14:15Z).
    ("* 3 * * *", "Pacific/Chatham", "2026-04-04T13:57:00Z",
     ["2026-04-04T13:58:00Z", "2026-04-04T13:59:00Z", "2026-04-04T14:15:00Z",
      "2026-04-04T14:16:00Z"]),
    ("30 3 * * *", "Pacific/Chatham", "2026-04-04T12:00:00Z",
     ["2026-04-04T13:45:00Z", "2026-04-05T14:45:00Z"]),
    ("30 3 * * *", "Pacific/Chatham", "2026-09-26T12:00:00Z",
     ["2026-09-26T14:00:00Z", "2026-09-27T13:45:00Z"]),
]  # fmt: skip


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), DST_CASES)
def test_dst_transitions(expr: str, zone: str, after: str, expected: list[str]) -> None:
    fires = cron(expr, zone).next_fires(utc(after), len(expected))
    assert [iso(f) for f in fires] == expected


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), DST_CASES)
def test_dst_fires_are_strictly_increasing_utc(
    expr: str, zone: str, after: str, expected: list[str]
) -> None:
    fires = cron(expr, zone).next_fires(utc(after), 200)
    assert all(f.tzinfo is UTC for f in fires)
    assert all(a < b for a, b in pairwise(fires))


def test_fixed_time_fires_once_in_the_repeated_hour_unlike_raw_croniter() -> None:
    """The reason the wrapper exists: croniter 7 on aware datetimes fires a
    fixed-time job at both 01:30s; cronie fires it once. For an hourly job both
    croniter and cronie fire at both 01:00s, and so do we."""
    ny = ZoneInfo("America/New_York")
    start = utc("2026-11-01T03:30:00Z")

    raw_fixed = croniter("30 1 * * *", start.astimezone(ny))
    raw = [iso(raw_fixed.get_next(datetime).astimezone(UTC)) for _ in range(2)]
    assert raw == ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"]
    ours = [iso(f) for f in cron("30 1 * * *", "America/New_York").next_fires(start, 2)]
    assert ours == ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]

    raw_hourly = croniter("0 * * * *", start.astimezone(ny))
    raw = [iso(raw_hourly.get_next(datetime).astimezone(UTC)) for _ in range(4)]
    ours = [iso(f) for f in cron("0 * * * *", "America/New_York").next_fires(start, 4)]
    assert (
        ours
        == raw
        == [
            "2026-11-01T04:00:00Z",
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",  # 01:00 EST, the second 01:00
            "2026-11-01T07:00:00Z",
        ]
    )


def test_local_day_with_skipped_hour_has_23_hourly_fires() -> None:
    # 2026-03-29 00:00 CET .. 2026-03-30 00:00 CEST
    day = cron("0 * * * *", "Europe/Berlin")
    assert day.count_fires_between(utc("2026-03-28T23:00:00Z"), utc("2026-03-29T22:00:00Z")) == 23


def test_local_day_with_repeated_hour_has_25_hourly_fires() -> None:
    # 2026-11-01 00:00 EDT .. 2026-11-02 00:00 EST: 25 hours long, 25 fires.
    day = cron("0 * * * *", "America/New_York")
    assert day.count_fires_between(utc("2026-11-01T04:00:00Z"), utc("2026-11-02T05:00:00Z")) == 25


def test_fixed_hour_wall_clock_job_fires_through_both_passes() -> None:
    # Pacific/Chatham, 2026-04-05: 03:00-03:44 happens twice, 03:45-03:59 once.
    day = cron("* 3 * * *", "Pacific/Chatham")
    start, end = utc("2026-04-04T11:00:00Z"), utc("2026-04-05T11:00:00Z")
    assert day.count_fires_between(start, end) == 45 + 60


@pytest.mark.parametrize(
    ("zone", "start", "end"),
    [
        # The local hour before, both passes of the repeated hour, the hour after.
        ("America/New_York", "2026-11-01T04:00:00Z", "2026-11-01T08:00:00Z"),
        ("Europe/Berlin", "2026-10-24T23:00:00Z", "2026-10-25T03:00:00Z"),
        ("Africa/Casablanca", "2026-02-15T00:00:00Z", "2026-02-15T04:00:00Z"),
        ("Australia/Lord_Howe", "2026-04-04T14:00:00Z", "2026-04-04T16:00:00Z"),
        # ... and through the gaps, which take nothing out of UTC time.
        ("America/New_York", "2026-03-08T05:00:00Z", "2026-03-08T09:00:00Z"),
        ("Europe/Berlin", "2026-03-28T23:00:00Z", "2026-03-29T03:00:00Z"),
    ],
)
@pytest.mark.parametrize(("expr", "period"), [("* * * * *", 1), ("*/15 * * * *", 15)])
def test_wall_clock_crons_keep_their_period_through_dst(
    expr: str, period: int, zone: str, start: str, end: str
) -> None:
    fires = cron(expr, zone).fires_between(utc(start), utc(end), limit=10_000)
    assert iso(fires[0]) == start
    assert len(fires) == (utc(end) - utc(start)) // timedelta(minutes=period)
    assert {b - a for a, b in pairwise(fires)} == {timedelta(minutes=period)}


def test_wall_clock_next_fire_stays_cheap() -> None:
    """The dispatcher asks for one next fire per due job per tick."""
    schedule = cron("* * * * *", "America/New_York")
    after = utc("2026-06-01T00:00:00Z")
    # About 420 lines a fire.
    steps_taken(
        lambda: [schedule.next_fire(after + timedelta(seconds=37 * n)) for n in range(500)],
        budget=800_000,
    )
    # A rare wall-clock fire, years away across several DST changes.
    leap = cron("* 12 29 2 *", "Europe/Berlin")
    fire, _ = steps_taken(lambda: leap.next_fire(after), budget=40_000)  # about 10,400
    assert iso(fire) == "2028-02-29T11:00:00Z"


# -- calendar rules ---------------------------------------------------------------

CALENDAR_CASES = [
    # Leap day: the next 29 February after 2026 is in 2028.
    ("0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z",
     ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]),
    # Day 31 skips the 30-day months (and February).
    ("0 0 31 * *", "UTC", "2026-01-01T00:00:00Z",
     ["2026-01-31T00:00:00Z", "2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z",
      "2026-07-31T00:00:00Z", "2026-08-31T00:00:00Z", "2026-10-31T00:00:00Z"]),
    # L is the last day of each month, 29 February included in a leap year.
    ("0 12 L * *", "UTC", "2026-01-01T00:00:00Z",
     ["2026-01-31T12:00:00Z", "2026-02-28T12:00:00Z", "2026-03-31T12:00:00Z",
      "2026-04-30T12:00:00Z"]),
    ("0 12 L 2 *", "UTC", "2027-03-01T00:00:00Z",
     ["2028-02-29T12:00:00Z", "2029-02-28T12:00:00Z"]),
    # Day-of-month OR day-of-week: every Friday in April 2026 and Monday the 13th.
    ("0 0 13 * 5", "UTC", "2026-04-01T00:00:00Z",
     ["2026-04-03T00:00:00Z", "2026-04-10T00:00:00Z", "2026-04-13T00:00:00Z",
      "2026-04-17T00:00:00Z", "2026-04-24T00:00:00Z"]),
    # A day field starting with "*" counts as unrestricted, as in cronie, so
    # both fields must match: odd days that are Mondays ...
    ("0 0 */2 * 1", "UTC", "2026-01-01T00:00:00Z",
     ["2026-01-05T00:00:00Z", "2026-01-19T00:00:00Z", "2026-02-09T00:00:00Z",
      "2026-02-23T00:00:00Z", "2026-03-09T00:00:00Z"]),
    # ... the 1st when it is a Sunday, Tuesday, Thursday or Saturday ...
    ("0 0 1 * */2", "UTC", "2026-01-01T00:00:00Z",
     ["2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-08-01T00:00:00Z",
      "2026-09-01T00:00:00Z"]),
    # ... and "?" is unrestricted too: Mondays only.
    ("0 0 ? * 1", "UTC", "2026-01-01T00:00:00Z",
     ["2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z"]),
    # A full range does not start with "*": EITHER applies, so every day.
    ("0 0 1-31 * 1", "UTC", "2026-01-01T00:00:00Z",
     ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z"]),
    # A restricted field written as an equal range means that one value
    # (croniter alone would read "9-9" as every hour).
    ("0 9-9 * * *", "UTC", "2026-01-01T00:00:00Z",
     ["2026-01-01T09:00:00Z", "2026-01-02T09:00:00Z"]),
    ("0 0 1 jan-jan *", "UTC", "2026-01-01T00:00:00Z",
     ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"]),
    # Names, Sunday as 7, ranges.
    ("0 6 * * mon-fri", "UTC", "2026-01-02T07:00:00Z",
     ["2026-01-05T06:00:00Z", "2026-01-06T06:00:00Z"]),
    ("0 0 * * 7", "UTC", "2026-01-01T00:00:00Z",
     ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"]),
    # Read in the job's zone: midnight in Berlin is 23:00Z in winter.
    ("@daily", "Europe/Berlin", "2026-01-01T00:00:00Z",
     ["2026-01-01T23:00:00Z", "2026-01-02T23:00:00Z"]),
    ("@hourly", "UTC", "2026-01-01T00:00:00Z",
     ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"]),
    ("@weekly", "UTC", "2026-01-01T00:00:00Z",
     ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"]),
    ("@monthly", "Asia/Tokyo", "2026-01-01T00:00:00Z",
     ["2026-01-31T15:00:00Z", "2026-02-28T15:00:00Z"]),
    ("@yearly", "UTC", "2026-01-01T00:00:00Z",
     ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"]),
]  # fmt: skip


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), CALENDAR_CASES)
def test_calendar_rules(expr: str, zone: str, after: str, expected: list[str]) -> None:
    fires = cron(expr, zone).next_fires(utc(after), len(expected))
    assert [iso(f) for f in fires] == expected


@pytest.mark.parametrize(("macro", "fields"), MACROS.items())
def test_macros_fire_like_their_five_field_form(macro: str, fields: str) -> None:
    after = utc("2026-02-15T10:17:00Z")
    assert cron(macro, "Europe/Berlin").next_fires(after, 5) == cron(
        fields, "Europe/Berlin"
    ).next_fires(after, 5)


def test_next_fire_is_strictly_after() -> None:
    hourly = cron("0 * * * *")
    assert iso(hourly.next_fire(utc("2026-01-01T10:00:00Z"))) == "2026-01-01T11:00:00Z"
    assert iso(hourly.next_fire(utc("2026-01-01T09:59:59.999999Z"))) == "2026-01-01T10:00:00Z"


def test_after_in_another_zone_is_the_same_instant() -> None:
    after = datetime(2026, 1, 1, 11, 0, tzinfo=ZoneInfo("Europe/Berlin"))  # 10:00Z
    assert iso(cron("0 * * * *").next_fire(after)) == "2026-01-01T11:00:00Z"


def test_start_at_holds_back_cron_fires() -> None:
    schedule = cron("0 * * * *", start_at=utc("2026-01-01T10:30:00Z"))
    assert iso(schedule.next_fire(utc("2026-01-01T00:00:00Z"))) == "2026-01-01T11:00:00Z"
    assert iso(schedule.next_fire(utc("2026-01-01T12:00:00Z"))) == "2026-01-01T13:00:00Z"


def test_cron_fire_exactly_at_start_at_counts() -> None:
    schedule = cron("0 * * * *", start_at=utc("2026-01-01T10:00:00Z"))
    assert iso(schedule.next_fire(utc("2026-01-01T00:00:00Z"))) == "2026-01-01T10:00:00Z"


def test_iter_fires_inclusive_yields_after_when_it_is_a_fire() -> None:
    schedule = cron("*/30 * * * *")
    at = utc("2026-01-01T10:30:00Z")
    inclusive = [iso(f) for f in islice(schedule.iter_fires(at, inclusive=True), 2)]
    exclusive = [iso(f) for f in islice(schedule.iter_fires(at), 2)]
    assert inclusive == ["2026-01-01T10:30:00Z", "2026-01-01T11:00:00Z"]
    assert exclusive == ["2026-01-01T11:00:00Z", "2026-01-01T11:30:00Z"]
    not_a_fire = utc("2026-01-01T10:31:00Z")
    assert iso(next(schedule.iter_fires(not_a_fire, inclusive=True))) == "2026-01-01T11:00:00Z"


def test_fires_between_is_half_open_and_limited() -> None:
    schedule = cron("0 * * * *")
    start, end = utc("2026-01-01T10:00:00Z"), utc("2026-01-01T13:00:00Z")
    assert [iso(f) for f in schedule.fires_between(start, end, limit=10)] == [
        "2026-01-01T10:00:00Z",
        "2026-01-01T11:00:00Z",
        "2026-01-01T12:00:00Z",
    ]
    assert len(schedule.fires_between(start, end, limit=2)) == 2
    assert schedule.fires_between(end, start, limit=10) == []
    assert schedule.fires_between(start, end, limit=0) == []


def test_count_fires_between_cron_is_exact_and_capped_on_request() -> None:
    minutely = cron("* * * * *")
    start = utc("2026-01-01T00:00:00Z")
    assert minutely.count_fires_between(start, start + timedelta(days=1)) == 1440
    assert minutely.count_fires_between(start, start + timedelta(days=365)) == 525_600
    assert minutely.count_fires_between(start, start + timedelta(days=1), cap=100) == 100
    assert minutely.count_fires_between(start, start) == 0


def test_never_firing_schedule_object_answers_none_quickly() -> None:
    # validate_cron refuses it, but Schedule math must still terminate if such a
    # row exists; bypass validation the way a corrupt row would.
    schedule = cron("0 0 * * *")
    object.__setattr__(schedule, "cron", "0 0 30 2 *")
    fire, _ = steps_taken(lambda: schedule.next_fire(utc("2026-01-01T00:00:00Z")), budget=60_000)
    assert fire is None  # in about 17,500 lines


# -- intervals ----------------------------------------------------------------------


def test_interval_fires_on_anchor_plus_multiples() -> None:
    schedule = every(60, "2026-01-01T00:00:00Z")
    assert [iso(f) for f in schedule.next_fires(utc("2026-01-01T00:00:30Z"), 3)] == [
        "2026-01-01T00:01:00Z",
        "2026-01-01T00:02:00Z",
        "2026-01-01T00:03:00Z",
    ]


def test_interval_after_exactly_on_a_fire_gives_the_next_one() -> None:
    schedule = every(60, "2026-01-01T00:00:00Z")
    on_fire = utc("2026-01-01T00:02:00Z")
    assert iso(schedule.next_fire(on_fire)) == "2026-01-01T00:03:00Z"
    assert iso(next(schedule.iter_fires(on_fire, inclusive=True))) == "2026-01-01T00:02:00Z"


def test_interval_anchor_in_the_future_is_the_first_fire() -> None:
    schedule = every(3600, "2030-06-01T12:00:00Z")
    assert iso(schedule.next_fire(utc("2026-01-01T00:00:00Z"))) == "2030-06-01T12:00:00Z"
    assert iso(schedule.next_fire(utc("2030-06-01T12:00:00Z"))) == "2030-06-01T13:00:00Z"


def test_interval_large_k_is_exact_to_the_microsecond() -> None:
    anchor = utc("2026-01-01T00:00:00.123457Z")
    schedule = every(7, "2026-01-01T00:00:00.123457Z")
    k = 900_000_000  # about 200 years of 7 s fires
    fire = anchor + timedelta(seconds=7 * k)
    assert schedule.next_fire(fire - timedelta(microseconds=1)) == fire
    assert schedule.next_fire(fire) == fire + timedelta(seconds=7)
    assert schedule.next_fire(fire).microsecond == 123457


def test_interval_start_at_is_the_anchor_and_wins_over_anchor() -> None:
    schedule = Schedule(
        cron=None,
        interval_seconds=600,
        start_at=utc("2026-01-01T00:05:00Z"),
        anchor=utc("2025-12-31T23:59:00Z"),
    )
    assert iso(schedule.next_fire(utc("2026-01-01T00:00:00Z"))) == "2026-01-01T00:05:00Z"
    assert iso(schedule.next_fire(utc("2026-01-01T00:05:00Z"))) == "2026-01-01T00:15:00Z"


def test_interval_ignores_the_time_zone_across_dst() -> None:
    schedule = Schedule(
        cron=None,
        interval_seconds=3600,
        timezone="Europe/Berlin",
        anchor=utc("2026-03-29T00:00:00Z"),
    )
    assert [iso(f) for f in schedule.next_fires(utc("2026-03-29T00:00:00Z"), 2)] == [
        "2026-03-29T01:00:00Z",
        "2026-03-29T02:00:00Z",
    ]


def test_interval_count_is_arithmetic() -> None:
    schedule = every(1, "2026-01-01T00:00:00Z")
    year = (utc("2026-01-01T00:00:00Z"), utc("2027-01-01T00:00:00Z"))
    # About 20 lines: arithmetic, not a step a fire.
    count, _ = steps_taken(lambda: schedule.count_fires_between(*year), budget=200)
    assert count == 31_536_000
    count, _ = steps_taken(lambda: schedule.count_fires_between(*year, cap=1_000_000), budget=200)
    assert count == 1_000_000
    # Half-open, and nothing before the anchor.
    ten = every(10, "2026-01-01T00:00:00Z")
    assert ten.count_fires_between(utc("2025-12-31T00:00:00Z"), utc("2026-01-01T00:00:30Z")) == 3
    assert ten.count_fires_between(utc("2026-01-01T00:00:01Z"), utc("2026-01-01T00:00:30Z")) == 2
    assert ten.count_fires_between(utc("2026-01-01T00:00:10Z"), utc("2026-01-01T00:00:31Z")) == 3


def test_interval_fires_between() -> None:
    schedule = every(900, "2026-01-01T00:00:00Z")
    fires = schedule.fires_between(utc("2026-01-01T00:15:00Z"), utc("2026-01-01T01:00:00Z"), 10)
    assert [iso(f) for f in fires] == [
        "2026-01-01T00:15:00Z",
        "2026-01-01T00:30:00Z",
        "2026-01-01T00:45:00Z",
    ]


# -- validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        ("*/5 * * * *", "*/5 * * * *"),
        ("  0   2  *\t* *  ", "0 2 * * *"),
        ("@daily", "@daily"),
        (" @yearly ", "@yearly"),
        ("0 0 29 2 *", "0 0 29 2 *"),
        ("0 9 * * MON-FRI", "0 9 * * MON-FRI"),
        ("0 0 L * *", "0 0 L * *"),
        ("0 0 * * 5#2", "0 0 * * 5#2"),
        ("0 0 ? * 1", "0 0 ? * 1"),
        ("50-10 * * * *", "50-10 * * * *"),
    ],
)
def test_validate_cron_accepts_and_normalises(given: str, normalised: str) -> None:
    assert validate_cron(given) == normalised


@pytest.mark.parametrize(
    "bad",
    [
        "0 0 30 2 *",  # never fires
        "0 0 31 4 *",
        "0 0 31 2,4,6,9,11 *",
        "0 0 31 2 */1",  # "*/1" is unrestricted: 31 February AND any weekday
        "* * * * * *",  # seconds field
        "0 0 0 * * * 2026",
        "0 0 * *",
        "",
        "   ",
        "@reboot",
        "@annually",
        "@midnight",
        "@DAILY",
        "\uff10 \uff10 * * *",  # fullwidth digits
        "\u0660 0 * * *",  # Arabic-Indic digit
        "0 0 * * *\u00a0",
        "1 " * 60,  # more than 100 characters
        "60 * * * *",
        "0 24 * * *",
        "0 0 0 * *",
        "0 0 * 13 *",
        "0 0 * * 8",
        "*/0 * * * *",
        "H * * * *",  # hashed: needs a seed
        "R * * * *",  # random: a different schedule every parse
        "0 0 * * foo",
        "0 0 * * 1;ls",
        "0\x000 * * * *",
        "0 0 13 * 5#2",  # croniter drops one side of the OR for these
        "0 0 15W * 1",
        "0 0 1 * L5",
    ],
)
def test_validate_cron_refuses(bad: str) -> None:
    with pytest.raises(ScheduleError):
        validate_cron(bad)


@pytest.mark.parametrize("bad", [None, 5, b"* * * * *", ["*"] * 5])
def test_validate_cron_refuses_non_strings(bad: object) -> None:
    with pytest.raises(ScheduleError):
        validate_cron(bad)  # type: ignore[arg-type]


def test_validate_cron_messages_say_why() -> None:
    with pytest.raises(ScheduleError, match=r"Not a valid cron expression.*never fire"):
        validate_cron("0 0 30 2 *")
    with pytest.raises(ScheduleError, match="exactly 5"):
        validate_cron("0 0 * * * *")
    with pytest.raises(ScheduleError, match="non-ASCII"):
        validate_cron("\u0660 0 * * *")
    with pytest.raises(ScheduleError, match="at most 100"):
        validate_cron("*" + " " * 100)


def test_validate_cron_is_fast_even_for_never_firing_expressions() -> None:
    # Expressions used nowhere else, so no cached answer helps.
    for expr in ("59 23 30 2 *", "0 12 31 2,4,6,9,11 *", "*/7 */5 31 4 *"):
        # 3,800 to 16,500 lines.
        refused, _ = steps_taken(
            lambda expr=expr: validate_cron(expr), budget=60_000, raises=ScheduleError
        )
        assert isinstance(refused, ScheduleError)


@pytest.mark.parametrize("name", ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"])
def test_validate_timezone_accepts_iana_names(name: str) -> None:
    assert validate_timezone(name) == name


@pytest.mark.parametrize(
    "bad",
    [
        "utc",
        "europe/berlin",
        "EUROPE/BERLIN",
        "../../etc/passwd",
        "/etc/localtime",
        "localtime",
        "",
        " UTC",
        "Foo/Bar",
        "Europe/Berlin\x00",
        None,
        0,
    ],
)
def test_validate_timezone_refuses(bad: object) -> None:
    with pytest.raises(ScheduleError):
        validate_timezone(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", [1, 60, 31_536_000])
def test_validate_interval_accepts(good: int) -> None:
    assert validate_interval(good) == good


@pytest.mark.parametrize("bad", [0, -1, 31_536_001, True, False, 1.5, 60.0, "60", None])
def test_validate_interval_refuses(bad: object) -> None:
    with pytest.raises(ScheduleError):
        validate_interval(bad)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cron": None, "interval_seconds": None},
        {"cron": "* * * * *", "interval_seconds": 60, "anchor": utc("2026-01-01T00:00:00Z")},
        {"cron": None, "interval_seconds": 60},  # no anchor, no start_at
        {"cron": "0 0 30 2 *", "interval_seconds": None},
        {"cron": "* * * * *", "interval_seconds": None, "timezone": "utc"},
        {"cron": None, "interval_seconds": 0, "anchor": utc("2026-01-01T00:00:00Z")},
        {"cron": "* * * * *", "interval_seconds": None, "start_at": datetime(2026, 1, 1)},
    ],
)
def test_schedule_refuses_invalid_combinations(kwargs: dict[str, object]) -> None:
    with pytest.raises(ScheduleError):
        Schedule(**kwargs)  # type: ignore[arg-type]


def test_schedule_normalises_cron_and_refuses_naive_after() -> None:
    schedule = cron("  0   * * * * ")
    assert schedule.cron == "0 * * * *"
    with pytest.raises(ScheduleError):
        schedule.next_fire(datetime(2026, 1, 1))


# -- jitter -------------------------------------------------------------------------

JOB_ID = uuid.UUID("6f1c2a0e-5b7d-4c1e-9a3f-0d2b8e4c6a10")


def test_jitter_offset_is_stable_in_range_and_form_independent() -> None:
    offset = jitter_offset(JOB_ID, 600)
    assert 0 <= offset < 600
    assert jitter_offset(JOB_ID, 600) == offset
    assert jitter_offset(str(JOB_ID), 600) == offset
    assert jitter_offset(str(JOB_ID).upper(), 600) == offset
    assert jitter_offset(JOB_ID, 0) == 0.0
    # Whole microseconds, so timedelta(seconds=offset) is exact.
    assert round(offset * 1_000_000) / 1_000_000 == offset


def test_jitter_offset_spreads_jobs_over_the_window() -> None:
    offsets = [jitter_offset(uuid.UUID(int=n), 3600) for n in range(2000)]
    assert all(0 <= o < 3600 for o in offsets)
    buckets = {int(o // 360) for o in offsets}
    assert buckets == set(range(10))
    assert len(set(offsets)) > 1990


def test_jitter_offset_is_the_same_in_another_process() -> None:
    """hash() is salted per process; the offset must not be."""
    root = Path(__file__).resolve().parents[2]
    code = (
        "import uuid; from jobs.schedules import jitter_offset; "
        f"print(repr(jitter_offset(uuid.UUID('{JOB_ID}'), 600)))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert float(out) == jitter_offset(JOB_ID, 600)


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_jitter_offset_refuses_bad_windows(bad: object) -> None:
    with pytest.raises(ScheduleError):
        jitter_offset(JOB_ID, bad)  # type: ignore[arg-type]


# -- DST flags and risk warnings -------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "zone", "within", "expected"),
    [
        ("2026-03-29T12:00:00Z", "Europe/Berlin", timedelta(hours=24), True),
        ("2026-03-28T01:30:00Z", "Europe/Berlin", timedelta(hours=24), True),
        ("2026-03-27T12:00:00Z", "Europe/Berlin", timedelta(hours=24), False),
        ("2026-03-30T12:00:00Z", "Europe/Berlin", timedelta(hours=24), False),
        ("2026-03-29T00:30:00Z", "Europe/Berlin", timedelta(minutes=45), True),
        ("2026-03-29T00:00:00Z", "Europe/Berlin", timedelta(minutes=45), False),
        ("2026-11-01T06:00:00Z", "America/New_York", timedelta(hours=1), True),
        ("2026-10-03T15:00:00Z", "Australia/Lord_Howe", timedelta(hours=1), True),
        ("2026-03-29T01:00:00Z", "UTC", timedelta(days=365), False),
        ("2026-03-29T01:00:00Z", "Asia/Tokyo", timedelta(days=365), False),
    ],
)
def test_dst_transition_near(when: str, zone: str, within: timedelta, expected: bool) -> None:
    assert dst_transition_near(utc(when), zone, within) is expected


def test_cron_risks_day_of_month_or_day_of_week() -> None:
    risks = cron_risks("0 0 13 * 5", "UTC")
    assert len(risks) == 1
    assert "EITHER" in risks[0]
    assert cron_risks("0 0 13 * *", "UTC") == []
    assert cron_risks("0 0 * * 5", "UTC") == []


def test_cron_risks_day_field_starting_with_star_is_not_either() -> None:
    assert cron_risks("0 0 */2 * 1", "UTC") == []
    assert cron_risks("0 0 1 * */2", "UTC") == []
    assert "EITHER" in cron_risks("0 0 1-31 * 1", "UTC")[0]


def test_cron_risks_wall_clock_job_in_skipped_and_repeated_hours() -> None:
    risks = cron_risks("*/15 2 * * *", "Europe/Berlin")
    assert risks == [
        "02:00 does not exist in Europe/Berlin on 2026-03-29 (clocks go forward 1 hour): "
        "fires due then are skipped.",
        "02:00 happens twice in Europe/Berlin on 2026-10-25 (clocks go back 1 hour): "
        "fires due then run at both occurrences.",
    ]
    chatham = cron_risks("* 3 * * *", "Pacific/Chatham")
    assert any("03:00 does not exist" in r and "2026-09-27" in r for r in chatham)
    assert any("03:00 happens twice" in r and "2026-04-05" in r for r in chatham)


def test_cron_risks_fixed_time_in_a_skipped_hour() -> None:
    risks = cron_risks("30 2 * * *", "Europe/Berlin")
    assert any("02:30 does not exist" in r and "2026-03-29" in r and "03:00" in r for r in risks)


def test_cron_risks_fixed_time_in_a_repeated_hour() -> None:
    risks = cron_risks("30 1 * * *", "America/New_York")
    assert len(risks) == 1
    assert "01:30 happens twice" in risks[0] and "2026-11-01" in risks[0]


def test_cron_risks_thirty_minute_shift() -> None:
    risks = cron_risks("15 2 * * *", "Australia/Lord_Howe")
    assert len(risks) == 1 and "30 minutes" in risks[0] and "02:30" in risks[0]


def test_cron_risks_uses_the_year_it_is_told() -> None:
    risks = cron_risks("30 2 * * *", "Europe/Berlin", now=utc("2027-01-01T00:00:00Z"))
    assert any("2027-03-28" in r for r in risks)


@pytest.mark.parametrize(
    ("expr", "zone"),
    [
        ("0 * * * *", "Europe/Berlin"),  # hourly: expected to follow the clock
        ("*/5 * * * *", "America/New_York"),
        ("30 4 * * *", "Europe/Berlin"),  # outside the DST hours
        ("30 2 * * *", "UTC"),
        ("30 2 * * *", "Asia/Tokyo"),
        ("@daily", "Europe/Berlin"),
    ],
)
def test_cron_risks_quiet_for_safe_crons(expr: str, zone: str) -> None:
    assert cron_risks(expr, zone) == []


def test_cron_risks_days_missing_from_some_months() -> None:
    risks = cron_risks("0 0 31 * *", "UTC")
    assert len(risks) == 1 and "skipped" in risks[0] and "Feb" in risks[0]
    assert "Apr" in cron_risks("0 0 31 3-6 *", "UTC")[0]
    assert "leap years" in cron_risks("0 0 29 2 *", "UTC")[0]
    assert cron_risks("0 0 31 1,3,5,7,8,10,12 *", "UTC") == []
    assert cron_risks("0 0 L * *", "UTC") == []
    assert cron_risks("0 0 28 * *", "UTC") == []


# -- brute-force cross-check ------------------------------------------------------------


def _field_values(text: str, low: int, high: int) -> set[int]:
    """The numbers a numeric cron field names: lists, ranges, steps, "*"."""
    values: set[int] = set()
    for part in text.split(","):
        span, _, step = part.partition("/")
        if span in ("*", "?"):
            first, last = low, high
        elif "-" in span:
            first, last = (int(v) for v in span.split("-"))
        else:
            first = last = int(span)
            if step:  # "5/15" is "5-59/15"
                last = high
        values.update(range(first, last + 1, int(step or 1)))
    return values


def _cronie_matcher(expr: str) -> tuple[bool, Callable[[datetime], bool]]:
    """(runs by the wall clock, does a naive wall time match), by cronie's rules,
    written independently of croniter. Numeric fields only."""
    minute, hour, dom, month, dow = MACROS.get(expr, expr).split()
    minutes, hours = _field_values(minute, 0, 59), _field_values(hour, 0, 23)
    doms, months = _field_values(dom, 1, 31), _field_values(month, 1, 12)
    dows = {d % 7 for d in _field_values(dow, 0, 7)}  # 7 is Sunday too
    # cronie's DOM_STAR / DOW_STAR: the first character, so "*/2" counts.
    day_star = dom[0] in "*?" or dow[0] in "*?"

    def matches(wall: datetime) -> bool:
        in_dom, in_dow = wall.day in doms, (wall.weekday() + 1) % 7 in dows
        return (
            wall.minute in minutes
            and wall.hour in hours
            and wall.month in months
            and ((in_dom and in_dow) if day_star else (in_dom or in_dow))
        )

    return minute[0] == "*" or hour[0] == "*", matches


def _brute_force_fires(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """cronie's rules applied to every UTC minute in [start, end).

    * Wall-clock cron: a minute fires if its local wall time matches.
    * Fixed-time cron: a minute fires if its wall time matches and is the
      first occurrence of that wall time (zoneinfo marks the second with
      fold=1); and the first minute after a gap fires if any wall time inside
      the gap matches.
    """
    wall_clock, matches = _cronie_matcher(expr)
    tz = ZoneInfo(zone)
    step = timedelta(minutes=1)
    fires: list[datetime] = []
    t = start
    while t < end:
        local = t.astimezone(tz)
        fire = matches(local.replace(tzinfo=None)) and (wall_clock or local.fold == 0)
        before, now = (t - step).astimezone(tz).utcoffset(), local.utcoffset()
        assert before is not None and now is not None
        if not wall_clock and now > before:  # a gap ends at t: walls [t+before, t+now)
            wall = (t + before).replace(tzinfo=None)
            while wall < (t + now).replace(tzinfo=None):
                fire = fire or matches(wall)
                wall += step
        if fire:
            fires.append(t)
        t += step
    return fires


# Every offset change in 2026 of the zones cross-checked below.
CHANGES_2026 = [
    ("America/New_York", "2026-03-08T07:00:00Z"),
    ("America/New_York", "2026-11-01T06:00:00Z"),
    ("Europe/Berlin", "2026-03-29T01:00:00Z"),
    ("Europe/Berlin", "2026-10-25T01:00:00Z"),
    ("Africa/Casablanca", "2026-02-15T02:00:00Z"),
    ("Africa/Casablanca", "2026-03-22T02:00:00Z"),
    ("Pacific/Chatham", "2026-04-04T14:00:00Z"),
    ("Pacific/Chatham", "2026-09-26T14:00:00Z"),
    ("Australia/Lord_Howe", "2026-04-04T15:00:00Z"),
    ("Australia/Lord_Howe", "2026-10-03T15:30:00Z"),
    ("Australia/Sydney", "2026-04-04T16:00:00Z"),
    ("Australia/Sydney", "2026-10-03T16:00:00Z"),
]
WALL_CLOCK_EXPRS = [
    "* * * * *",
    "0 * * * *",
    "*/7 * * * *",
    "15 */2 * * *",
    "* 1 * * *",
    "*/30 * * * *",
    "*/10 1-3 * * *",
    "* 3 * * *",
    "@hourly",
]
FIXED_TIME_EXPRS = [
    "30 1 * * *",
    "45 1 * * *",
    "0 2 * * *",
    "15 2 * * *",
    "59 2 * * *",
    "0 3 * * *",
    "30 3 * * *",
    "0 1-3 * * *",
]


def test_the_cross_check_covers_every_2026_change() -> None:
    for zone in {z for z, _ in CHANGES_2026}:
        tz, found, step = ZoneInfo(zone), [], timedelta(minutes=30)
        t = utc("2026-01-01T00:00:00Z")
        while t.year == 2026:
            if (t + step).astimezone(tz).utcoffset() != t.astimezone(tz).utcoffset():
                found.append(iso(t + step))
            t += step
        assert found == [when for z, when in CHANGES_2026 if z == zone]


@pytest.mark.parametrize(("zone", "change"), CHANGES_2026)
@pytest.mark.parametrize("expr", WALL_CLOCK_EXPRS + FIXED_TIME_EXPRS)
def test_matches_brute_force_around_2026_changes(expr: str, zone: str, change: str) -> None:
    start = utc(change) - timedelta(hours=14)
    end = utc(change) + timedelta(hours=14)
    expected = _brute_force_fires(expr, zone, start, end)
    assert [iso(f) for f in cron(expr, zone).fires_between(start, end, 10_000)] == [
        iso(f) for f in expected
    ]


@pytest.mark.parametrize(
    "expr",
    [
        "0 0 */2 * 1",
        "0 0 1 * */2",
        "0 0 13 * 5",
        "0 0 1-31 * 1",
        "0 0 1,15 * 0-2",
        "0 0 */10 * 3-5",
        "0 0 ? * 1",
        "0 0 5/7 * 6",
        "0 0 */1 2 0",
        "0 0 29 2 1-5",
    ],
)
def test_day_fields_match_brute_force(expr: str) -> None:
    _, matches = _cronie_matcher(expr)
    start, end = utc("2026-01-01T00:00:00Z"), utc("2029-01-01T00:00:00Z")
    expected, day = [], start
    while day < end:
        if matches(day.replace(tzinfo=None)):
            expected.append(day)
        day += timedelta(days=1)
    assert cron(expr).fires_between(start, end, 10_000) == expected

"""Schedule math, pinned by tables of real dates (cronsim's TestDstTransitions style).

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
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from itertools import islice
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


def utc(iso: str) -> datetime:
    return datetime.fromisoformat(iso).astimezone(UTC)


def iso(value: datetime) -> str:
    assert value.tzinfo is UTC
    return value.isoformat().replace("+00:00", "Z")


def cron(expr: str, zone: str = "UTC", **kwargs: object) -> Schedule:
    return Schedule(cron=expr, interval_seconds=None, timezone=zone, **kwargs)  # type: ignore[arg-type]


def every(seconds: int, anchor: str, **kwargs: object) -> Schedule:
    return Schedule(cron=None, interval_seconds=seconds, anchor=utc(anchor), **kwargs)  # type: ignore[arg-type]


# -- daylight-saving transitions -------------------------------------------------

DST_CASES = [
    # Europe/Berlin, spring 2026: 02:00-03:00 local does not exist.
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
     ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]),
    ("0 * * * *", "Europe/Berlin", "2026-03-28T23:30:00Z",
     ["2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"]),
    ("*/15 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
     ["2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T00:15:00Z"]),
    ("*/15 * * * *", "Europe/Berlin", "2026-03-29T00:30:00Z",
     ["2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"]),
    # Europe/Berlin, autumn 2026: 02:00-03:00 local happens twice.
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
     ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]),
    ("0 * * * *", "Europe/Berlin", "2026-10-24T22:30:00Z",
     ["2026-10-24T23:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z",
      "2026-10-25T03:00:00Z"]),
    ("*/15 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
     ["2026-10-25T00:00:00Z", "2026-10-25T00:15:00Z", "2026-10-25T00:30:00Z",
      "2026-10-25T00:45:00Z", "2026-10-26T01:00:00Z"]),
    # Europe/Berlin, spring 2027.
    ("30 2 * * *", "Europe/Berlin", "2027-03-27T12:00:00Z",
     ["2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"]),
    ("0 * * * *", "Europe/Berlin", "2027-03-27T23:30:00Z",
     ["2027-03-28T00:00:00Z", "2027-03-28T01:00:00Z", "2027-03-28T02:00:00Z"]),
    ("*/15 2 * * *", "Europe/Berlin", "2027-03-27T12:00:00Z",
     ["2027-03-28T01:00:00Z", "2027-03-29T00:00:00Z", "2027-03-29T00:15:00Z"]),
    # Europe/Berlin, autumn 2027.
    ("30 2 * * *", "Europe/Berlin", "2027-10-30T12:00:00Z",
     ["2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"]),
    ("0 * * * *", "Europe/Berlin", "2027-10-30T22:30:00Z",
     ["2027-10-30T23:00:00Z", "2027-10-31T00:00:00Z", "2027-10-31T02:00:00Z",
      "2027-10-31T03:00:00Z"]),
    ("*/15 2 * * *", "Europe/Berlin", "2027-10-30T12:00:00Z",
     ["2027-10-31T00:00:00Z", "2027-10-31T00:15:00Z", "2027-10-31T00:30:00Z",
      "2027-10-31T00:45:00Z", "2027-11-01T01:00:00Z"]),
    # America/New_York, spring 2026: 02:00-03:00 local does not exist.
    ("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
     ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]),
    ("0 * * * *", "America/New_York", "2026-03-08T05:30:00Z",
     ["2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"]),
    ("*/15 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
     ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z", "2026-03-09T06:15:00Z"]),
    # America/New_York, autumn 2026: 01:00-02:00 local happens twice.
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
     ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]),
    ("0 * * * *", "America/New_York", "2026-11-01T03:30:00Z",
     ["2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z",
      "2026-11-01T08:00:00Z"]),
    ("*/15 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
     ["2026-11-01T05:00:00Z", "2026-11-01T05:15:00Z", "2026-11-01T05:30:00Z",
      "2026-11-01T05:45:00Z", "2026-11-02T06:00:00Z"]),
    # ... and asked from inside the second pass of the repeated hour.
    ("0 * * * *", "America/New_York", "2026-11-01T06:15:00Z",
     ["2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"]),
    ("*/15 1 * * *", "America/New_York", "2026-11-01T06:10:00Z",
     ["2026-11-02T06:00:00Z"]),
    # America/New_York, spring 2027.
    ("30 2 * * *", "America/New_York", "2027-03-13T12:00:00Z",
     ["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"]),
    ("0 * * * *", "America/New_York", "2027-03-14T05:30:00Z",
     ["2027-03-14T06:00:00Z", "2027-03-14T07:00:00Z", "2027-03-14T08:00:00Z"]),
    ("*/15 2 * * *", "America/New_York", "2027-03-13T12:00:00Z",
     ["2027-03-14T07:00:00Z", "2027-03-15T06:00:00Z", "2027-03-15T06:15:00Z"]),
    # America/New_York, autumn 2027.
    ("30 1 * * *", "America/New_York", "2027-11-06T12:00:00Z",
     ["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"]),
    ("0 * * * *", "America/New_York", "2027-11-07T03:30:00Z",
     ["2027-11-07T04:00:00Z", "2027-11-07T05:00:00Z", "2027-11-07T07:00:00Z",
      "2027-11-07T08:00:00Z"]),
    ("*/15 1 * * *", "America/New_York", "2027-11-06T12:00:00Z",
     ["2027-11-07T05:00:00Z", "2027-11-07T05:15:00Z", "2027-11-07T05:30:00Z",
      "2027-11-07T05:45:00Z", "2027-11-08T06:00:00Z"]),
    # Australia/Lord_Howe, April 2026: 01:30-02:00 local happens twice (30 min).
    ("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
     ["2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"]),
    ("0 * * * *", "Australia/Lord_Howe", "2026-04-04T13:30:00Z",
     ["2026-04-04T14:00:00Z", "2026-04-04T15:30:00Z", "2026-04-04T16:30:00Z"]),
    ("*/15 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
     ["2026-04-04T14:00:00Z", "2026-04-04T14:15:00Z", "2026-04-04T14:30:00Z",
      "2026-04-04T14:45:00Z", "2026-04-05T14:30:00Z"]),
    # Australia/Lord_Howe, October 2026: 02:00-02:30 local does not exist.
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z",
     ["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"]),
    ("0 * * * *", "Australia/Lord_Howe", "2026-10-03T14:00:00Z",
     ["2026-10-03T14:30:00Z", "2026-10-03T15:30:00Z", "2026-10-03T16:00:00Z"]),
    ("*/15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z",
     ["2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z", "2026-10-04T15:00:00Z"]),
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
    assert all(a < b for a, b in zip(fires, fires[1:], strict=False))


def test_raw_croniter_fires_twice_in_the_repeated_hour_and_we_do_not() -> None:
    """The reason the wrapper exists: croniter 7 on aware datetimes fires the
    repeated 01:00 (EST, 06:00Z) and fires 01:30 twice; cronie does neither."""
    ny = ZoneInfo("America/New_York")
    start = utc("2026-11-01T03:30:00Z")

    raw_hourly = croniter("0 * * * *", start.astimezone(ny))
    raw = [iso(raw_hourly.get_next(datetime).astimezone(UTC)) for _ in range(4)]
    assert raw == [
        "2026-11-01T04:00:00Z",
        "2026-11-01T05:00:00Z",
        "2026-11-01T06:00:00Z",  # 01:00 EST, the second 01:00
        "2026-11-01T07:00:00Z",
    ]
    ours = [iso(f) for f in cron("0 * * * *", "America/New_York").next_fires(start, 3)]
    assert ours == ["2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z"]

    raw_fixed = croniter("30 1 * * *", start.astimezone(ny))
    raw = [iso(raw_fixed.get_next(datetime).astimezone(UTC)) for _ in range(2)]
    assert raw == ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"]
    ours = [iso(f) for f in cron("30 1 * * *", "America/New_York").next_fires(start, 2)]
    assert ours == ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]


def test_local_day_with_skipped_hour_has_23_hourly_fires() -> None:
    # 2026-03-29 00:00 CET .. 2026-03-30 00:00 CEST
    day = cron("0 * * * *", "Europe/Berlin")
    assert day.count_fires_between(utc("2026-03-28T23:00:00Z"), utc("2026-03-29T22:00:00Z")) == 23


def test_local_day_with_repeated_hour_still_has_24_hourly_fires() -> None:
    # 2026-11-01 00:00 EDT .. 2026-11-02 00:00 EST: 25 hours long, 24 fires.
    day = cron("0 * * * *", "America/New_York")
    assert day.count_fires_between(utc("2026-11-01T04:00:00Z"), utc("2026-11-02T05:00:00Z")) == 24


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


def test_count_fires_between_cron_is_capped() -> None:
    minutely = cron("* * * * *")
    start = utc("2026-01-01T00:00:00Z")
    assert minutely.count_fires_between(start, start + timedelta(days=1)) == 1440
    assert minutely.count_fires_between(start, start + timedelta(days=1), cap=100) == 100
    assert minutely.count_fires_between(start, start) == 0


def test_never_firing_schedule_object_answers_none_quickly() -> None:
    # validate_cron refuses it, but Schedule math must still terminate if such a
    # row exists; bypass validation the way a corrupt row would.
    schedule = cron("0 0 * * *")
    object.__setattr__(schedule, "cron", "0 0 30 2 *")
    started = time.perf_counter()
    assert schedule.next_fire(utc("2026-01-01T00:00:00Z")) is None
    assert time.perf_counter() - started < 1.0


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
    started = time.perf_counter()
    assert schedule.count_fires_between(*year, cap=10**9) == 31_536_000
    assert schedule.count_fires_between(*year) == 1_000_000
    assert time.perf_counter() - started < 0.1
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
        "* * * * * *",  # seconds field
        "0 0 0 * * * 2026",
        "0 0 * *",
        "",
        "   ",
        "@reboot",
        "@annually",
        "@midnight",
        "@DAILY",
        "０ ０ * * *",  # fullwidth digits
        "٠ 0 * * *",  # Arabic-Indic digit
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
    with pytest.raises(ScheduleError, match="Not a valid cron expression.*never fire"):
        validate_cron("0 0 30 2 *")
    with pytest.raises(ScheduleError, match="exactly 5"):
        validate_cron("0 0 * * * *")
    with pytest.raises(ScheduleError, match="non-ASCII"):
        validate_cron("٠ 0 * * *")
    with pytest.raises(ScheduleError, match="at most 100"):
        validate_cron("*" + " " * 100)


def test_validate_cron_is_fast_even_for_never_firing_expressions() -> None:
    # Expressions used nowhere else, so no cached answer helps.
    for expr in ("59 23 30 2 *", "0 12 31 2,4,6,9,11 *", "*/7 */5 31 4 *"):
        started = time.perf_counter()
        with pytest.raises(ScheduleError):
            validate_cron(expr)
        assert time.perf_counter() - started < 0.05


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


def _brute_force_fires(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """The rules of PRODUCT.md §3 applied minute by minute, independently of
    the implementation: a matching wall time fires at its first occurrence
    (zoneinfo marks the second with fold=1), and a matching wall time inside a
    gap fires at the instant the gap ends. Time-of-day crons only."""
    minutes, hours, *days = croniter(expr).expanded
    assert days == [["*"], ["*"], ["*"]]
    tz = ZoneInfo(zone)

    def matches(wall: datetime) -> bool:
        return (minutes == ["*"] or wall.minute in minutes) and (
            hours == ["*"] or wall.hour in hours
        )

    fires: set[datetime] = set()
    step = timedelta(minutes=1)
    t = start
    while t < end:
        local = t.astimezone(tz)
        if local.fold == 0 and matches(local.replace(tzinfo=None)):
            fires.add(t)
        before, after = local.utcoffset(), (t + step).astimezone(tz).utcoffset()
        assert before is not None and after is not None
        if after > before:  # a gap opens at t + step: walls [t+1m+before, t+1m+after)
            wall = (t + step + before).replace(tzinfo=None)
            while wall < (t + step + after).replace(tzinfo=None):
                if matches(wall):
                    fires.add(t + step)
                wall += step
        t += step
    return sorted(fires)


@pytest.mark.parametrize(
    ("zone", "day"),
    [
        ("Europe/Berlin", "2026-03-29T00:00:00Z"),
        ("Europe/Berlin", "2026-10-25T00:00:00Z"),
        ("America/New_York", "2026-03-08T06:00:00Z"),
        ("America/New_York", "2026-11-01T06:00:00Z"),
        ("Australia/Lord_Howe", "2026-04-04T14:00:00Z"),
        ("Australia/Lord_Howe", "2026-10-03T15:00:00Z"),
    ],
)
@pytest.mark.parametrize(
    "expr",
    [
        "*/15 * * * *",
        "0 * * * *",
        "*/10 1-3 * * *",
        "30 1 * * *",
        "45 1 * * *",
        "0 2 * * *",
        "15 2 * * *",
        "59 2 * * *",
        "0 3 * * *",
    ],
)
def test_matches_brute_force_around_transitions(expr: str, zone: str, day: str) -> None:
    start = utc(day) - timedelta(hours=14)
    end = utc(day) + timedelta(hours=14)
    expected = _brute_force_fires(expr, zone, start, end)
    assert cron(expr, zone).fires_between(start, end, limit=10_000) == expected

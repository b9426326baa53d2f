"""Pure helpers behind the admin: schedules in words, durations, chart geometry."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs.display import describe_interval, describe_schedule, moment, relative, short_duration
from ops import charts


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (1, "every second"),
        (45, "every 45 seconds"),
        (60, "every minute"),
        (90, "every 90 seconds"),
        (300, "every 5 minutes"),
        (3600, "every hour"),
        (5400, "every 90 minutes"),
        (86_400, "every day"),
        (604_800, "every 7 days"),
        (31_536_000, "every 365 days"),
    ],
)
def test_intervals_read_in_the_largest_exact_unit(seconds, words):
    assert describe_interval(seconds) == words


@pytest.mark.parametrize(
    ("cron", "zone", "words"),
    [
        ("0 2 * * *", "Europe/Berlin", "At 02:00, Europe/Berlin"),
        ("*/5 * * * 1-5", "UTC", "Every 5 minutes, Monday through Friday, UTC"),
        ("@daily", "America/New_York", "At 00:00, America/New_York"),
        ("0 0 L * *", "UTC", "At 00:00, on the last day of the month, UTC"),
    ],
)
def test_cron_schedules_read_as_words_with_their_zone(cron, zone, words):
    assert describe_schedule(cron, None, zone) == words


def test_interval_schedules_name_no_zone():
    assert describe_schedule(None, 300, "Europe/Berlin") == "every 5 minutes"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.25, "250 ms"),
        (1.234, "1.2 s"),
        (12.6, "13 s"),
        (200, "3 min 20 s"),
        (7500, "2 h 5 min"),
        (7200, "2 h"),
        (273_600, "3 d 4 h"),
        (-5, "-5.0 s"),
    ],
)
def test_short_durations(seconds, text):
    assert short_duration(seconds) == text


def test_relative_times_against_a_given_now():
    now = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    assert relative(now + dt.timedelta(minutes=3), now) == "in 3 min"
    assert relative(now - dt.timedelta(seconds=40), now) == "40 s ago"
    assert relative(now, now) == "now"


@pytest.mark.parametrize(
    ("when", "zone", "text"),
    [
        ("2026-03-01T12:10:00", "Europe/Paris", "12:10:00 UTC (13:10 Europe/Paris, in 3 min)"),
        ("2026-03-01T12:10:00", "UTC", "12:10:00 UTC (in 3 min)"),
        ("2026-03-02T12:07:00", "UTC", "2026-03-02 12:07:00 UTC (in 1 d)"),
        (
            "2026-03-01T23:30:00",
            "Asia/Tokyo",
            "23:30:00 UTC (2026-03-02 08:30 Asia/Tokyo, in 11 h 23 min)",
        ),
        ("2026-03-01T12:10:00", "Nowhere/Atlantis", "12:10:00 UTC (in 3 min)"),
    ],
)
def test_moments_read_in_utc_then_the_jobs_zone_then_from_now(when, zone, text):
    now = dt.datetime(2026, 3, 1, 12, 7, tzinfo=dt.UTC)
    assert moment(dt.datetime.fromisoformat(when).replace(tzinfo=dt.UTC), zone, now) == text


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0, 1), (0.4, 1), (1.5, 2), (3.5, 5), (7, 10), (12, 20), (99, 100)]
)
def test_axis_tops_are_round_numbers(value, ceiling):
    assert charts.nice_ceiling(value) == ceiling


def test_a_line_breaks_at_gaps_and_marks_lone_points():
    chart = charts.line_chart([1.0, 2.0, None, 4.0, None, 1.0, 1.0], {0: "a", 6: "now"})
    assert len(chart.paths) == 2 and len(chart.dots) == 1
    assert chart.y_max == 5
    assert [t.anchor for t in chart.x_ticks] == ["start", "end"]
    # The highest sample sits at 4/5 of the plot height above the baseline.
    _, y = chart.dots[0]
    assert y == pytest.approx(chart.baseline - 0.8 * (chart.baseline - chart.top), abs=0.1)


def test_an_empty_line_chart_says_so():
    assert charts.line_chart([None, None], {}).empty


def test_bars_stack_states_in_order_from_the_axis_up():
    chart = charts.stacked_bars(
        [{"failed": 1, "succeeded": 3}, {}],
        ["failed", "succeeded"],
        {0: "-1 min", 1: "now"},
        ["12:00 UTC", "12:01 UTC"],
    )
    failed, succeeded = chart.bars
    assert (failed.state, succeeded.state) == ("failed", "succeeded")
    assert failed.y + failed.height == pytest.approx(chart.baseline, abs=0.1)
    assert succeeded.y + succeeded.height == pytest.approx(failed.y, abs=0.1)
    assert chart.y_max == 5 and failed.title == "12:00 UTC: 1 failed"
    assert not chart.empty

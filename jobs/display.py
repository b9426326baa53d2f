"""How schedules and durations read to a person (the admin, the dashboard).

Display only: nothing here decides when anything fires; ``jobs.schedules``
does. Cron text is put into words by cron-descriptor rather than by a
hand-written describer.
"""

from __future__ import annotations

import datetime as dt
import functools
import zoneinfo

from cron_descriptor import ExpressionDescriptor, Options

from jobs.schedules import MACROS

_UNITS = (
    (86_400, "day"),
    (3_600, "hour"),
    (60, "minute"),
    (1, "second"),
)


def describe_interval(seconds: int) -> str:
    """``every 5 minutes``, ``every hour``, ``every 90 seconds``.

    The largest unit that divides the interval exactly, so that nothing is
    rounded away: 5,400 s reads "every 90 minutes", not "every 1.5 hours".
    """
    for size, unit in _UNITS:
        if seconds % size == 0:
            count = seconds // size
            return f"every {unit}" if count == 1 else f"every {count:,} {unit}s"
    raise AssertionError("unreachable: every integer is a whole number of seconds")


@functools.lru_cache(maxsize=2048)
def describe_cron(cron: str) -> str:
    """``At 02:00``, ``Every 5 minutes, Monday through Friday``.

    Macros are described through their five-field meaning. An expression that
    cron-descriptor cannot put into words is shown as written.
    """
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    try:
        return ExpressionDescriptor(MACROS.get(cron, cron), options).get_description()
    except Exception:  # cron-descriptor's own errors vary by release; the text will do
        return cron


def describe_schedule(
    cron: str | None,
    interval_seconds: int | None,
    timezone: str,
    *,
    run_at: dt.datetime | None = None,
    end_at: dt.datetime | None = None,
) -> str:
    """A job's schedule in words: ``At 02:00, Europe/Berlin``, ``every 5
    minutes``, ``once, at 2026-12-24 18:00 (Europe/Berlin)``, with ``, until
    ...`` for an end.

    The zone is named for cron schedules and one-off times only: an interval
    is the same length in every zone.
    """
    if cron:
        words = f"{describe_cron(cron)}, {timezone}"
    elif interval_seconds:
        words = describe_interval(interval_seconds)
    elif run_at is not None:
        words = f"once, at {_local(run_at, timezone)}"
    else:
        return "no schedule"
    if end_at is not None:
        words += f", until {_local(end_at, timezone)}"
    return words


def _local(when: dt.datetime, timezone: str) -> str:
    """``2026-12-24 18:00 (Europe/Berlin)``: an instant in the job's zone."""
    try:
        zone = zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        zone, timezone = zoneinfo.ZoneInfo("UTC"), "UTC"
    local = when.astimezone(zone)
    shown = f"{local:%Y-%m-%d %H:%M:%S}" if local.second else f"{local:%Y-%m-%d %H:%M}"
    return f"{shown} ({timezone})"


def short_duration(seconds: float | None) -> str:
    """``850 ms``, ``12.4 s``, ``3 min 20 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds is None:
        return ""
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{sign}{seconds:.1f} s" if seconds < 10 else f"{sign}{seconds:.0f} s"
    whole = int(seconds)
    for size, unit, small_size, small_unit in (
        (86_400, "d", 3_600, "h"),
        (3_600, "h", 60, "min"),
        (60, "min", 1, "s"),
    ):
        if whole >= size:
            big, rest = divmod(whole, size)
            small = rest // small_size
            return f"{sign}{big} {unit} {small} {small_unit}" if small else f"{sign}{big} {unit}"
    raise AssertionError("unreachable")


def relative(when: dt.datetime | None, now: dt.datetime) -> str:
    """``in 3 min``, ``12 s ago``: ``when`` against ``now`` (the database clock)."""
    if when is None:
        return ""
    delta = (when - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    text = short_duration(abs(delta))
    return f"in {text}" if delta > 0 else f"{text} ago"


def missed_text(job) -> str:
    """ "missed since 2026-12-01 10:00 UTC: 1,340" for a job with fires that
    were counted rather than recorded one by one (past a recovery's cap),
    "" for one without."""
    if not job.missed_count:
        return ""
    since = f"{job.missed_since:%Y-%m-%d %H:%M} UTC" if job.missed_since else "?"
    return f"missed since {since}: {job.missed_count:,}"


def moment(when: dt.datetime, zone: str, now: dt.datetime) -> str:
    """``12:10:00 UTC (13:10 Europe/Paris, in 3 min)``: a time on a job's page.

    UTC first, since runs and logs are in UTC; the job's own zone beside it,
    since that is the zone its schedule is read in; then how far from ``now``
    (the database clock). The date is shown only when it is not today's (UTC).
    A zone this host cannot read (the system pauses such a job) is left out.
    """
    utc = when.astimezone(dt.UTC)
    dated = utc.date() != now.astimezone(dt.UTC).date()
    text = f"{utc:%Y-%m-%d %H:%M:%S}" if dated else f"{utc:%H:%M:%S}"
    around = [relative(when, now)]
    try:
        local = when.astimezone(zoneinfo.ZoneInfo(zone))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        zone = "UTC"
    if zone != "UTC":
        local_format = "%Y-%m-%d %H:%M" if dated or local.date() != utc.date() else "%H:%M"
        around.insert(0, f"{local:{local_format}} {zone}")
    return f"{text} UTC ({', '.join(around)})"


# An audit event's action in words (docs/guides/api.md "Audit events" lists them).
EVENT_ACTIONS = {
    "created": "Created",
    "updated": "Edited",
    "paused": "Paused",
    "resumed": "Resumed",
    "triggered": "Triggered",
    "backfilled": "Backfilled",
    "run_retried": "Run retried",
    "secret_rotated": "Secret rotated",
    "deleted": "Deleted",
}


def event_action(action: str) -> str:
    """``Secret rotated`` for ``secret_rotated``; an action this release does
    not know reads as its own name, in words."""
    return EVENT_ACTIONS.get(action, action.replace("_", " ").capitalize())

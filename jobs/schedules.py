"""Schedule math: when does a job fire?

This module is pure. It imports no ORM and never reads the clock: every
function is told the time (``after=``, ``start=``, ``now=``), the way
procrastinate's ``get_next_tick(at=...)`` is. That keeps the dispatcher's notion
of "now" in one place (the database clock) and makes every rule here testable
with a table of dates.

The contract
------------

A cron is read in the job's time zone; every fire is a UTC instant, fires
strictly increase, and no two fires share an instant. Daylight-saving changes
follow cronie (the cron of most Linux distributions), which treats two kinds of
job differently:

* A *fixed-time* job, whose minute and hour fields both start with something
  other than ``*`` (``30 2 * * *``, ``0 9-17 * * 1-5``):

  - a local time that does not exist (spring forward) fires once, at the first
    instant after the gap;
  - a local time that happens twice (fall back) fires once, at its first
    occurrence.

* A *wall-clock* job, whose minute or hour field starts with ``*``
  (``* * * * *``, ``0 * * * *``, ``@hourly``, ``0 */2 * * *``, ``* 3 * * *``),
  fires at every real occurrence of a matching local time. An hourly job fires
  twice in a repeated hour and is never silent; a matching time inside a gap
  does not exist, so nothing fires for it, neither there nor shifted.

Day-of-month and day-of-week: when both are restricted, a day matches if
EITHER matches ("0 0 13 * 5" is every 13th and every Friday). A field that
starts with ``*``, ``*/2`` included, counts as unrestricted, as in cronie, and
then a day must match both: "0 0 */2 * 1" is the odd-numbered days that are
Mondays.

croniter
--------

croniter is used only here, and wrapped, because its daylight-saving behaviour
is not the one above. Handed an aware datetime, croniter 7 fires a repeated
hour twice even for a fixed-time job ("30 1 * * *" in New York at both
01:30s), and its gap handling differs between zoneinfo and pytz and has changed
between releases. So we never give croniter a time zone: it iterates naive
*wall-clock* times in the job's zone, and this module decides which UTC
instants they stand for (:meth:`Schedule._iter_fixed_time`,
:meth:`Schedule._iter_wall_clock`). croniter is always built with
``implement_cron_bug=True``, which is its name for cronie's day-field rule.
Everything after the mapping to UTC is UTC arithmetic.
"""

from __future__ import annotations

import calendar
import copy
import functools
import hashlib
import re
import uuid
import zoneinfo
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from importlib import resources
from itertools import islice, takewhile
from pathlib import Path

from croniter import CroniterBadDateError, CroniterError, croniter

from core.errors import UserFacingError

__all__ = [
    "MACROS",
    "MAX_CRON_LENGTH",
    "MAX_INTERVAL_SECONDS",
    "Schedule",
    "ScheduleError",
    "cron_risks",
    "dst_transition_near",
    "end_problem",
    "ending_warnings",
    "jitter_offset",
    "validate_cron",
    "validate_interval",
    "validate_timezone",
]

MACROS: dict[str, str] = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
}

MAX_CRON_LENGTH = 100
MAX_INTERVAL_SECONDS = 31_536_000  # 365 days

# A cron must fire at least once in this many years after _VALIDATION_REFERENCE.
# Eight years always contains a leap year (even across 2100, which is not one),
# so "0 0 29 2 *" is accepted while "0 0 30 2 *" is refused.
_VALIDATION_YEARS = 8
_VALIDATION_REFERENCE = datetime(2000, 1, 1)

# How far ahead next_fire() looks before answering None. Wider than the
# validation horizon because a few valid expressions ("0 0 29 2 0#5": the 29th of
# February when it is the fifth Sunday) repeat on a 28-year cycle.
_SEARCH_YEARS = 50

# The year of zone rules that cron_risks() inspects when the caller does not
# say which. The function must stay pure, so it never defaults to the clock.
_RISK_REFERENCE = datetime(2026, 1, 1, tzinfo=UTC)

_ONE_US = timedelta(microseconds=1)
_ONE_MINUTE = timedelta(minutes=1)
# A run of one fire: the fire itself, zero minutes after it.
_JUST_THIS: tuple[int, ...] = (0,)

# How often _offset_change() samples a zone's UTC offset. It relies on no zone
# changing its offset twice within one step: in the tz database the closest two
# changes since 1900 are about four days apart (more than a week since 1970).
_OFFSET_SAMPLE = timedelta(days=1)

# Names croniter understands in a field. Anything else alphabetic is refused,
# notably "H" (hashed, needs a per-job seed we do not pass) and "R" (random:
# it would give a different schedule every time the expression is parsed).
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DOW_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_ALLOWED_WORDS = frozenset(_MONTH_NAMES + _DOW_NAMES + ("l", "w"))
_FIELD_RE = re.compile(r"^[0-9A-Za-z*,/#?-]+$")
_WORD_RE = re.compile(r"[a-z]+")
_RANGE_RE = re.compile(r"^([0-9a-z]+)-([0-9a-z]+)(?:/([0-9]+))?$")
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")

# croniter field positions (5-field expressions).
_HOUR, _DOM, _MONTH, _DOW = 1, 2, 3, 4
_DAYS_IN_MONTH = {m: calendar.monthrange(2001, m)[1] for m in range(1, 13)}  # February: 28


class ScheduleError(UserFacingError):
    """An invalid schedule. The message is user-facing: the API and the admin
    show it next to the field, e.g. ``Not a valid cron expression: ...``.
    ``field`` names that field when the rule is about one that the caller
    cannot guess (``start_at``, ``end_at``); None leaves it to the caller
    (the schedule's kind: ``cron``, ``interval_seconds`` or ``run_at``)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


# -- validation -----------------------------------------------------------------


def validate_cron(expr: str) -> str:
    """Check a cron expression and return it normalised.

    Normalised means stripped and single-spaced; a macro is returned as written
    (its 5-field meaning is applied when iterating). Refused, with a message
    that says why:

    * anything that is not a string, is longer than 100 characters, or is not
      ASCII (``str.isdigit()`` accepts Arabic-Indic and fullwidth digits, and
      they must not slip through to a parser that might do the same);
    * anything but exactly 5 fields or one of :data:`MACROS` (no seconds or
      year fields, no ``@reboot``);
    * hashed (``H``) and random (``R``) fields, which are not a fixed schedule;
    * a syntactically valid expression that can never fire (``0 0 30 2 *``).
      croniter's ``is_valid`` says yes to those, so we look for a real fire.
    """
    if not isinstance(expr, str):
        raise ScheduleError("A cron expression must be a string.")
    if len(expr) > MAX_CRON_LENGTH:
        raise ScheduleError(
            f"A cron expression must be at most {MAX_CRON_LENGTH} characters (got {len(expr)})."
        )
    if not expr.isascii():
        bad = next(c for c in expr if not c.isascii())
        raise ScheduleError(
            f"Not a valid cron expression: {expr!r} contains the non-ASCII character {bad!r}."
        )
    text = expr.strip()
    if not text:
        raise ScheduleError("A cron expression must not be empty.")
    if text.startswith("@"):
        if text in MACROS:
            return text
        raise ScheduleError(
            f"Not a valid cron expression: {text!r}. Supported macros are {', '.join(MACROS)}."
        )
    if any(c not in " \t" and not c.isprintable() for c in text):
        raise ScheduleError(f"Not a valid cron expression: {text!r} contains a control character.")
    fields = text.split()
    normalised = " ".join(fields)
    error = _cron_error(normalised)
    if error:
        raise ScheduleError(error)
    return normalised


@functools.lru_cache(maxsize=4096)
def _cron_error(normalised: str) -> str | None:
    """The user-facing error for a 5-field expression, or None if it is valid.

    Cached because Schedule() validates on construction and the dispatcher
    builds one per job per tick; the answer depends on the string alone.
    """
    fields = normalised.split(" ")
    if len(fields) != 5:
        return (
            f"Not a valid cron expression: {normalised!r} has {len(fields)} fields; use exactly 5 "
            "(minute hour day-of-month month day-of-week) or one of " + ", ".join(MACROS) + "."
        )
    for name, value in zip(_FIELD_NAMES, fields, strict=True):
        if not _FIELD_RE.match(value):
            return f"Not a valid cron expression: {name} field {value!r} has unexpected characters."
        for word in _WORD_RE.findall(value.lower()):
            if word not in _ALLOWED_WORDS:
                return f"Not a valid cron expression: {name} field {value!r} is not supported."
    # croniter 7 mishandles the OR rule when one day field uses nth-weekday
    # ("5#2"), last-weekday ("L5") or nearest-weekday ("15W") syntax and the
    # other is restricted: it silently drops one side, or finds no date at all.
    dom, dow = fields[_DOM].lower(), fields[_DOW].lower()
    special = "w" in dom or "#" in dow or "l" in dow
    if special and dom not in ("*", "?") and dow not in ("*", "?"):
        return (
            f"Not a valid cron expression: {normalised!r}. W in day-of-month, and # or L in "
            "day-of-week, need the other day field to be '*'."
        )
    try:
        it = _croniter(
            _croniter_expr(normalised),
            _VALIDATION_REFERENCE - timedelta(minutes=1),
            _VALIDATION_YEARS,
        )
    except (CroniterError, ValueError, TypeError, KeyError, IndexError) as exc:
        return f"Not a valid cron expression: {normalised!r} ({exc})."
    try:
        it.get_next(datetime)
    except CroniterBadDateError:
        return f"Not a valid cron expression: {normalised!r} can never fire."
    except (CroniterError, ValueError, OverflowError) as exc:
        return f"Not a valid cron expression: {normalised!r} ({exc})."
    return None


@functools.lru_cache(maxsize=4096)
def _croniter_expr(cron: str) -> str:
    """The expression to hand croniter for a validated cron or macro.

    Macros are expanded to their 5-field meaning. An equal range ("9-9",
    "jan-jan", "9-9/2") is rewritten to its single value: croniter 7 reads an
    equal range as the *whole* field (so "0 9-9 * * *" would fire every hour),
    while cron and every user mean "just 9".
    """
    if cron in MACROS:
        return MACROS[cron]
    fields = cron.split()
    for index, value in enumerate(fields):
        items = value.split(",")
        for pos, item in enumerate(items):
            m = _RANGE_RE.match(item.lower())
            if m is None:
                continue
            low, high = _field_number(index, m.group(1)), _field_number(index, m.group(2))
            if low is not None and low == high:
                items[pos] = m.group(1)
        fields[index] = ",".join(items)
    return " ".join(fields)


def _croniter(expr: str, start: datetime, years: int) -> croniter:
    """croniter over naive wall times after ``start``, with cronie's day rule.

    croniter's default ORs the two day fields whenever both list days, so
    "0 0 */2 * 1" would fire on every odd day and every Monday. cronie ORs only
    when neither field starts with ``*``, and otherwise requires both; croniter
    does that with ``implement_cron_bug=True`` (named after Vixie cron, whose
    behaviour cronie kept).

    Parsing an expression is most of croniter's cost (~0.4 ms, against ~30 us
    a fire), and a dispatcher tick starts several iterators per due job, so
    each expression is parsed once: a parsed prototype is copied and set to
    ``start``. The copy is shallow; croniter never changes its parsed fields
    while iterating (it works on copies of them).
    """
    it = copy.copy(_parsed_croniter(expr, years))
    it.set_current(start, force=True)
    return it


@functools.lru_cache(maxsize=4096)
def _parsed_croniter(expr: str, years: int) -> croniter:
    return croniter(
        expr, _VALIDATION_REFERENCE, max_years_between_matches=years, implement_cron_bug=True
    )


def _is_wall_clock(expr: str) -> bool:
    """Whether a 5-field expression runs by the wall clock: its minute or hour
    field starts with ``*``. cronie's MIN_STAR / HR_STAR test, character for
    character, so "*/15 2 * * *" counts and "0-59 * * * *" does not."""
    minute, hour = expr.split(" ", 2)[:2]
    return minute.startswith("*") or hour.startswith("*")


def _field_number(index: int, token: str) -> int | None:
    """The number a range bound stands for, without aliasing Sunday 7 to 0
    (cron reads "0-7" as the whole week, not as the single day Sunday)."""
    if token.isdigit():
        return int(token)
    if index == _MONTH and token in _MONTH_NAMES:
        return _MONTH_NAMES.index(token) + 1
    if index == _DOW and token in _DOW_NAMES:
        return _DOW_NAMES.index(token)
    return None


@functools.cache
def _timezone_names() -> frozenset[str]:
    # available_timezones() walks the tz database on every call; the set cannot
    # change while the process runs. "localtime" is the host's zone, not an
    # IANA name, and its meaning would differ between machines.
    return frozenset(zoneinfo.available_timezones() - {"localtime", "posixrules"})


@functools.cache
def canonical_timezones() -> tuple[str, ...]:
    """The zone names worth offering in a list: "UTC", then the tz database's
    own zones in name order, without its links (legacy aliases such as
    ``US/Pacific``, ``Europe/Kiev``) and without ``Factory``.

    The database's source summary ``tzdata.zi`` says which names are zones
    ("Z" lines) and which are links ("L" lines); the first one found, in the
    system's zone directories then in the ``tzdata`` package, is read. Without
    one, every known name is offered. Any known name stays valid
    (``validate_timezone``): this is what to suggest, not what to accept.
    """
    known = _timezone_names()
    summary = _tz_summary()
    if summary is None:
        return ("UTC", *sorted(known - {"UTC"}))
    zones = {
        line.split()[1]
        for line in summary.splitlines()
        if line.startswith("Z ") and len(line.split()) > 1
    }
    return ("UTC", *sorted((zones & known) - {"UTC", "Factory"}))


def _tz_summary() -> str | None:
    """The text of the tz database's ``tzdata.zi``, or None if none is found."""
    for directory in zoneinfo.TZPATH:
        path = Path(directory) / "tzdata.zi"
        if path.is_file():
            return path.read_text(encoding="utf-8")
    try:
        return (resources.files("tzdata") / "zoneinfo" / "tzdata.zi").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        return None


def validate_timezone(name: str) -> str:
    """Check an IANA zone name: exact and case-sensitive.

    ZoneInfo() itself would accept "utc" or "europe/berlin" on case-insensitive
    file systems, and joins the name to a directory path, so the name is checked
    against the known list before anything opens a file.
    """
    if not isinstance(name, str) or name not in _timezone_names():
        raise ScheduleError(
            f"Not a valid time zone: {name!r}. Use an IANA name such as 'UTC' or 'Europe/Berlin'."
        )
    return name


def validate_interval(seconds: object) -> int:
    """Check an interval: an int (not a bool, not a float) from 1 to 31,536,000."""
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise ScheduleError("The interval must be a whole number of seconds.")
    if not 1 <= seconds <= MAX_INTERVAL_SECONDS:
        raise ScheduleError(
            f"The interval must be between 1 and {MAX_INTERVAL_SECONDS:,} seconds (got {seconds})."
        )
    return seconds


START_WITH_RUN_AT = "A one-off job fires once, at run_at: leave start_at empty."


def end_problem(
    start_at: datetime | None, run_at: datetime | None, end_at: datetime | None
) -> str | None:
    """Why ``end_at`` cannot end this schedule (the user-facing words, which
    the API and the admin show next to ``end_at``), or None: it must come
    after the start and after a one-off's fire, or nothing could ever fire."""
    if end_at is None:
        return None
    if start_at is not None and end_at <= start_at:
        return "end_at must be after start_at: nothing could fire between them."
    if run_at is not None and end_at <= run_at:
        return "end_at must be after run_at: the one fire would be past the end."
    return None


def _aware(name: str, value: datetime) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ScheduleError(f"{name} must be a timezone-aware datetime.", field=name)
    return value.astimezone(UTC)


# -- wall clock <-> UTC ---------------------------------------------------------


def _wall_to_utc(wall: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """Map a naive wall-clock time in ``zone`` to the one UTC instant a
    fixed-time job fires at for it.

    zoneinfo gives every wall time two readings (PEP 495): ``fold=0`` uses the
    offset in force before a transition, ``fold=1`` the one after.

    1. Same offset both ways: an ordinary time.
    2. fold=0 offset larger (fall back): the time happens twice. fold=0 is the
       earlier instant, the first occurrence, which is the one that fires.
    3. fold=0 offset smaller (spring forward): the time does not exist. It fires
       at the first instant after the gap, the transition itself, found by
       bisection between the two readings (zoneinfo does not expose transitions).
    """
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    off_first, off_second = first.utcoffset(), second.utcoffset()
    assert off_first is not None and off_second is not None
    if off_first >= off_second:
        return first.astimezone(UTC)
    naive = wall.replace(tzinfo=UTC)
    return _transition_instant(zone, naive - off_second, naive - off_first)


def _transition_instant(zone: zoneinfo.ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The first UTC instant in (lo, hi] whose offset differs from lo's.

    Exact to the microsecond: at most ~40 halvings even for a day-long gap.
    """
    before = lo.astimezone(zone).utcoffset()
    while hi - lo > _ONE_US:
        mid = lo + (hi - lo) // 2
        if mid.astimezone(zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi


def _offset(zone: zoneinfo.ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _offset_change(
    zone: zoneinfo.ZoneInfo, lo: datetime, hi: datetime, offset: timedelta
) -> datetime | None:
    """The first instant in (lo, hi] whose UTC offset is not ``offset``, or None.

    The instants just after ``lo`` must read ``offset``. One reading when hi is
    within a day of lo (an hourly job between two fires), then one a day: see
    :data:`_OFFSET_SAMPLE`. A change is pinned to the microsecond by bisection.
    """
    t = lo
    while t < hi:
        nxt = min(t + _OFFSET_SAMPLE, hi)
        if _offset(zone, nxt) != offset:
            while nxt - t > _ONE_US:
                mid = t + (nxt - t) // 2
                if _offset(zone, mid) == offset:
                    t = mid
                else:
                    nxt = mid
            return nxt
        t = nxt
    return None


def _transitions(
    zone: zoneinfo.ZoneInfo, start: datetime, end: datetime, step: timedelta
) -> Iterator[tuple[datetime, timedelta, timedelta]]:
    """(instant, offset before, offset after) for each offset change in (start, end].

    Sampled every ``step``: two changes closer together than that are missed,
    which is fine for the steps used here (no zone changes twice within hours).
    """
    t = start
    offset = t.astimezone(zone).utcoffset()
    while t < end:
        nxt = min(t + step, end)
        nxt_offset = nxt.astimezone(zone).utcoffset()
        if nxt_offset != offset:
            assert offset is not None and nxt_offset is not None
            yield _transition_instant(zone, t, nxt), offset, nxt_offset
        t, offset = nxt, nxt_offset


# -- schedules ------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """A job's schedule: a cron read in ``timezone``, a fixed interval, or
    one fire at ``run_at`` (a one-off).

    Validated on construction, so a Schedule that exists is one that can be
    iterated. ``start_at``: no fire before it. ``end_at``: no fire after it
    (a fire exactly at ``end_at`` still fires). ``anchor``: what an interval
    counts from when ``start_at`` is unset. A job's schedule is made by
    :meth:`for_job`, which states the anchor rule. All results are aware UTC
    datetimes.
    """

    cron: str | None
    interval_seconds: int | None
    timezone: str = "UTC"
    start_at: datetime | None = None
    anchor: datetime | None = None
    run_at: datetime | None = None
    end_at: datetime | None = None

    def __post_init__(self) -> None:
        cron = self.cron or None  # forms hand over "" for an empty field
        kinds = [cron, self.interval_seconds, self.run_at]
        if sum(kind is not None for kind in kinds) != 1:
            raise ScheduleError("Set exactly one of cron, interval_seconds and run_at.")
        if self.run_at is not None and self.start_at is not None:
            raise ScheduleError(START_WITH_RUN_AT, field="start_at")
        set_ = functools.partial(object.__setattr__, self)
        set_("cron", None if cron is None else validate_cron(cron))
        if self.interval_seconds is not None:
            validate_interval(self.interval_seconds)
        validate_timezone(self.timezone)
        for name in ("start_at", "anchor", "run_at", "end_at"):
            if getattr(self, name) is not None:
                set_(name, _aware(name, getattr(self, name)))
        if self.interval_seconds is not None and self.start_at is None and self.anchor is None:
            raise ScheduleError("An interval schedule needs start_at or an anchor.")
        problem = end_problem(self.start_at, self.run_at, self.end_at)
        if problem:
            raise ScheduleError(problem, field="end_at")

    @classmethod
    def for_job(
        cls,
        *,
        cron: str | None,
        interval_seconds: int | None,
        timezone: str,
        start_at: datetime | None,
        created_at: datetime | None,
        run_at: datetime | None = None,
        end_at: datetime | None = None,
    ) -> Schedule:
        """The schedule of a job: of its row, of a span of its schedule
        history, of the dispatcher's copy of it, or of one not made yet. The
        one place that says what an interval counts from.

        The anchor rule: an interval schedule counts its steps from
        ``start_at`` when set, else from the job's creation time
        (``created_at``, read from the database clock when the job was
        inserted); it fires at ``anchor + k * interval_seconds``, k >= 0. Only
        a new ``start_at`` moves the anchor: an edit of the interval, a pause
        or a resume recomputes the next fire from now, on steps still counted
        from the same anchor. A cron has no anchor: ``start_at`` only holds
        its fires back.

        A job not saved yet has no creation time (``created_at`` is None): its
        interval counts from ``start_at`` if it has one; without one it has
        nothing to count from, and the interval schedule is refused
        (``ScheduleError``), while a cron schedule is built as usual. A
        caller that checks or previews the schedule of a job about to be made
        (the admin's form, the API's serializer and schedule preview) passes
        the time it would be created at: now.

        A one-off (``run_at``) has no anchor and no start: its one fire is
        ``run_at``. ``end_at`` cuts any schedule: nothing fires after it.
        """
        return cls(
            cron=cron,
            interval_seconds=interval_seconds,
            timezone=timezone,
            start_at=start_at,
            anchor=created_at,
            run_at=run_at,
            end_at=end_at,
        )

    # -- public API

    def next_fire(self, after: datetime) -> datetime | None:
        """The first fire strictly after ``after`` (and not before start_at), or
        None if there is none within the search horizon."""
        return next(self.iter_fires(after), None)

    def next_fires(self, after: datetime, count: int) -> list[datetime]:
        """Up to ``count`` fires strictly after ``after``, ascending."""
        return list(islice(self.iter_fires(after), max(count, 0)))

    def iter_fires(self, after: datetime, *, inclusive: bool = False) -> Iterator[datetime]:
        """Fires after ``after`` (or at it, with ``inclusive``), lazily, ascending.

        Strictly increasing: two wall times that map to one instant (a whole
        skipped hour collapsing onto the gap's end) yield it once.
        """
        floor = _aware("after", after)
        if inclusive:
            floor -= _ONE_US
        if self.start_at is not None and self.start_at - _ONE_US > floor:
            floor = self.start_at - _ONE_US
        # Every generator below yields fires strictly greater than `floor`.
        # Datetimes have microsecond resolution, so "> t - 1us" is ">= t".
        if self.run_at is not None:
            fires: Iterator[datetime] = iter([self.run_at] if self.run_at > floor else [])
        elif self.cron is not None:
            fires = self._iter_cron(floor)
        else:
            fires = self._iter_interval(floor)
        if self.end_at is None:
            return fires
        end_at = self.end_at
        return takewhile(lambda fire: fire <= end_at, fires)

    def fires_between(self, start: datetime, end: datetime, limit: int) -> list[datetime]:
        """Fires f with start <= f < end, ascending, at most ``limit``."""
        end = _aware("end", end)
        out: list[datetime] = []
        if limit <= 0:
            return out
        for fire in self.iter_fires(start, inclusive=True):
            if fire >= end:
                break
            out.append(fire)
            if len(out) >= limit:
                break
        return out

    def latest_fires(self, after: datetime, until: datetime, count: int) -> list[datetime]:
        """The newest ``count`` fires f with after <= f <= until, ascending.

        Both bounds are inclusive, as the dispatcher needs them: ``after`` is a
        job's next_fire_at (itself a fire that is due) and ``until`` is the
        tick's now (a fire exactly at now is due).

        The cost follows ``count``, not the fires in the range: a per-minute
        cron two months behind must not enumerate 86,400 fires to keep the last
        hundred. Interval schedules are arithmetic. A cron looks back from
        ``until`` over a window that doubles until it holds ``count`` fires or
        reaches ``after``, and each window is listed forward by the same walk
        as :meth:`count_fires_between`, so the answer is the tail of what
        iter_fires would list.
        """
        after, until = _aware("after", after), _aware("until", until)
        if self.end_at is not None:
            until = min(until, self.end_at)
        if count <= 0 or until < after:
            return []
        if self.run_at is not None:
            return [self.run_at] if after <= self.run_at <= until else []
        if self.interval_seconds is not None:
            anchor, step = self._interval_anchor(), timedelta(seconds=self.interval_seconds)
            first = _ceil_steps(anchor, after, step)
            if until < anchor:
                return []
            last = (until - anchor) // step  # the last k with anchor + k * step <= until
            return [anchor + k * step for k in range(max(first, last - count + 1), last + 1)]
        # A cron fires at most once a minute, so `count` minutes is the smallest
        # window that can hold `count` fires: the first guess for a dense cron.
        window = timedelta(minutes=count)
        newer: list[datetime] = []  # the fires in [lo, until], ascending
        hi = until + _ONE_US  # the region listed next is [lo, hi)
        while True:
            lo = after if until - after <= window else until - window
            region = list(self._cron_runs(lo, hi))
            newer = _tail_of_runs(region, count - len(newer)) + newer
            if len(newer) >= count or lo == after:
                return newer[-count:]
            hi, window = lo, window * 2

    def count_fires_between(self, start: datetime, end: datetime, cap: int | None = None) -> int:
        """How many fires f have start <= f < end, exactly (at most ``cap`` if given).

        Never by listing the fires: interval schedules are arithmetic, and a
        cron costs one step per local day that it fires on (a day without a
        UTC-offset change contributes all its hour x minute pairs at once) plus
        one per fire on the few days whose offset changes. Two months of a
        per-minute cron are about sixty steps, not 86,400.
        """
        start, end = _aware("start", start), _aware("end", end)
        if self.end_at is not None:
            end = min(end, self.end_at + _ONE_US)
        if end <= start or (cap is not None and cap <= 0):
            return 0
        if self.run_at is not None:
            total = 1 if start <= self.run_at < end else 0
        elif self.interval_seconds is not None:
            anchor, step = self._interval_anchor(), timedelta(seconds=self.interval_seconds)
            # Interval fires never precede the anchor (= start_at when set).
            total = max(0, _ceil_steps(anchor, end, step) - _ceil_steps(anchor, start, step))
        else:
            total = sum(len(minutes) for _, minutes in self._cron_runs(start, end))
        return total if cap is None else min(total, cap)

    # -- internals

    @property
    def _zone(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.timezone)  # ZoneInfo caches instances by key

    def _interval_anchor(self) -> datetime:
        # The anchor rule (for_job): start_at when set, else the anchor.
        anchor = self.start_at if self.start_at is not None else self.anchor
        assert anchor is not None  # __post_init__ guarantees it
        return anchor

    def _iter_interval(self, floor: datetime) -> Iterator[datetime]:
        """anchor + k * interval, k >= 0, strictly after ``floor``.

        timedelta arithmetic is exact integer microseconds: the thousandth fire
        of a 7 s job is anchor + 7000 s exactly, with no accumulated drift.
        """
        anchor, step = self._interval_anchor(), timedelta(seconds=self.interval_seconds or 0)
        k = 0 if floor < anchor else (floor - anchor) // step + 1
        try:
            while True:
                yield anchor + k * step
                k += 1
        except OverflowError:
            return

    def _iter_cron(self, floor: datetime) -> Iterator[datetime]:
        """Cron fires strictly after ``floor``, by cronie's daylight-saving rules."""
        expr = _croniter_expr(self.cron or "")
        if _is_wall_clock(expr):
            return self._iter_wall_clock(expr, floor)
        return self._iter_fixed_time(expr, floor)

    def _iter_fixed_time(self, expr: str, floor: datetime) -> Iterator[datetime]:
        """Fires of a fixed-time cron strictly after ``floor``.

        1. Convert ``floor`` to a naive wall time in the job's zone, truncated to
           the minute (fires are whole minutes, so nothing is lost, and croniter
           then only sees exact float timestamps).
        2. Let croniter iterate naive wall times: no time zone, so no DST logic
           of its own to undo.
        3. Map each wall time to UTC with :func:`_wall_to_utc` (first occurrence
           of a repeated time; gap's end for a skipped one).
        4. Drop anything not strictly after the last instant yielded (or
           ``floor``). That removes the repeated hour's second pass when
           ``floor`` lies in it, and collapses several skipped wall times onto
           the one instant after the gap.

        Starting from the wall time of ``floor`` misses nothing: the mapping in
        step 3 never decreases as wall time increases, and maps floor's own wall
        time to floor or to an hour before it (second pass of a repeated hour).
        """
        zone = self._zone
        try:
            wall = floor.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
        except OverflowError:
            return  # at the very edge of the datetime range: no fires to give
        it = _croniter(expr, wall, _SEARCH_YEARS)
        last = floor
        while True:
            try:
                wall_fire = it.get_next(datetime)
            except (CroniterBadDateError, OverflowError, ValueError):
                return  # nothing within the horizon, or past year 9999
            fire = _wall_to_utc(wall_fire, zone)
            if fire > last:
                last = fire
                yield fire

    def _iter_wall_clock(self, expr: str, floor: datetime) -> Iterator[datetime]:
        """Fires of a wall-clock cron strictly after ``floor``: every instant
        whose local time matches.

        Between two offset changes, instant and wall time move in step (wall =
        instant + offset), so the fires there are croniter's wall times minus
        the offset. The iteration walks those stretches in order:

        1. Take the offset in force just after ``cur`` (at first ``floor``).
        2. Let croniter iterate naive wall times after ``cur`` + offset; each
           one, minus the offset, is a candidate instant.
        3. If the zone changes offset between ``cur`` and the candidate (at
           instant T), the candidate was read with the wrong offset: drop it
           and go back to 1 from just before T, with the new offset.
           Otherwise yield it, and it becomes ``cur``.

        So a repeated wall time is produced once by each offset that reads it,
        both occurrences firing in UTC order, and a wall time inside a gap is
        read by no offset and never fires. The common case, no change between
        two fires, costs one offset lookup per fire on top of croniter's.
        """
        zone = self._zone
        cur = floor
        while True:
            try:
                offset = _offset(zone, cur + _ONE_US)
                wall = (cur + offset).replace(tzinfo=None, second=0, microsecond=0)
            except OverflowError:
                return  # at the very edge of the datetime range: no fires to give
            it = _croniter(expr, wall, _SEARCH_YEARS)
            while True:
                try:
                    fire = it.get_next(datetime).replace(tzinfo=UTC) - offset
                    change = _offset_change(zone, cur, fire, offset)
                except (CroniterBadDateError, OverflowError, ValueError):
                    return  # nothing within the horizon, or past year 9999
                if change is not None:
                    cur = change - _ONE_US
                    break
                yield fire
                cur = fire

    def _cron_runs(
        self, start: datetime, end: datetime
    ) -> Iterator[tuple[datetime, Sequence[int]]]:
        """The cron's fires in [start, end), ascending, as runs ``(base, minutes)``:
        the fires ``base + m minutes`` for each m of ``minutes``.

        The same fires as iter_fires, fetched a local day at a time. On a local
        day whose UTC offset is the same from its first instant to its last
        (:func:`_steady_day`), wall time and instant move in step, so both DST
        rules agree and the day's fires are exactly its midnight instant plus
        each hour x minute pair of the cron, when the day matches at all. Which
        days match (the day-of-month / day-of-week rule, L, W, #) is left to
        iter_fires: its next fire names the next matching day, so days that
        do not match are skipped in one step. A day whose offset changes, or
        anything the shortcut does not recognise (a first fire that is not one
        of the day's pairs), is listed fire by fire with the iterator itself.
        """
        zone = self._zone
        minutes = _minutes_of_day(_croniter_expr(self.cron or ""))
        it = self.iter_fires(start, inclusive=True)
        fire = next(it, None)
        while fire is not None and fire < end:
            day = fire.astimezone(zone).date()
            steady = _steady_day(zone, day)
            if steady is not None:
                midnight, next_midnight = steady
                lo = _ceil_div(fire - midnight, _ONE_MINUTE)
                hi = _ceil_div(min(end, next_midnight) - midnight, _ONE_MINUTE)
                a, b = bisect_left(minutes, lo), bisect_left(minutes, hi)
                # The iterator's fire must be the first pair counted. It is not
                # when a fixed-time job's times skipped by a gap that ends at
                # this midnight (23:00 -> 00:00) fire at midnight, and would not
                # be if croniter ever read the fields differently from
                # _minutes_of_day: then the day is listed fire by fire.
                if a < b and midnight + minutes[a] * _ONE_MINUTE == fire:
                    yield midnight, minutes[a:b]
                    if end <= next_midnight:
                        return
                    it = self.iter_fires(next_midnight, inclusive=True)
                    fire = next(it, None)
                    continue
            while fire is not None and fire < end and fire.astimezone(zone).date() == day:
                yield fire, _JUST_THIS
                fire = next(it, None)


def _ceil_steps(anchor: datetime, t: datetime, step: timedelta) -> int:
    """The smallest k >= 0 with anchor + k * step >= t."""
    if t <= anchor:
        return 0
    return -((anchor - t) // step)


def _ceil_div(a: timedelta, b: timedelta) -> int:
    return -(-a // b)


def _tail_of_runs(runs: list[tuple[datetime, Sequence[int]]], count: int) -> list[datetime]:
    """The last ``count`` fires of ascending runs, without expanding the rest."""
    out: list[datetime] = []
    for base, minutes in reversed(runs):
        if len(out) >= count:
            break
        wanted = minutes[max(0, len(minutes) - (count - len(out))) :]
        out[:0] = [base + m * _ONE_MINUTE for m in wanted]
    return out


@functools.lru_cache(maxsize=4096)
def _minutes_of_day(expr: str) -> tuple[int, ...]:
    """The minutes after local midnight that a 5-field expression names on a
    day it fires: every hour x minute pair, ascending."""
    minute_field, hour_field = croniter(expr, _VALIDATION_REFERENCE).expanded[:2]
    minutes = range(60) if minute_field == ["*"] else sorted(int(m) for m in minute_field)
    hours = range(24) if hour_field == ["*"] else sorted(int(h) for h in hour_field)
    return tuple(h * 60 + m for h in hours for m in minutes)


def _steady_day(zone: zoneinfo.ZoneInfo, day: date) -> tuple[datetime, datetime] | None:
    """The instants of the local midnight starting ``day`` and of the next one,
    if the zone's UTC offset is the same throughout [first, next); None if it
    changes that day (a DST day, or a midnight that is skipped or repeated).

    One reading at each end suffices because, as :func:`_offset_change`
    assumes, no zone changes its offset twice within a day: an offset read at
    midnight (its first reading, when midnight happens twice) that still holds
    just before the next midnight held all day.
    """
    wall = datetime(day.year, day.month, day.day)
    try:
        offset = wall.replace(tzinfo=zone).utcoffset()
        assert offset is not None
        first = wall.replace(tzinfo=UTC) - offset
        after = first + timedelta(days=1)
        if _offset(zone, after - _ONE_US) != offset:
            return None
    except OverflowError:
        return None
    return first, after


# -- jitter, DST flags, risk warnings ---------------------------------------------


def jitter_offset(job_id: uuid.UUID | str, jitter_seconds: int) -> float:
    """A stable per-job delivery delay in [0, jitter_seconds), in seconds.

    Derived from blake2b of the UUID's 16 bytes, never from ``hash()``, which is
    salted per process: every dispatcher and worker must agree on a job's
    offset. Whole microseconds, so ``timedelta(seconds=...)`` of it is exact.
    """
    if isinstance(jitter_seconds, bool) or not isinstance(jitter_seconds, int):
        raise ScheduleError("jitter_seconds must be a whole number of seconds.")
    if jitter_seconds < 0:
        raise ScheduleError("jitter_seconds must not be negative.")
    if jitter_seconds == 0:
        return 0.0
    try:
        key = job_id.bytes if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id)).bytes
    except ValueError:
        key = str(job_id).encode()
    digest = hashlib.blake2b(key, digest_size=8, person=b"punctual-jitter").digest()
    # A 64-bit hash modulo at most 3.6e9 microseconds: bias below 1e-9.
    micros = int.from_bytes(digest, "big") % (jitter_seconds * 1_000_000)
    return micros / 1_000_000


def dst_transition_near(
    when: datetime, timezone: str, within: timedelta = timedelta(hours=24)
) -> bool:
    """Whether the zone's UTC offset changes within ``within`` either side of
    ``when``. The admin flags such fires: they are where schedules surprise."""
    if within < timedelta(0):
        raise ValueError("within must not be negative.")
    zone = zoneinfo.ZoneInfo(validate_timezone(timezone))
    when = _aware("when", when)
    window = _transitions(zone, when - within, when + within, timedelta(hours=1))
    return next(window, None) is not None


def cron_risks(cron: str, timezone: str, *, now: datetime | None = None) -> list[str]:
    """Short user-facing warnings about a cron that may not do what it says.

    * Day-of-month and day-of-week both restricted, neither starting with
      ``*``: cron fires when EITHER matches, so "0 0 13 * 5" fires on every
      13th and on every Friday.
    * Only day 29, 30 or 31: months without that day are skipped.
    * Restricted hours whose wall times the zone skips or repeats at a DST
      change in the year from ``now``. A fixed-time job fires once (after the
      gap, or at the first occurrence); a wall-clock job ("*/15 2 * * *")
      skips the missing times and fires twice in the repeated ones. Either is
      rarely what the owner pictured. Crons with a "*" hour (hourly, every
      minute) are not flagged: for them it is expected.

    ``now`` picks the year of zone rules to look at. It defaults to a fixed
    reference year rather than the clock, so that this stays pure.
    """
    cron = validate_cron(cron)
    zone = zoneinfo.ZoneInfo(validate_timezone(timezone))
    expr = _croniter_expr(cron)
    expanded = croniter(expr, _VALIDATION_REFERENCE).expanded
    risks: list[str] = []

    dom, dow = expr.split()[_DOM], expr.split()[_DOW]
    either = not dom.startswith("*") and not dow.startswith("*")  # as in _croniter()
    if either and expanded[_DOM] != ["*"] and expanded[_DOW] != ["*"]:
        risks.append(
            f"Day-of-month ({dom}) and day-of-week ({dow}) are both set, so this fires on "
            "days matching EITHER of them, not only on days matching both."
        )
    days, months = expanded[_DOM], expanded[_MONTH]
    if days != ["*"] and all(isinstance(d, int) for d in days):
        first_day = min(days)
        named = range(1, 13) if months == ["*"] else months
        short = [m for m in named if isinstance(m, int) and first_day > _DAYS_IN_MONTH[m]]
        if short == [2] and first_day == 29:
            risks.append("29 February exists only in leap years: this fires every four years.")
        elif short:
            risks.append(
                f"Day {dom} does not occur in every month ({calendar.month_abbr[short[0]]} has "
                f"{_DAYS_IN_MONTH[short[0]]} days); those months are skipped. "
                "L means the last day of the month."
            )

    if expanded[_HOUR] != ["*"]:
        wall_clock = _is_wall_clock(expr)
        start = _aware("now", now) if now is not None else _RISK_REFERENCE
        seen: set[str] = set()
        for instant, before, after in _transitions(
            zone, start, start + timedelta(days=366), timedelta(hours=6)
        ):
            kind = "gap" if after > before else "fold"
            if kind in seen:
                continue
            # Wall times skipped (gap) or repeated (fold) by this change.
            lo = (instant + min(before, after)).replace(tzinfo=None)
            hi = (instant + max(before, after)).replace(tzinfo=None)
            wall = _first_wall_fire(expr, lo)
            if wall is None or wall >= hi:
                continue
            seen.add(kind)
            shift = _duration(abs(after - before))
            if kind == "gap" and wall_clock:
                risks.append(
                    f"{wall:%H:%M} does not exist in {timezone} on {wall:%Y-%m-%d} (clocks go "
                    f"forward {shift}): fires due then are skipped."
                )
            elif kind == "gap":
                runs_at = instant.astimezone(zone).strftime("%H:%M")
                risks.append(
                    f"{wall:%H:%M} does not exist in {timezone} on {wall:%Y-%m-%d} (clocks go "
                    f"forward {shift}): fires due then run once, at {runs_at}."
                )
            elif wall_clock:
                risks.append(
                    f"{wall:%H:%M} happens twice in {timezone} on {wall:%Y-%m-%d} (clocks go "
                    f"back {shift}): fires due then run at both occurrences."
                )
            else:
                risks.append(
                    f"{wall:%H:%M} happens twice in {timezone} on {wall:%Y-%m-%d} (clocks go "
                    f"back {shift}): fires due then run once, at the first {wall:%H:%M}."
                )
    return risks


def ending_warnings(
    *, run_at: datetime | None, end_at: datetime | None, now: datetime
) -> list[str]:
    """Warnings for a one-off time or an end already past at ``now``: such a
    job is saved (an export made into jobs again must be taken as it is),
    but it has no fire left and shows as finished."""
    now = _aware("now", now)
    if run_at is not None and _aware("run_at", run_at) <= now:
        return [
            "run_at is already past: this one-off job is finished and will not fire"
            " (set a later run_at to have it fire)."
        ]
    if end_at is not None and _aware("end_at", end_at) <= now:
        return [
            "end_at is already past: this job has no fire left and shows as finished"
            " (set a later end_at, or none, to have it fire again)."
        ]
    return []


def _first_wall_fire(expr: str, lo: datetime) -> datetime | None:
    """The first naive wall time >= ``lo`` that ``expr`` names."""
    start = (lo - _ONE_US).replace(second=0, microsecond=0)
    try:
        return _croniter(expr, start, 1).get_next(datetime)
    except (CroniterBadDateError, OverflowError, ValueError):
        return None


def _duration(delta: timedelta) -> str:
    hours, minutes = divmod(int(delta.total_seconds()) // 60, 60)
    if hours and minutes:
        return f"{hours} h {minutes} min"
    if hours:
        return "1 hour" if hours == 1 else f"{hours} hours"
    return f"{minutes} minutes"

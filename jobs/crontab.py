"""Reading a crontab (``crontab -l``'s format, as cronie and Vixie cron read
it) into the jobs it describes, for ``manage.py import_crontab``
(docs/guides/migrating.md). Pure: text in, entries and problems out.

- A blank line or one starting with ``#`` is nothing.
- ``NAME=value`` sets a variable for the lines below it (quotes around the
  value are removed). ``CRON_TZ`` and ``TZ`` set the time zone the lines
  below are read in; any other variable (``MAILTO``, ``PATH``, ``SHELL``...)
  goes with each job below it, in its payload's ``env``.
- ``@hourly``, ``@daily``, ``@weekly``, ``@monthly`` and ``@yearly`` are
  Punctual's macros too; ``@midnight`` is ``@daily`` and ``@annually`` is
  ``@yearly``. ``@reboot`` has no schedule: the line is listed as skipped.
- Every other line is five time fields and a command, checked as a job's
  cron is (jobs/schedules.py ``validate_cron``). A line that is not one is a
  problem, named with its number and why; nothing is guessed.

The command is kept as written, ``%`` included (cron would turn it into the
command's standard input): the receiver decides what to run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from jobs.schedules import ScheduleError, validate_cron, validate_timezone

__all__ = ["Entry", "Problem", "Reading", "read_crontab"]

ZONE_VARIABLES = ("CRON_TZ", "TZ")
ALIASES = {"@midnight": "@daily", "@annually": "@yearly"}
NO_SCHEDULE = "@reboot"

_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
_FIVE_FIELDS = re.compile(r"^(\S+\s+\S+\s+\S+\s+\S+\s+\S+)\s+(\S.*)$")


@dataclass(frozen=True)
class Entry:
    """One scheduled line: where it was, its cron, its zone, its command and
    the variables set above it (the zone's excepted)."""

    line: int
    cron: str
    timezone: str
    command: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """A line that was not imported: its number, its text and why."""

    line: int
    text: str
    reason: str


@dataclass
class Reading:
    entries: list[Entry] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)  # understood, not importable
    problems: list[Problem] = field(default_factory=list)  # not understood


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def read_crontab(text: str, *, timezone: str = "UTC") -> Reading:
    """The entries of crontab ``text``, read in ``timezone`` until a
    ``CRON_TZ`` or ``TZ`` line says otherwise."""
    reading = Reading()
    zone = validate_timezone(timezone)
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        assignment = _ASSIGNMENT.match(line)
        if assignment:
            name, value = assignment[1], _unquoted(assignment[2])
            if name in ZONE_VARIABLES:
                try:
                    zone = validate_timezone(value)
                except ScheduleError as exc:
                    reading.problems.append(Problem(number, line, str(exc)))
                continue
            env[name] = value
            continue
        entry = _entry(number, line, zone, dict(env), reading)
        if entry is not None:
            reading.entries.append(entry)
    return reading


def _entry(number: int, line: str, zone: str, env: dict[str, str], reading: Reading):
    if line.startswith("@"):
        macro, _, command = line.partition(" ")
        command = command.strip()
        if macro == NO_SCHEDULE:
            reason = "@reboot runs when cron starts, which has no time in a schedule: skipped"
            reading.skipped.append(Problem(number, line, reason))
            return None
        cron = ALIASES.get(macro, macro)
    else:
        fields = _FIVE_FIELDS.match(line)
        if fields is None:
            reason = "expected five time fields and a command (minute hour day month weekday)"
            reading.problems.append(Problem(number, line, reason))
            return None
        cron, command = fields[1], fields[2].strip()
    if not command:
        reading.problems.append(Problem(number, line, "no command after the schedule"))
        return None
    try:
        cron = validate_cron(cron)
    except ScheduleError as exc:
        reading.problems.append(Problem(number, line, str(exc)))
        return None
    return Entry(number, cron, zone, command, env)

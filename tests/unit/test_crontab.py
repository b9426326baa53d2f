"""Reading a crontab (jobs/crontab.py): zones, macros, variables, @reboot and
lines that are not understood, each named by its line number."""

from __future__ import annotations

import pytest

from jobs.crontab import read_crontab
from jobs.schedules import ScheduleError

CRONTAB = """\
# m h dom mon dow command
MAILTO=ops@example.com
PATH="/usr/local/bin:/usr/bin"
*/15 * * * * /usr/local/bin/poll-feeds --quiet

CRON_TZ=Europe/Berlin
30 2 * * 1-5 backup.sh > /var/log/backup.log 2>&1
@annually   rotate-keys
@midnight echo "%s" | mail -s report
TZ='America/New_York'
0 9 * * * standup-reminder
@reboot start-agent
"""


def test_a_crontab_reads_as_entries_in_their_zones_with_their_variables():
    reading = read_crontab(CRONTAB)
    assert reading.problems == []
    got = [(e.line, e.cron, e.timezone, e.command) for e in reading.entries]
    assert got == [
        (4, "*/15 * * * *", "UTC", "/usr/local/bin/poll-feeds --quiet"),
        (7, "30 2 * * 1-5", "Europe/Berlin", "backup.sh > /var/log/backup.log 2>&1"),
        (8, "@yearly", "Europe/Berlin", "rotate-keys"),
        (9, "@daily", "Europe/Berlin", 'echo "%s" | mail -s report'),
        (11, "0 9 * * *", "America/New_York", "standup-reminder"),
    ]
    env = {"MAILTO": "ops@example.com", "PATH": "/usr/local/bin:/usr/bin"}
    assert all(entry.env == env for entry in reading.entries)
    assert [(s.line, s.text) for s in reading.skipped] == [(12, "@reboot start-agent")]
    assert "@reboot" in reading.skipped[0].reason


def test_lines_above_any_zone_line_are_read_in_the_zone_given():
    reading = read_crontab("0 8 * * * wake\n", timezone="Asia/Tokyo")
    assert [e.timezone for e in reading.entries] == ["Asia/Tokyo"]
    with pytest.raises(ScheduleError):
        read_crontab("0 8 * * * wake\n", timezone="Mars/Olympus")


def test_a_variable_applies_to_the_lines_below_it_only():
    reading = read_crontab("* * * * * first\nHOME=/srv\n* * * * * second\n")
    assert [e.env for e in reading.entries] == [{}, {"HOME": "/srv"}]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("*/5 * * * ", "five time fields and a command"),
        ("* * * * command-with-four-fields", "five time fields and a command"),
        ("61 * * * * too-late", "Not a valid cron expression"),
        ("0 0 30 2 * never", "never"),
        ("@fortnightly mow-lawn", "Supported macros are"),
        ("@daily", "no command"),
        ("CRON_TZ=Mars/Olympus", "Not a valid time zone"),
        ("H * * * * hashed", "Not a valid cron expression"),
    ],
)
def test_a_line_that_is_not_understood_is_a_problem_with_its_number(line, reason):
    reading = read_crontab(f"# header\n{line}\n0 1 * * * fine\n")
    assert [(p.line, p.text) for p in reading.problems] == [(2, line.strip())]
    assert reason.lower() in reading.problems[0].reason.lower(), reading.problems[0].reason
    assert [e.command for e in reading.entries] == ["fine"]

"""``manage.py import_crontab`` on a real crontab file: a dry run that
prints the jobs and their next fires and writes nothing, an import that
makes them as the API would (events, spans, secrets), and every refusal
named by line with nothing written."""

from __future__ import annotations

import datetime as dt
import io
import re
from zoneinfo import ZoneInfo

import pytest
from django.core.management import CommandError, call_command

from jobs.models import Job, JobEvent
from jobs.schedules import Schedule

pytestmark = pytest.mark.django_db

URL = "https://93.184.215.14/cron"  # a public address: no lookup, no refusal

CRONTAB = """\
# the team's crontab, as `crontab -l` shows it
MAILTO=ops@example.com
*/15 * * * * /usr/local/bin/poll-feeds --quiet

CRON_TZ=Europe/Berlin
30 2 * * 1-5 backup.sh > /var/log/backup.log 2>&1
@annually rotate-keys
@reboot start-agent
TZ=America/New_York
0 9 * * * standup-reminder
"""


def import_crontab(path, *options: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("import_crontab", str(path), *options, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def crontab(tmp_path):
    path = tmp_path / "crontab"
    path.write_text(CRONTAB)
    return path


def test_a_dry_run_prints_each_job_with_its_next_fires_and_writes_nothing(crontab, owner):
    out, err = import_crontab(crontab, "--owner", owner.username, "--url", URL, "--dry-run")
    assert Job.objects.count() == 0
    assert "Dry run: 4 job(s) would be created; nothing written." in out
    assert "line 8: @reboot runs when cron starts" in err
    # The Berlin line's next fires: 02:30 on weekdays, in Berlin's own offset.
    block = re.search(r"line 6: 30 2 \* \* 1-5 \(Europe/Berlin\).*\n\s+next fires: (.*)", out)
    assert block, out
    fires = [dt.datetime.fromisoformat(text) for text in block[1].split(", ")]
    assert len(fires) == 3
    berlin = ZoneInfo("Europe/Berlin")
    for fire in fires:
        local = fire.astimezone(berlin)
        assert (local.hour, local.minute, local.weekday() < 5) == (2, 30, True)
        assert fire.utcoffset() == local.utcoffset()
    assert "line 10: 0 9 * * * (America/New_York)" in out


def test_an_import_makes_the_jobs_as_the_api_would(crontab, owner):
    out, _ = import_crontab(crontab, "--owner", owner.username, "--url", URL)
    jobs = {job.payload["crontab_line"]: job for job in Job.objects.filter(owner=owner)}
    assert sorted(jobs) == [3, 6, 7, 10]
    backup = jobs[6]
    assert (backup.cron, backup.timezone, backup.url) == ("30 2 * * 1-5", "Europe/Berlin", URL)
    assert backup.name == "crontab line 6: backup.sh > /var/log/backup.log 2>&1"
    assert backup.payload == {
        "command": "backup.sh > /var/log/backup.log 2>&1",
        "crontab_line": 6,
        "env": {"MAILTO": "ops@example.com"},
    }
    assert jobs[7].cron == "@yearly" and jobs[10].timezone == "America/New_York"
    # Each job's next fire is its schedule's, its secret shown once, its creation recorded.
    for job in jobs.values():
        schedule = Schedule.for_job(
            cron=job.cron,
            interval_seconds=None,
            timezone=job.timezone,
            start_at=None,
            created_at=job.created_at,
        )
        assert job.next_fire_at == schedule.next_fire(job.created_at)
        assert re.search(rf"job {job.pk}  secret \S+", out)
    assert JobEvent.objects.filter(action="created", job__in=jobs.values()).count() == 4
    assert "Created 4 job(s)" in out


def test_a_bad_line_imports_nothing_and_names_every_bad_line(tmp_path, owner):
    path = tmp_path / "crontab"
    path.write_text("0 1 * * * fine\n61 * * * * too-late\n*/5 * * * \n@fortnightly mow\n")
    with pytest.raises(CommandError, match="3 line"):
        import_crontab(path, "--owner", owner.username, "--url", URL)
    assert Job.objects.count() == 0


def test_the_bad_lines_are_listed_on_standard_error(tmp_path, owner):
    path = tmp_path / "crontab"
    path.write_text("0 1 * * * fine\n61 * * * * too-late\n")
    err = io.StringIO()
    with pytest.raises(CommandError):
        call_command(
            "import_crontab", str(path), "--owner", owner.username, "--url", URL, stderr=err
        )
    assert "line 2: Not a valid cron expression" in err.getvalue()
    assert "61 * * * * too-late" in err.getvalue()


def test_what_the_api_refuses_is_named_by_line_and_nothing_is_written(crontab, owner):
    # A private address is refused as the API refuses it, for every line.
    with pytest.raises(CommandError, match=r"line 3: url: .*") as refused:
        import_crontab(crontab, "--owner", owner.username, "--url", "http://10.0.0.5/hook")
    assert "line 10: url:" in str(refused.value)
    assert Job.objects.count() == 0
    # A second import of the same file: every name is taken, and nothing doubles.
    import_crontab(crontab, "--owner", owner.username, "--url", URL)
    with pytest.raises(CommandError, match="line 6: name: You already have a job with this name"):
        import_crontab(crontab, "--owner", owner.username, "--url", URL)
    assert Job.objects.count() == 4


def test_an_unknown_owner_or_an_unreadable_file_is_refused(tmp_path, owner):
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        import_crontab(tmp_path / "missing", "--owner", "nobody", "--url", URL)
    with pytest.raises(CommandError, match="Cannot read"):
        import_crontab(tmp_path / "missing", "--owner", owner.username, "--url", URL)
    empty = tmp_path / "empty"
    empty.write_text("# nothing here\nMAILTO=x\n")
    with pytest.raises(CommandError, match="schedules nothing"):
        import_crontab(empty, "--owner", owner.username, "--url", URL)

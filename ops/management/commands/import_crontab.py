"""``manage.py import_crontab FILE --owner NAME --url URL``: turn a crontab's
lines into jobs of one owner, all delivered to one webhook URL, each line's
command in its job's payload (docs/guides/migrating.md).

Thin: the file is read by jobs/crontab.py, and the jobs are validated and
made exactly as ``POST /api/v1/jobs/`` makes a list of them
(api/job_creation.py): all or none, within the owner's limits, the URL
checked against the outbound address rules. ``--dry-run`` prints the jobs
and their next fires and writes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from zoneinfo import ZoneInfo

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework import serializers

from api.job_creation import insert_many, validate_many
from core.db import db_now
from jobs import lookups
from jobs.crontab import Entry, Reading, read_crontab
from jobs.limits import MAX_LENGTHS
from jobs.models import Channel
from jobs.schedules import Schedule, ScheduleError

NEXT_FIRES = 3


def job_item(entry: Entry, url: str, prefix: str) -> dict:
    """The job of one crontab line, as the API's create takes it."""
    name = f"{prefix}{entry.line}: {entry.command}"
    limit = MAX_LENGTHS["name"]
    if len(name) > limit:
        name = name[: limit - 1] + "…"
    payload: dict = {"command": entry.command, "crontab_line": entry.line}
    if entry.env:
        payload["env"] = entry.env
    return {
        "name": name,
        "cron": entry.cron,
        "timezone": entry.timezone,
        "url": url,
        "payload": payload,
    }


class Command(BaseCommand):
    help = (
        "Import a crontab (crontab -l's format) as jobs of one owner, all delivered to one"
        " webhook URL, each line's command in the job's payload. CRON_TZ and TZ lines set"
        " the zone of the lines below them; @reboot lines are skipped and bad lines"
        " reported, and any bad line imports nothing. --dry-run prints the jobs and their"
        " next fires."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="the crontab file, or - for standard input")
        parser.add_argument("--owner", required=True, help="user name of the jobs' owner")
        parser.add_argument("--url", required=True, help="the webhook URL every job calls")
        parser.add_argument(
            "--timezone",
            default="UTC",
            help="the zone of lines above any CRON_TZ or TZ line (default %(default)s)",
        )
        parser.add_argument(
            "--name-prefix",
            default="crontab line ",
            help="each job is named PREFIX<line number>: <command> (default %(default)r)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="print the jobs and their next fires only"
        )

    def handle(self, *args, **options):
        owner = get_user_model().objects.filter(username=options["owner"]).first()
        if owner is None:
            raise CommandError(f"No user named {options['owner']!r}.")
        reading = self.read(options["file"], options["timezone"])
        for skipped in reading.skipped:
            self.stderr.write(f"line {skipped.line}: {skipped.reason}\n    {skipped.text}")
        if reading.problems:
            for problem in reading.problems:
                self.stderr.write(f"line {problem.line}: {problem.reason}\n    {problem.text}")
            raise CommandError(
                f"{len(reading.problems)} line(s) could not be read; nothing was imported."
            )
        if not reading.entries:
            raise CommandError("The file schedules nothing; nothing was imported.")
        entries = reading.entries
        items = [job_item(entry, options["url"], options["name_prefix"]) for entry in entries]
        # The URL's host looked up once, before any transaction (jobs/lookups.py).
        try:
            resolve = lookups.look_up_hosts([options["url"]], owner=owner.pk)
            _, valid, now, limits = validate_many(owner, items, resolve=resolve)
        except (serializers.ValidationError, lookups.TooManyHosts) as exc:
            raise CommandError(self.refusal(exc, entries)) from None
        if options["dry_run"]:
            self.preview(entries, valid, now)
            self.stdout.write(f"Dry run: {len(valid)} job(s) would be created; nothing written.")
            return
        try:
            created = insert_many(
                owner, valid, db_now(), limits, actor=None, channel=Channel.SYSTEM, savepoint=False
            )
        except serializers.ValidationError as exc:
            raise CommandError(self.refusal(exc, entries)) from None
        for (job, secret), entry in zip(created, entries, strict=True):
            self.stdout.write(f"line {entry.line}: job {job.pk}  secret {secret}  {job.name}")
        self.stdout.write(
            f"Created {len(created)} job(s) for {owner.username}. Each secret is shown only"
            " here: the receiver checks the signatures with it."
        )

    @staticmethod
    def read(path: str, timezone: str) -> Reading:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"Cannot read {path}: {exc}") from None
        try:
            return read_crontab(text, timezone=timezone)
        except ScheduleError as exc:
            raise CommandError(f"--timezone: {exc}") from None

    @staticmethod
    def refusal(exc: Exception, entries: list[Entry]) -> str:
        """The API's errors, by item index, as crontab line numbers."""
        detail = getattr(exc, "detail", None)
        if not isinstance(detail, dict):
            return f"Nothing was imported: {exc}"
        lines = []
        for key, errors in detail.items():
            where = f"line {entries[int(key)].line}" if key.isdigit() else "the import"
            if isinstance(errors, dict):
                for name, messages in errors.items():
                    lines += [f"{where}: {name}: {message}" for message in messages]
            else:
                lines += [f"{where}: {message}" for message in errors]
        return "Nothing was imported:\n" + "\n".join(lines)

    def preview(self, entries: list[Entry], valid: list[dict], now) -> None:
        for entry, attrs in zip(entries, valid, strict=True):
            schedule = Schedule.for_job(
                cron=attrs["cron"],
                interval_seconds=None,
                timezone=attrs["timezone"],
                start_at=None,
                created_at=now,
            )
            zone = ZoneInfo(attrs["timezone"])  # shown in the line's own zone
            fires = ", ".join(
                fire.astimezone(zone).isoformat(timespec="seconds")
                for fire in schedule.next_fires(now, NEXT_FIRES)
            )
            self.stdout.write(
                f"line {entry.line}: {attrs['cron']} ({attrs['timezone']})  {attrs['name']}\n"
                f"    next fires: {fires}"
            )

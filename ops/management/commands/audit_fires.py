"""``manage.py audit_fires``: prove no fire was lost, doubled or left stuck.
Thin: parse, audit (ops/audit.py), print, and exit 1 on any violation."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from jobs.models import Job
from ops.audit import DEFAULT_TOLERANCE, audit

USAGE_ERROR = 2  # violations exit 1; a bad argument exits 2


def usage(message: str) -> CommandError:
    return CommandError(message, returncode=USAGE_ERROR)


def parse_when(name: str, value: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise usage(
            f"{name} must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got {value!r}"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def existing_jobs(values: list[str] | None) -> list[uuid.UUID] | None:
    if not values:
        return None
    ids = []
    for value in values:
        try:
            ids.append(uuid.UUID(value))
        except ValueError:
            raise usage(f"--job must be a job id (a UUID), got {value!r}") from None
    missing = set(ids) - set(Job.objects.filter(pk__in=ids).values_list("pk", flat=True))
    if missing:
        raise usage(f"--job: no such job {', '.join(sorted(map(str, missing)))}")
    return ids


def readable(path: str | None) -> str | None:
    if path is not None and not Path(path).is_file():
        raise usage(f"--receiver-log {path!r} is not a readable file")
    return path


class Command(BaseCommand):
    help = (
        "Audit fires (all of them, or those in [--since, --until)) against the schedule history:"
        " every slot of every active stretch has exactly one run or is counted as missed, no run"
        " is off schedule, nothing due is left undispatched or unclaimed (by a live fleet, or"
        " because no dispatcher or no worker runs at all), no run is stuck, and (with"
        " --receiver-log) every success was delivered under one"
        " webhook-id and nothing was delivered after a pause or delete. Prints a report with"
        " each violation's rule and exits 1 on any violation, 2 on a bad argument. Naive times"
        " are read as UTC."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--since", metavar="ISO", help="start of the window (default: all history)"
        )
        parser.add_argument("--until", metavar="ISO", help="end of the window (default: now)")
        parser.add_argument(
            "--job", action="append", metavar="ID", help="only this job (repeatable)"
        )
        parser.add_argument(
            "--receiver-log", metavar="PATH", help="a loopback receiver's JSON-lines log"
        )
        parser.add_argument(
            "--tolerance",
            type=float,
            default=DEFAULT_TOLERANCE.total_seconds(),
            metavar="SECONDS",
            help="slack for every time comparison: past a fire's grace, a lease, a deadline,"
            " a claimable time, a pause (default %(default)s)",
        )

    def handle(self, *args, **options):
        since = parse_when("--since", options["since"]) if options["since"] else None
        until = parse_when("--until", options["until"]) if options["until"] else None
        if since is not None and until is not None and until <= since:
            raise usage("--until must be after --since")
        if not 0 <= options["tolerance"] <= 86_400:
            raise usage("--tolerance must be between 0 and 86400")
        job_ids = existing_jobs(options["job"])
        log = readable(options["receiver_log"])
        tolerance = dt.timedelta(seconds=options["tolerance"])
        try:
            report = audit(since, until, job_ids=job_ids, receiver_log=log, tolerance=tolerance)
        except ValueError as exc:  # a --since after the database's now
            raise usage(str(exc)) from None
        self.stdout.write(report.render())
        if not report.ok:
            raise CommandError(f"audit failed: {len(report.violations)} violations", returncode=1)

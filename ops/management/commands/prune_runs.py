"""``manage.py prune_runs``: drop the days past retention and delete the finished runs
left past it, then the audit events past theirs and the expired Idempotency-Key
answers. Thin: parse, then expire and prune_history (runs/retention.py)."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from core.db import db_now
from dispatch import fleet
from ops.signals import runs_pruned
from runs import retention

MAX_DAYS = 36_500


class Command(BaseCommand):
    help = (
        "Drop the daily partitions of runs (and their attempts) whose whole day is more than"
        " D days ago, then delete the finished runs left past it in batches of one short"
        " transaction each; live runs are kept however old (and so is their day). Also"
        " deletes audit events older than PUNCTUAL_EVENT_RETENTION_DAYS and expired"
        " Idempotency-Key answers, and forgets fleet rows of processes silent for a day and"
        " lag samples older than two days."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than-days",
            type=int,
            default=None,
            metavar="D",
            help="retention in days (default: PUNCTUAL_RUN_RETENTION_DAYS, here "
            f"{settings.PUNCTUAL_RUN_RETENTION_DAYS})",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=retention.DEFAULT_BATCH,
            metavar="N",
            help="runs per transaction (default %(default)s)",
        )

    def handle(self, *args, **options):
        days = options["older_than_days"]
        if days is None:
            days = settings.PUNCTUAL_RUN_RETENTION_DAYS
        if not 0 <= days <= MAX_DAYS:
            raise CommandError(f"--older-than-days must be between 0 and {MAX_DAYS}, got {days}")
        if not 1 <= options["batch_size"] <= 100_000:
            raise CommandError("--batch-size must be between 1 and 100000")
        now = db_now()
        cutoff = now - dt.timedelta(days=days)
        batches = 0

        def progress(n: int) -> None:
            nonlocal batches
            batches += 1
            if options["verbosity"] >= 2:
                self.stdout.write(f"batch {batches}: deleted {n} runs")

        done = retention.expire(cutoff, options["batch_size"], on_batch=progress)
        history = retention.prune_history(now, options["batch_size"])
        forgotten = fleet.prune(now)
        runs_pruned.send(sender=self.__class__, now=now, cutoff=cutoff)
        if done.days_dropped or done.days_kept:
            self.stdout.write(
                f"dropped {len(done.days_dropped)} days of runs"
                + "".join(f" {day}" for day in done.days_dropped)
                + f"; kept {len(done.days_kept)} with unfinished runs"
                + "".join(f" {day}" for day in done.days_kept)
            )
        self.stdout.write(
            f"deleted {done.runs_deleted} runs scheduled before {cutoff:%Y-%m-%d %H:%M:%S} UTC"
            f" in {batches} batches; forgot {forgotten} stale fleet rows and lag samples"
        )
        self.stdout.write(
            f"deleted {history.events_deleted} audit events created before"
            f" {retention.event_cutoff(now):%Y-%m-%d %H:%M:%S} UTC"
            f", {history.alerts_deleted} alerts as old,"
            f" and {history.keys_deleted} expired Idempotency-Key answers"
        )

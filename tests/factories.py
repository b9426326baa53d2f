"""Tiny helpers to make jobs and runs in tests (real rows, no mocks)."""

from __future__ import annotations

import datetime as dt
import itertools

from django.db import connection, transaction

from jobs.models import Job

_names = itertools.count()


def make_job(owner, **fields) -> Job:
    fields.setdefault("name", f"job-{next(_names)}")
    if "cron" not in fields and "run_at" not in fields:
        fields.setdefault("interval_seconds", 60)
    fields.setdefault("url", "http://127.0.0.1:9/hook")
    job = Job(owner=owner, **fields)
    job.save()
    return job


def at(text: str) -> dt.datetime:
    """'2026-01-01T00:00:00' -> aware UTC datetime."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def rewrite_job(job: Job, **fields) -> None:
    """Set a job's columns directly, as if it had always been so: its
    schedule history is rewritten to match, one span from its created_at in
    its current state. For tests that place a job at a fixed past time (the
    schedule-history guard refuses a state or schedule change without it)."""
    with transaction.atomic(), connection.cursor() as cur:
        Job.objects.filter(pk=job.pk).update(**fields)
        cur.execute("DELETE FROM jobs_schedulespan WHERE job_id = %s", [job.pk])
        cur.execute(
            """
            INSERT INTO jobs_schedulespan (job_id, started_at, state, cron, interval_seconds,
                timezone, start_at, anchor, missed_count, run_at, end_at)
            SELECT id, created_at,
                   CASE WHEN deleted_at IS NOT NULL THEN 'deleted' ELSE state END,
                   cron, interval_seconds, timezone, start_at, created_at, 0, run_at, end_at
            FROM jobs_job WHERE id = %s
            """,
            [job.pk],
        )
    job.refresh_from_db()


def succeeded(claimed, **fields):
    """The worker's result for a claimed run (runs/leases.py Claimed) whose
    attempt succeeded, as ``outcomes.complete`` takes it; ``fields`` add to
    or replace the Result's."""
    from runs import outcomes

    return outcomes.Result(
        run_id=claimed.run_id,
        job_id=claimed.job_id,
        attempt=claimed.attempt,
        state="succeeded",
        scheduled_at=claimed.scheduled_at,
        **fields,
    )

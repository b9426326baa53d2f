"""Tiny helpers to make jobs and runs in tests (real rows, no mocks)."""

from __future__ import annotations

import datetime as dt
import itertools

from jobs.models import Job

_names = itertools.count()


def make_job(owner, **fields) -> Job:
    fields.setdefault("name", f"job-{next(_names)}")
    if "cron" not in fields:
        fields.setdefault("interval_seconds", 60)
    fields.setdefault("url", "http://127.0.0.1:9/hook")
    job = Job(owner=owner, **fields)
    job.save()
    return job


def at(text: str) -> dt.datetime:
    """'2026-01-01T00:00:00' -> aware UTC datetime."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)

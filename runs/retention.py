"""Retention: runs older than the retention window go, a whole day at a time.

``runs_run`` and ``runs_attempt`` are partitioned by day (runs/partitions.py).
``expire()`` first drops the day partitions (runs and attempts together)
whose whole UTC day is older than the cutoff: a DETACH and a DROP, however
many rows the day holds. A day that still holds a pending, running or
retrying run is kept, and its finished runs are deleted row by row, as are
old finished runs in the default partition (a backfill far in the past). A
run that is still pending, running or retrying is never deleted, however old.

So a run in a day partition lives until its whole day is past the cutoff:
up to a day longer than the retention window. ``row_cutoff()`` is that rule
for the row deletes: they never eat into a day that will be dropped whole.

Each batch of row deletes, and each day dropped, is its own short
transaction, so pruning never holds back vacuum. Used by ``manage.py
prune_runs`` and by the dispatchers' housekeeping.

The same pruning also deletes the audit events older than
``PUNCTUAL_EVENT_RETENTION_DAYS``, the alerts as old, and the expired
Idempotency-Key answers (``prune_history``): plain tables, deleted oldest first through their
``created_at`` index, in batches of one short transaction each.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from alerts.models import Alert
from core.db import delete_oldest
from jobs import idempotency
from jobs.models import IdempotencyKey, JobEvent
from runs import partitions
from runs.models import TERMINAL_STATES, Attempt, Run

DEFAULT_BATCH = 1000

# prune_batch, for the runs it has locked: their attempts first, then the runs.
# The scheduled_at window of the batch keeps both to the days it spans
# (partition pruning) instead of probing every day's partition by id.
DELETE_ATTEMPTS_OF_RUNS = (
    "DELETE FROM runs_attempt"
    " WHERE run_id = ANY(%(ids)s::uuid[]) AND scheduled_at BETWEEN %(lo)s AND %(hi)s"
)
DELETE_RUNS = (
    "DELETE FROM runs_run"
    " WHERE id = ANY(%(ids)s::uuid[]) AND scheduled_at BETWEEN %(lo)s AND %(hi)s"
)


@dataclass
class History:
    events_deleted: int = 0
    keys_deleted: int = 0
    alerts_deleted: int = 0


@dataclass
class Expired:
    runs_deleted: int = 0
    days_dropped: list[dt.date] = field(default_factory=list)
    # Days past the cutoff kept because a run of theirs is not finished.
    days_kept: list[dt.date] = field(default_factory=list)


def row_cutoff(cutoff: dt.datetime) -> dt.datetime:
    """Where row deletes stop: ``cutoff``, or the start of its UTC day when
    that day has a partition, which is dropped whole once the day is past."""
    day = cutoff.astimezone(dt.UTC).date()
    if day in set(partitions.day_partitions()):
        return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    return cutoff


def prune_batch(cutoff: dt.datetime, batch_size: int = DEFAULT_BATCH) -> int:
    """Delete up to ``batch_size`` terminal runs scheduled before ``cutoff``.

    Oldest first, through ``run_scheduled_at_idx``. ``SKIP LOCKED`` lets
    ``prune_runs`` and the dispatchers' background pruning take disjoint
    batches instead of queueing on each other's rows.
    """
    with transaction.atomic():
        rows = list(
            Run.objects.filter(scheduled_at__lt=cutoff, state__in=TERMINAL_STATES)
            .order_by("scheduled_at")
            .select_for_update(skip_locked=True)
            .values_list("id", "scheduled_at")[:batch_size]
        )
        if not rows:
            return 0
        ids = [row[0] for row in rows]
        if not _only_attempts_refer_to_runs():
            # Another model points at runs: let the ORM's collector apply its
            # on_delete rules (slower: it loads the rows and deletes in chunks).
            Attempt.objects.filter(run_id__in=ids).delete()
            _, per_model = Run.objects.filter(id__in=ids).delete()
            return per_model.get(Run._meta.label, 0)
        # Two plain DELETEs: the collector would load all the rows first and
        # then delete them 100 at a time, which made a batch ten times slower
        # (and the dispatcher's housekeeping runs this between ticks).
        params: dict[str, Any] = {"ids": ids, "lo": rows[0][1], "hi": rows[-1][1]}
        with connection.cursor() as cur:
            cur.execute(DELETE_ATTEMPTS_OF_RUNS, params)
            cur.execute(DELETE_RUNS, params)
            return cur.rowcount


def _only_attempts_refer_to_runs() -> bool:
    return all(rel.related_model is Attempt for rel in Run._meta.related_objects)


def prune(
    cutoff: dt.datetime,
    batch_size: int = DEFAULT_BATCH,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Prune batch after batch until one comes back short; returns runs deleted.

    Call it outside any transaction: inside one, every batch would become a
    savepoint of that one long transaction.
    """
    total = 0
    while True:
        n = prune_batch(cutoff, batch_size)
        total += n
        if n and on_batch is not None:
            on_batch(n)
        if n < batch_size:
            return total


def expire(
    cutoff: dt.datetime,
    batch_size: int = DEFAULT_BATCH,
    on_batch: Callable[[int], None] | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> Expired:
    """Everything retention does for ``cutoff``: drop the days past it, then
    delete the finished runs left before ``row_cutoff(cutoff)`` in batches,
    while ``keep_going()`` says so (the dispatcher bounds its time)."""
    done = Expired()
    done.days_dropped, done.days_kept = partitions.drop_expired_days(cutoff)
    rows_before = row_cutoff(cutoff)
    while keep_going():
        n = prune_batch(rows_before, batch_size)
        done.runs_deleted += n
        if n and on_batch is not None:
            on_batch(n)
        if n < batch_size:
            break
    return done


def event_cutoff(now: dt.datetime) -> dt.datetime:
    """Audit events created before this are past retention."""
    return now - dt.timedelta(days=settings.PUNCTUAL_EVENT_RETENTION_DAYS)


def prune_history(
    now: dt.datetime,
    batch_size: int = DEFAULT_BATCH,
    keep_going: Callable[[], bool] = lambda: True,
) -> History:
    """Delete the audit events past retention, then the expired
    Idempotency-Key answers, then the alerts as old as those events,
    ``batch_size`` rows per transaction: at least one batch of each, then
    more while ``keep_going()`` says so (the dispatcher bounds its time).
    Call it outside any transaction, as ``prune``."""
    done = History()
    done.events_deleted = _delete_before(JobEvent, event_cutoff(now), batch_size, keep_going)
    done.keys_deleted = _delete_before(
        IdempotencyKey, idempotency.expiry(now), batch_size, keep_going
    )
    # Alerts keep as long as audit events: long sent or failed by then.
    done.alerts_deleted = _delete_before(Alert, event_cutoff(now), batch_size, keep_going)
    return done


def _delete_before(
    model: type, cutoff: dt.datetime, batch_size: int, keep_going: Callable[[], bool]
) -> int:
    """Batches until one comes back short, or ``keep_going()`` says stop; at
    least one, so a budget spent on runs still moves this table along."""
    total = 0
    while True:
        with transaction.atomic():
            n = delete_oldest(model, cutoff, batch_size)
        total += n
        if n < batch_size or not keep_going():
            return total

"""Retention: delete finished runs older than the retention window, in batches.

Each batch is its own short transaction, so pruning 200,000 rows never holds
one long transaction (which would hold back vacuum on the hot tables). Only
terminal runs go: a run that is still pending, running or retrying is kept
however old it is. Used by ``manage.py prune_runs`` and, one batch at a time,
by the dispatcher's housekeeping.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from django.db import connection, transaction

from core.db import adapt_uuid, is_postgres
from runs.models import TERMINAL_STATES, Attempt, Run

DEFAULT_BATCH = 1000


def prune_batch(cutoff: dt.datetime, batch_size: int = DEFAULT_BATCH) -> int:
    """Delete up to ``batch_size`` terminal runs scheduled before ``cutoff``.

    Oldest first, through ``run_scheduled_at_idx``. ``SKIP LOCKED`` (PostgreSQL;
    a no-op on SQLite) lets ``prune_runs`` and the dispatchers' background
    pruning take disjoint batches instead of queueing on each other's rows.
    """
    with transaction.atomic():
        ids = list(
            Run.objects.filter(scheduled_at__lt=cutoff, state__in=TERMINAL_STATES)
            .order_by("scheduled_at")
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return 0
        if not _only_attempts_refer_to_runs():
            # Another model points at runs: let the ORM's collector apply its
            # on_delete rules (slower: it loads the rows and deletes in chunks).
            Attempt.objects.filter(run_id__in=ids).delete()
            _, per_model = Run.objects.filter(id__in=ids).delete()
            return per_model.get(Run._meta.label, 0)
        # Two plain DELETEs: the collector would load all the rows first and
        # then delete them 100 at a time, which made a batch ten times slower
        # (and the dispatcher's housekeeping runs this between ticks).
        with connection.cursor() as cur:
            if is_postgres():
                where, params = "= ANY(%s)", [ids]
            else:
                where = "IN (" + ", ".join(["%s"] * len(ids)) + ")"
                params = [adapt_uuid(i) for i in ids]
            cur.execute(f"DELETE FROM {Attempt._meta.db_table} WHERE run_id {where}", params)
            cur.execute(f"DELETE FROM {Run._meta.db_table} WHERE id {where}", params)
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

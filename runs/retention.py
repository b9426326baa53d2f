"""Retention: delete finished runs older than the retention window, in batches.

Each batch is its own short transaction, so pruning 200,000 rows never holds
one long transaction (which would hold back vacuum on the hot tables).
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction

from runs.models import TERMINAL_STATES, Attempt, Run


def prune_batch(cutoff: dt.datetime, batch_size: int = 1000) -> int:
    """Delete up to ``batch_size`` terminal runs scheduled before ``cutoff``."""
    with transaction.atomic():
        ids = list(
            Run.objects.filter(scheduled_at__lt=cutoff, state__in=TERMINAL_STATES)
            .order_by("scheduled_at")
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return 0
        Attempt.objects.filter(run_id__in=ids).delete()
        deleted, _ = Run.objects.filter(id__in=ids).delete()
        return deleted


def prune(cutoff: dt.datetime, batch_size: int = 1000) -> int:
    total = 0
    while True:
        n = prune_batch(cutoff, batch_size)
        total += n
        if n < batch_size:
            return total

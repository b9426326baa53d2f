"""The delivery counters behind ``punctual_deliveries_total`` and the
``punctual_delivery_seconds`` histogram: the workers' side.

Workers deliver; web processes serve /metrics (ops/metrics.py). Neither can see
the other's memory, so ``runs.outcomes.complete`` adds each completed batch to
``DeliveryStat`` rows here, in the completion's transaction, and the metrics
endpoint reads them at scrape time.
"""

from __future__ import annotations

import bisect
import os
from collections import defaultdict
from collections.abc import Iterable

from django.db import connection

# Upper bounds (seconds) of the delivery histogram. Webhook timeouts go up to
# 900 s, so the top buckets reach that far.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
INF_BUCKET = len(BUCKETS)
NO_DURATION = -1
# Attempt outcomes as runs.models.Attempt.Outcome spells them; always
# exported, so a fresh install already has every series (at 0).
OUTCOMES = ("succeeded", "failed", "permanent")
# Writers spread over this many rows per counter (see DeliveryStat).
STAT_SHARDS = 16


def bucket_of(duration_ms: int | None) -> int:
    """The histogram bucket of one duration: the index of the smallest bound
    that is >= it, ``INF_BUCKET`` past the last bound, ``NO_DURATION`` if None."""
    if duration_ms is None:
        return NO_DURATION
    return bisect.bisect_left(BUCKETS, duration_ms / 1000)


# Worker complete loop and the pull API's complete (runs/outcomes.py), in the
# completion's transaction. Adding in SQL (not writing a value read earlier)
# means two workers on one shard never lose each other's counts; the rows are
# inserted in the order given (WITH ORDINALITY), which is what keeps two
# batches on one shard from deadlocking.
RECORD_DELIVERIES = """
    INSERT INTO runs_deliverystat AS s (shard, outcome, bucket, deliveries, duration_ms)
    SELECT %(shard)s, d.outcome, d.bucket, d.deliveries, d.duration_ms
    FROM unnest(%(outcomes)s::text[], %(buckets)s::int[], %(deliveries)s::bigint[],
                %(durations)s::bigint[]) WITH ORDINALITY
         AS d(outcome, bucket, deliveries, duration_ms, n)
    ORDER BY d.n
    ON CONFLICT (shard, outcome, bucket) DO UPDATE SET
        deliveries = s.deliveries + excluded.deliveries,
        duration_ms = s.duration_ms + excluded.duration_ms
"""


def record_deliveries(results: Iterable) -> int:
    """Add a batch of completed attempts to the delivery counters.

    ``results`` are ``runs.outcomes.Result`` (``attempt_outcome``,
    ``duration_ms``). One INSERT ... ON CONFLICT DO UPDATE statement per batch;
    call it inside the completion's transaction so the counters commit with
    the runs they count. Returns the number of counter rows written.
    """
    counts: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        key = (r.attempt_outcome, bucket_of(r.duration_ms))
        counts[key][0] += 1
        counts[key][1] += r.duration_ms or 0
    if not counts:
        return 0
    # One process always writes the same shard. Rows are listed in a fixed
    # order, so two batches that do share a shard lock its rows in the same
    # order and cannot deadlock.
    shard = os.getpid() % STAT_SHARDS
    rows = sorted(counts.items())
    with connection.cursor() as cur:
        cur.execute(
            RECORD_DELIVERIES,
            {
                "shard": shard,
                "outcomes": [outcome for (outcome, _), _ in rows],
                "buckets": [bucket for (_, bucket), _ in rows],
                "deliveries": [n for _, (n, _) in rows],
                "durations": [ms for _, (_, ms) in rows],
            },
        )
    return len(rows)

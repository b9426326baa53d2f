"""``GET /metrics``: Prometheus series, read from the database at scrape time.

gunicorn runs several web processes, and dispatchers and workers run in other
processes on other hosts, so no process holds these numbers in memory. A
custom collector queries the database when Prometheus scrapes, so every web
process answers the same values. Each query is cheap on big tables:

- ``punctual_dispatch_lag_seconds``: max(0, now − min(next_fire_at)) over
  active jobs; one probe of ``job_due_idx``.
- ``punctual_runs{state}``: ``pending``, ``running`` and ``retrying`` are
  counted exactly (``run_active_idx`` holds only those rows, and the active set
  is small by design). The terminal states are counted exactly while the runs
  table is at most ``EXACT_COUNT_PAGES`` pages (about 60 MB). Past that, they
  are estimated from the planner statistics (table size x the state's
  frequency in ``pg_stats``), ``punctual_runs_estimated`` is 1, and they are
  as fresh as the last ANALYZE.
- ``punctual_oldest_pending_seconds{target_kind}``: how long the oldest due
  waiting run (pending or retrying, ``available_at <= now``) has waited; the
  claim indexes give the minimum directly.
- ``punctual_deliveries_total{outcome}`` and the ``punctual_delivery_seconds``
  histogram: counters that workers persist in ``DeliveryStat``, one upsert per
  completed batch (``runs.stats.record_deliveries``, called by
  ``runs.outcomes.complete``).
- ``punctual_processes{kind}``: dispatchers and workers seen within 30 s.
- ``punctual_alerts{state}``: the alert ledger's rows per state (pending,
  sending, sent, failed); a small table (one alert per job, kind and channel
  per quiet period, kept as long as the audit events), counted exactly.
- ``punctual_database_up``: 0 when the database did not answer; the other
  series are then left out of that scrape rather than reported as zeros.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Iterator

from django.db import DatabaseError
from django.db.models import Count, Min, Sum
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from alerts.models import Alert, AlertState
from core.db import db_now, dict_cursor
from core.http import json_require_safe
from dispatch import fleet
from dispatch.models import ProcessHeartbeat, ProcessKind
from ops.health import dispatch_lag_seconds
from runs.models import DeliveryStat
from runs.stats import BUCKETS, INF_BUCKET, NO_DURATION, OUTCOMES

log = logging.getLogger("punctual.metrics")

# Up to this many 8 kB pages (about 60 MB), terminal run states are counted
# exactly; a sequential scan of that costs tens of milliseconds.
EXACT_COUNT_PAGES = 8000

RUN_STATES = (
    "pending",
    "running",
    "retrying",
    "succeeded",
    "failed",
    "missed",
    "skipped",
    "cancelled",
)
ACTIVE = RUN_STATES[:3]
TERMINAL = RUN_STATES[3:]
TARGET_KINDS = ("webhook", "pull")


# ---------------------------------------------------------------------------
# Reading: the scrape
# ---------------------------------------------------------------------------


def _run_counts() -> tuple[dict[str, int], bool]:
    """Runs per state, and whether the terminal ones are estimates."""
    from runs.models import Run

    counts = dict.fromkeys(RUN_STATES, 0)
    active = Run.objects.filter(state__in=ACTIVE).values("state").annotate(n=Count("id"))
    counts.update({row["state"]: row["n"] for row in active})
    estimate = _estimated_terminal_counts()
    if estimate is None:
        terminal = Run.objects.filter(state__in=TERMINAL).values("state").annotate(n=Count("id"))
        counts.update({row["state"]: row["n"] for row in terminal})
        return counts, False
    counts.update(estimate)
    return counts, True


# The scrape, past EXACT_COUNT_PAGES: for each day partition of runs_run (and
# the default one), its size in pages now, and the planner's statistics at its
# last ANALYZE: rows, pages, and each run state's share. Autovacuum analyses
# partitions, never their partitioned parent, so the statistics are read per
# partition.
RUN_PARTITION_STATS = """
    SELECT c.reltuples, c.relpages,
           pg_relation_size(c.oid) / current_setting('block_size')::int AS pages,
           s.most_common_vals::text::text[] AS vals, s.most_common_freqs AS freqs
    FROM pg_partition_tree('runs_run') AS t
    JOIN pg_class AS c ON c.oid = t.relid
    LEFT JOIN pg_stats AS s ON s.schemaname = current_schema()
        AND s.tablename = c.relname AND s.attname = 'state'
    WHERE t.isleaf
"""


def _estimated_terminal_counts() -> dict[str, int] | None:
    """Terminal states from the planner statistics, or None to count exactly.

    Per partition, the row total is scaled the way the planner does it (rows
    per page at the last ANALYZE x pages now), then split by the state's
    frequency in the most common values of ``pg_stats``. A partition not
    analysed yet (a new day) is estimated from the analysed ones: their rows
    per page and their mix of states. Returns None while the table is small
    enough to count, or when no partition has been analysed.
    """
    with dict_cursor() as cur:
        cur.execute(RUN_PARTITION_STATS)
        parts = cur.fetchall()
    if sum(p["pages"] for p in parts) <= EXACT_COUNT_PAGES:
        return None
    analysed = [p for p in parts if p["reltuples"] >= 0 and p["relpages"] > 0 and p["vals"]]
    if not analysed:
        return None
    counts = dict.fromkeys(TERMINAL, 0.0)
    for p in analysed:
        rows = p["reltuples"] / p["relpages"] * p["pages"]
        freqs = dict(zip(p["vals"], p["freqs"], strict=True))
        for state in TERMINAL:
            counts[state] += rows * freqs.get(state, 0.0)
    rows_per_page = sum(p["reltuples"] for p in analysed) / sum(p["relpages"] for p in analysed)
    unanalysed_pages = sum(p["pages"] for p in parts if p not in analysed)
    analysed_rows = sum(p["reltuples"] / p["relpages"] * p["pages"] for p in analysed)
    if unanalysed_pages and analysed_rows:
        share = unanalysed_pages * rows_per_page / analysed_rows
        counts = {state: n * (1 + share) for state, n in counts.items()}
    return {state: round(n) for state, n in counts.items()}


def _oldest_pending(now: dt.datetime) -> dict[str, float]:
    from runs.models import WAITING_STATES, Run

    oldest = dict.fromkeys(TARGET_KINDS, 0.0)
    for kind in TARGET_KINDS:
        # One query per kind, so each matches its claim index's predicate.
        first = Run.objects.filter(
            state__in=WAITING_STATES, target_kind=kind, available_at__lte=now
        ).aggregate(m=Min("available_at"))["m"]
        if first is not None:
            oldest[kind] = max(0.0, (now - first).total_seconds())
    return oldest


def _processes(now: dt.datetime) -> dict[str, int]:
    alive = dict.fromkeys(ProcessKind.values, 0)
    rows = (
        ProcessHeartbeat.objects.filter(last_seen__gte=now - fleet.ALIVE_WITHIN)
        .values("kind")
        .annotate(n=Count("id"))
    )
    alive.update({row["kind"]: row["n"] for row in rows})
    return alive


def _alert_counts() -> dict[str, int]:
    counts = dict.fromkeys(AlertState.values, 0)
    for row in Alert.objects.values("state").annotate(n=Count("id")).order_by():
        counts[row["state"]] = row["n"]
    return counts


def _delivery_stats() -> dict[str, dict[int, tuple[int, int]]]:
    """outcome -> bucket -> (deliveries, duration_ms), summed over shards."""
    stats: dict[str, dict[int, tuple[int, int]]] = {o: {} for o in OUTCOMES}
    rows = DeliveryStat.objects.values("outcome", "bucket").annotate(
        n=Sum("deliveries"), ms=Sum("duration_ms")
    )
    for row in rows:
        stats.setdefault(row["outcome"], {})[row["bucket"]] = (row["n"], row["ms"])
    return stats


class PunctualCollector(Collector):
    """Every series, computed from the database at each scrape."""

    def describe(self) -> Iterable[Metric]:
        # Registering must not touch the database (it happens at import).
        return []

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self._families())
        except DatabaseError as exc:
            log.error("metrics: database unavailable", extra={"error": str(exc)})
            families = []
        up = GaugeMetricFamily(
            "punctual_database_up", "1 if the database answered this scrape, else 0"
        )
        up.add_metric([], 1 if families else 0)
        yield up
        yield from families

    def _families(self) -> Iterator[Metric]:
        now = db_now()

        lag = GaugeMetricFamily(
            "punctual_dispatch_lag_seconds",
            "max(0, now - min(next_fire_at)) over active jobs, by the database clock",
        )
        lag.add_metric([], dispatch_lag_seconds(now))
        yield lag

        counts, estimated = _run_counts()
        runs = GaugeMetricFamily(
            "punctual_runs",
            "Runs per state (terminal states are estimates when punctual_runs_estimated is 1)",
            labels=["state"],
        )
        for state in RUN_STATES:
            runs.add_metric([state], counts[state])
        yield runs
        est = GaugeMetricFamily(
            "punctual_runs_estimated",
            "1 if terminal states in punctual_runs come from planner statistics",
        )
        est.add_metric([], 1 if estimated else 0)
        yield est

        oldest = GaugeMetricFamily(
            "punctual_oldest_pending_seconds",
            "Age of the oldest due run waiting for a worker (pending or retrying)",
            labels=["target_kind"],
        )
        for kind, age in _oldest_pending(now).items():
            oldest.add_metric([kind], age)
        yield oldest

        stats = _delivery_stats()
        total = CounterMetricFamily(
            "punctual_deliveries",
            "Completed delivery attempts by outcome (succeeded, failed = retryable, permanent)",
            labels=["outcome"],
        )
        seconds = HistogramMetricFamily(
            "punctual_delivery_seconds",
            "Duration of delivery attempts, from request to response",
            labels=["outcome"],
        )
        for outcome, by_bucket in stats.items():
            total.add_metric([outcome], sum(n for n, _ in by_bucket.values()))
            cumulative, buckets = 0, []
            for i, bound in enumerate(BUCKETS):
                cumulative += by_bucket.get(i, (0, 0))[0]
                buckets.append((floatToGoString(bound), cumulative))
            cumulative += by_bucket.get(INF_BUCKET, (0, 0))[0]
            buckets.append(("+Inf", cumulative))
            timed_ms = sum(ms for b, (_, ms) in by_bucket.items() if b != NO_DURATION)
            seconds.add_metric([outcome], buckets, sum_value=timed_ms / 1000)
        yield total
        yield seconds

        processes = GaugeMetricFamily(
            "punctual_processes",
            "Dispatchers and workers seen within the last 30 s",
            labels=["kind"],
        )
        for kind, n in _processes(now).items():
            processes.add_metric([kind], n)
        yield processes

        alerts = GaugeMetricFamily(
            "punctual_alerts",
            "Alerts in the ledger per state (a failed one ran out of attempts)",
            labels=["state"],
        )
        for state, n in _alert_counts().items():
            alerts.add_metric([state], n)
        yield alerts


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(PunctualCollector())


@never_cache
@json_require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)

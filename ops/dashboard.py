"""The admin dashboard: the fleet, dispatch lag, run outcomes, the oldest pending run.

Served at ``/admin/dashboard/`` by the Punctual admin site. Every query here
is bounded, so the page costs the same with a million runs as with ten:

* the fleet and lag samples are small tables that the dispatcher prunes
  (dispatch/fleet.py: silent processes after a day, samples after two);
* run outcomes are a ``GROUP BY`` over one hour or one day of
  ``scheduled_at``, a range scan of ``run_scheduled_at_idx``;
* the oldest pending run and the waiting counts read only active runs, which
  the partial index ``run_active_idx`` holds.

Charts are SVG computed here and drawn by the template (ops/charts.py):
no script, no external asset, so the page works offline.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count, Q
from django.db.models.functions import Trunc
from django.template.response import TemplateResponse

from core.db import db_now
from dispatch import fleet, queries
from dispatch.models import LagSample, ProcessHeartbeat
from jobs.display import short_duration
from jobs.models import Job, JobState
from ops import charts
from runs.models import ACTIVE_STATES, Run, RunState

LAG_WINDOW = dt.timedelta(hours=1)
LAG_BUCKET = dt.timedelta(minutes=1)

# Run outcomes: ?range=hour (default) or ?range=day.
RANGES = {
    "hour": ("minute", dt.timedelta(minutes=1), 60, "min"),
    "day": ("hour", dt.timedelta(hours=1), 24, "h"),
}
# Stacking order, bottom first: the outcomes that matter most sit on the axis.
OUTCOME_ORDER = (
    RunState.FAILED,
    RunState.MISSED,
    RunState.SUCCEEDED,
    RunState.SKIPPED,
    RunState.CANCELLED,
    RunState.RETRYING,
    RunState.RUNNING,
    RunState.PENDING,
)


@dataclass(frozen=True)
class Process:
    row: ProcessHeartbeat
    age: dt.timedelta
    alive: bool


def _truncate(when: dt.datetime, step: dt.timedelta) -> dt.datetime:
    epoch = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    return when - (when - epoch) % step


def _x_labels(count: int, step: dt.timedelta, unit: str) -> dict[int, str]:
    """Relative labels under the first, middle and last bucket: −59 min, −30 min, now."""
    per_unit = dt.timedelta(minutes=1) if unit == "min" else dt.timedelta(hours=1)
    middle = (count - 1) // 2
    return {
        0: f"−{int((count - 1) * step / per_unit)} {unit}",
        middle: f"−{int((count - 1 - middle) * step / per_unit)} {unit}",
        count - 1: "now",
    }


def fleet_rows(now: dt.datetime) -> list[Process]:
    return [
        Process(row=p, age=now - p.last_seen, alive=now - p.last_seen <= fleet.ALIVE_WITHIN)
        for p in ProcessHeartbeat.objects.order_by("kind", "name")
    ]


def lag_chart(now: dt.datetime) -> charts.Chart:
    """The worst lag any dispatcher reported in each minute of the last hour."""
    count = int(LAG_WINDOW / LAG_BUCKET)
    start = _truncate(now, LAG_BUCKET) - (count - 1) * LAG_BUCKET
    worst: list[float | None] = [None] * count
    for at, lag in LagSample.objects.filter(at__gte=start, at__lte=now).values_list(
        "at", "lag_seconds"
    ):
        index = int((at - start) / LAG_BUCKET)
        if 0 <= index < count:
            previous = worst[index]
            worst[index] = lag if previous is None else max(previous, lag)
    return charts.line_chart(worst, _x_labels(count, LAG_BUCKET, "min"))


def outcome_chart(runs, now: dt.datetime, range_key: str) -> tuple[charts.Chart, dict[str, int]]:
    """Runs by state per minute of the last hour, or per hour of the last day."""
    kind, step, count, unit = RANGES[range_key]
    start = _truncate(now, step) - (count - 1) * step
    rows = (
        runs.filter(scheduled_at__gte=start, scheduled_at__lt=start + count * step)
        .annotate(bucket=Trunc("scheduled_at", kind, tzinfo=dt.UTC))
        .values("bucket", "state")
        .annotate(n=Count("pk"))
        .order_by()
    )
    buckets: list[dict[str, int]] = [defaultdict(int) for _ in range(count)]
    totals: dict[str, int] = defaultdict(int)
    for row in rows:
        index = int((row["bucket"] - start) / step)
        if 0 <= index < count:
            buckets[index][row["state"]] += row["n"]
            totals[row["state"]] += row["n"]
    titles = [f"{start + i * step:%H:%M} UTC" for i in range(count)]
    chart = charts.stacked_bars(buckets, OUTCOME_ORDER, _x_labels(count, step, unit), titles)
    return chart, {state: totals[state] for state in OUTCOME_ORDER if totals.get(state)}


def dashboard_view(request, site_context: dict) -> TemplateResponse:
    now = db_now()
    range_key = request.GET.get("range", "hour")
    if range_key not in RANGES:
        range_key = "hour"
    runs = Run.objects.for_owner(request.user)

    earliest = queries.earliest_next_fire()
    lag_now = max(0.0, (now - earliest).total_seconds()) if earliest else 0.0
    outcomes, outcome_totals = outcome_chart(runs, now, range_key)
    oldest_pending = (
        runs.filter(state=RunState.PENDING)
        .select_related("job")
        .only("id", "scheduled_at", "available_at", "job__id", "job__name")
        .order_by("scheduled_at")
        .first()
    )
    pending_age = (now - oldest_pending.scheduled_at).total_seconds() if oldest_pending else None
    active = {
        row["state"]: row["n"]
        for row in runs.filter(state__in=ACTIVE_STATES)
        .values("state")
        .annotate(n=Count("pk"))
        .order_by()
    }
    jobs = Job.objects.for_owner(request.user).aggregate(
        active=Count("pk", filter=Q(state=JobState.ACTIVE)),
        paused=Count("pk", filter=Q(state=JobState.PAUSED)),
        failing=Count("pk", filter=Q(consecutive_failures__gt=0)),
    )
    context = {
        **site_context,
        "title": "Dashboard",
        "now": now,
        "fleet": fleet_rows(now),
        "alive_within": int(fleet.ALIVE_WITHIN.total_seconds()),
        "lag_now": lag_now,
        "lag_chart": lag_chart(now),
        "outcome_chart": outcomes,
        "outcome_totals": outcome_totals,
        "range": range_key,
        "ranges": list(RANGES),
        "oldest_pending": oldest_pending,
        "oldest_pending_age": pending_age,
        "oldest_pending_waiting": short_duration(pending_age),
        "active_counts": [(state, active.get(state, 0)) for state in ACTIVE_STATES],
        "jobs": jobs,
    }
    return TemplateResponse(request, "admin/dashboard.html", context)

"""The admin dashboard: what needs attention, the fleet, dispatch lag, run outcomes.

Served at ``/admin/dashboard/`` by the Punctual admin site. Every query here
is bounded, so the page costs the same with a million runs as with ten:

* the fleet and lag samples are small tables that the dispatcher prunes
  (dispatch/fleet.py: silent processes after a day, samples after two);
* run outcomes are a ``GROUP BY`` over one hour or one day of
  ``scheduled_at``, a range scan of ``run_scheduled_at_idx``;
* the waiting counts read only active runs, which the partial index
  ``run_active_idx`` holds;
* the "Needs attention" cards (also on the admin's index) ask the questions
  of console/attention.py, each bounded to the last day of ``scheduled_at`` or
  to one probe per job, and the oldest claimable run is the health check's
  own query (ops/health.py), narrowed to the owner.

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
from django.urls import reverse

from console import attention
from console.display import run_url
from core.db import db_now
from dispatch import fleet, queries
from dispatch.models import LagSample, ProcessHeartbeat
from jobs.display import short_duration
from jobs.models import Job, JobState
from ops import charts, health
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


# Items listed on each "Needs attention" card; the card's link lists them all.
CARD_ITEMS = 6


@dataclass(frozen=True)
class Item:
    text: str
    url: str
    detail: str = ""


@dataclass(frozen=True)
class Card:
    """One "Needs attention" card: a badge (how many, or how long; None:
    nothing to show), the first items, and the link to the list filtered to
    exactly what it shows."""

    key: str
    title: str
    badge: str | None
    items: list[Item]
    link: str
    link_text: str
    empty: str


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


def _job_url(job) -> str:
    return reverse("admin:jobs_job_change", args=[job.pk])


def _jobs_card(key: str, title: str, jobs, query: str, detail, empty: str) -> Card:
    """A card of jobs: how many, the first few by name, and the jobs list
    filtered by ``query`` (the same filter, console/filters.py)."""
    count = jobs.count()
    items = [
        Item(job.name, _job_url(job), detail(job))
        for job in jobs.order_by("name").only(
            "id", "name", "consecutive_failures", "pause_note", "system_pause_note", "state"
        )[:CARD_ITEMS]
    ]
    link = reverse("admin:jobs_job_changelist") + "?" + query
    return Card(key, title, str(count), items, link, f"All {count} in the jobs list", empty)


def _failing_detail(job) -> str:
    if job.consecutive_failures:
        return f"{job.consecutive_failures} failed in a row"
    return "its last run failed"


def _failed_runs_card(runs) -> Card:
    failed = (
        attention.recent_failures(runs)
        .select_related("job")
        .only("id", "scheduled_at", "last_status_code", "reason", "job__id", "job__name")[
            :CARD_ITEMS
        ]
    )
    items = [
        Item(
            run.job.name,
            run_url(run.pk),
            f"{run.scheduled_at:%m-%d %H:%M} UTC"
            + (f" · HTTP {run.last_status_code}" if run.last_status_code else "")
            + (f" · {run.reason}" if run.reason else ""),
        )
        for run in failed
    ]
    link = reverse("admin:runs_run_changelist") + "?status=failed&within=24h"
    return Card(
        "failed-runs",
        "Latest failed runs (24 h)",
        None,
        items,
        link,
        "All failed in 24 h",
        "No run failed in the last 24 hours.",
    )


def _claimable_card(user) -> Card:
    """The run due the longest that no worker has taken, webhook or pull, for
    this owner, and how long it has waited (the health check's backlog is
    the webhook runs' alone)."""
    oldest = health.oldest_waiting(owner_id=None if user.is_superuser else user.pk)
    items: list[Item] = []
    waited = None
    if oldest is not None:
        waited = short_duration(oldest["age"])
        due = f"due {oldest['scheduled_at']:%m-%d %H:%M:%S} UTC"
        if oldest["target_kind"] == "pull":
            due += " · pull"
        items.append(Item(oldest["job_name"], run_url(oldest["run_id"]), due))
    return Card(
        "oldest-claimable",
        "Oldest waiting run",
        waited,
        items,
        reverse("admin:runs_run_changelist") + "?status=waiting",
        "All waiting for a worker",
        "No run is waiting for a worker.",
    )


def attention_cards(user) -> list[Card]:
    """The "Needs attention" cards, for ``user``'s jobs (a superuser's: all)."""
    jobs = Job.objects.for_owner(user)
    runs = Run.objects.for_owner(user)
    limit = short_duration(attention.unclaimed_pull_limit().total_seconds())
    return [
        _jobs_card(
            "failing",
            "Failing jobs",
            attention.failing(jobs),
            "health=failing",
            _failing_detail,
            "No job is failing.",
        ),
        _jobs_card(
            "system-paused",
            "Paused by the system",
            attention.paused_by_system(jobs),
            "paused_by=system",
            # The system's reason, also when the owner paused the job again since.
            lambda job: job.system_pause_note or job.pause_note,
            "No job was paused by the system.",
        ),
        _jobs_card(
            "missed",
            "Missed fires (24 h)",
            attention.missed_recently(jobs),
            "missed=24h",
            lambda job: "",
            "No fire was missed in the last 24 hours.",
        ),
        _jobs_card(
            "unclaimed-pull",
            "Pull runs nobody claims",
            attention.unclaimed_pull(jobs),
            "unclaimed=pull",
            lambda job: f"a run waits over {limit} for a pull worker",
            "Every pull run is being claimed.",
        ),
        _failed_runs_card(runs),
        _claimable_card(user),
    ]


def dashboard_view(request, site_context: dict) -> TemplateResponse:
    now = db_now()
    range_key = request.GET.get("range", "hour")
    if range_key not in RANGES:
        range_key = "hour"
    runs = Run.objects.for_owner(request.user)

    earliest = queries.earliest_next_fire()
    lag_now = max(0.0, (now - earliest).total_seconds()) if earliest else 0.0
    outcomes, outcome_totals = outcome_chart(runs, now, range_key)
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
    )
    context = {
        **site_context,
        "title": "Dashboard",
        "now": now,
        "attention": attention_cards(request.user),
        "fleet": fleet_rows(now),
        "alive_within": int(fleet.ALIVE_WITHIN.total_seconds()),
        "lag_now": lag_now,
        "lag_chart": lag_chart(now),
        "outcome_chart": outcomes,
        "outcome_totals": outcome_totals,
        "range": range_key,
        "ranges": list(RANGES),
        "active_counts": [(state, active.get(state, 0)) for state in ACTIVE_STATES],
        "jobs": jobs,
    }
    return TemplateResponse(request, "admin/dashboard.html", context)

"""What needs an owner's attention: the questions behind the dashboard's
"Needs attention" cards and the list filters those cards link to.

Each question is answered by one function here, and both the card and the
filtered list call it, so a card's number and the list it links to always
agree. Every question about runs is bounded by time (``ATTENTION_WINDOW`` of
``scheduled_at``, by the database clock), so it reads the day's partitions of
the runs table through an index, never its whole history.
"""

from __future__ import annotations

import datetime as dt

from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Now

from jobs.models import Channel, Job, JobState
from runs.models import Run, RunState

ATTENTION_WINDOW = dt.timedelta(hours=24)
# The outcomes that make a job's "last run": a run that was delivered, or
# tried to be. Missed, skipped and cancelled fires never reached the target.
DELIVERY_OUTCOMES = (RunState.SUCCEEDED, RunState.FAILED)


def _window_start():
    return Now() - ATTENTION_WINDOW


def failing(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Jobs on a failure streak, or whose last delivery in the window failed.

    The streak alone misses a job that an owner resumed after a failure (a
    resume clears the streak) and whose last run failed all the same. The last
    outcome is one backward probe of the ``(job_id, scheduled_at)`` index per
    job, within the window.
    """
    last_outcome = (
        Run.objects.filter(
            job_id=OuterRef("pk"),
            state__in=DELIVERY_OUTCOMES,
            scheduled_at__gte=_window_start(),
        )
        .order_by("-scheduled_at")
        .values("state")[:1]
    )
    return jobs.annotate(last_outcome=Subquery(last_outcome)).filter(
        Q(consecutive_failures__gt=0) | Q(last_outcome=RunState.FAILED)
    )


def not_failing(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Every job that ``failing`` leaves out."""
    return jobs.exclude(pk__in=failing(Job.objects.all()).values("pk"))


def paused_by_system(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Paused jobs that the system paused (a failure streak, a 410 Gone, an
    unreadable schedule), not their owner: the job row keeps who paused it
    (``Job.paused_by``, written by the pause verbs), and an owner's pause
    over the system's keeps it ``system`` until a resume."""
    return jobs.filter(state=JobState.PAUSED, paused_by=Channel.SYSTEM)


def missed_recently(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Jobs with a fire recorded ``missed`` by their misfire policy within
    the window (by its scheduled time)."""
    return jobs.filter(
        Exists(
            Run.objects.filter(
                job_id=OuterRef("pk"),
                state=RunState.MISSED,
                scheduled_at__gte=_window_start(),
            )
        )
    )


def within(runs: QuerySet[Run], span: dt.timedelta) -> QuerySet[Run]:
    """Runs scheduled within the last ``span``, by the database clock."""
    return runs.filter(scheduled_at__gte=Now() - span)


def recent_failures(runs: QuerySet[Run]) -> QuerySet[Run]:
    """Failed runs scheduled within the window, newest first."""
    return within(runs, ATTENTION_WINDOW).filter(state=RunState.FAILED).order_by("-scheduled_at")

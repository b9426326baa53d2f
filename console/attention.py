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

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Now

from jobs.models import Channel, Job, JobState, TargetKind
from runs.models import WAITING_STATES, Run, RunState

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


def waiting_for_a_worker(runs: QuerySet[Run]) -> QuerySet[Run]:
    """Runs due and waiting that a worker could take now: waiting (pending or
    retrying), due, of live jobs, and not held back by a running run of their
    own skip/queue job. Webhook runs wait for the internal workers, pull runs
    for their owner's. The health check's backlog (ops/health.py
    OLDEST_CLAIMABLE) counts the webhook ones only: a pull job's workers are
    its owner's, not the service's."""
    running = Run.objects.filter(job=OuterRef("job"), state=RunState.RUNNING, exclusive=True)
    return runs.filter(
        state__in=WAITING_STATES,
        available_at__lte=Now(),
        job__state=JobState.ACTIVE,
        job__deleted_at__isnull=True,
    ).filter(Q(exclusive=False) | ~Exists(running))


def unclaimed_pull_limit() -> dt.timedelta:
    return dt.timedelta(seconds=settings.PUNCTUAL_PULL_UNCLAIMED_SECONDS)


def unclaimed_pull(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Pull jobs with a run that a worker could have claimed for over
    ``PUNCTUAL_PULL_UNCLAIMED_SECONDS`` (60 s), and none did: the owner's
    workers are gone, stopped, or claim other jobs (``--job``). Its
    ``available_at`` is when it became claimable (its fire, or the end of a
    retry's backoff), so a run claimed and then retried counts from then.

    Not bounded by ``ATTENTION_WINDOW``: a run that has waited for days is the
    one to show. The probe per pull job reads run_claim_pull_idx (waiting pull
    runs only, by job and available_at), which holds nothing else.
    """
    stale = waiting_for_a_worker(
        Run.objects.filter(job_id=OuterRef("pk"), target_kind=TargetKind.PULL)
    ).filter(available_at__lte=Now() - unclaimed_pull_limit())
    return jobs.filter(target_kind=TargetKind.PULL).filter(Exists(stale))


def within(runs: QuerySet[Run], span: dt.timedelta) -> QuerySet[Run]:
    """Runs scheduled within the last ``span``, by the database clock."""
    return runs.filter(scheduled_at__gte=Now() - span)


def recent_failures(runs: QuerySet[Run]) -> QuerySet[Run]:
    """Failed runs scheduled within the window, newest first."""
    return within(runs, ATTENTION_WINDOW).filter(state=RunState.FAILED).order_by("-scheduled_at")

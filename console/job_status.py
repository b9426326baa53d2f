"""The status header at the top of a job's admin page (docs/guides/owners.md "The admin").

What an owner needs first: whether the job fires, and if not, who or what
stopped it and until when; its last runs as a strip of squares; and its last
failure with the receiver's answer. Everything below it on the page (the form,
the next fires, the audit log) is detail.

The header costs at most two queries beyond the recent runs the page loads
anyway: the event that paused the job (only while it is paused), and the last
failure's error text (only when one of the runs in the strip failed).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.utils.safestring import SafeString

from console.display import STATE_LABELS, outcome_strip, run_url
from jobs.display import moment
from jobs.models import Channel, Job, JobEvent, JobState
from runs.models import Run, RunState

# Squares in the header's strip: the newest runs, enough to see a streak.
STRIP_RUNS = 20
# Runs whose last attempt failed: a failed run, or one waiting to retry.
FAILED_STATES = (RunState.FAILED, RunState.RETRYING)
# The error text beside the last failure; the run's page has all of it.
ERROR_CHARS = 200


@dataclass(frozen=True)
class Failure:
    """The newest failed run in the strip, and why it failed."""

    run: Run
    error: str

    @property
    def url(self) -> str:
        return run_url(self.run.pk)

    def summary(self) -> str:
        """``Failed · HTTP 500 Internal Server Error · attempts exhausted``."""
        status = f"HTTP {self.run.last_status_code}" if self.run.last_status_code else ""
        error = " ".join(self.error.split())
        if len(error) > ERROR_CHARS:
            error = error[: ERROR_CHARS - 1] + "…"
        # The worker's error text often starts with the status already.
        if status and error.startswith(status):
            status = ""
        parts = [STATE_LABELS.get(self.run.state, self.run.state), status, error, self.run.reason]
        return " · ".join(part for part in parts if part)


@dataclass(frozen=True)
class JobStatus:
    """What the header shows; ``console/templates/admin/jobs/job/status_header.html``
    lays it out."""

    state: str  # a CSS state: active, paused, failed, deleted
    headline: str
    details: list[str] = field(default_factory=list)
    strip: SafeString | str = ""
    failure: Failure | None = None
    failure_when: str = ""


def job_status(job: Job, runs: Sequence[Run], now: dt.datetime, viewer) -> JobStatus:
    """The header of ``job``'s page for ``viewer``; ``runs`` are its newest
    runs, newest first (console/recent.py), ``now`` the database clock."""
    strip_runs = list(runs[:STRIP_RUNS])
    failure = last_failure(strip_runs)
    state, headline, details = _state_lines(job, now, viewer)
    return JobStatus(
        state=state,
        headline=headline,
        details=details,
        strip=outcome_strip(strip_runs),
        failure=failure,
        failure_when=moment(failure.run.scheduled_at, job.timezone, now) if failure else "",
    )


def _state_lines(job: Job, now: dt.datetime, viewer) -> tuple[str, str, list[str]]:
    """(CSS state, headline, the details after it)."""
    streak = _streak_text(job)
    if job.deleted_at is not None:
        return "deleted", "Deleted", [f"since {moment(job.deleted_at, job.timezone, now)}"]
    if job.state == JobState.PAUSED:
        details = []
        if job.paused_at:
            details.append(f"since {moment(job.paused_at, job.timezone, now)}")
        if job.resume_at:
            details.append(f"resumes at {moment(job.resume_at, job.timezone, now)}")
        else:
            details.append("stays paused until resumed")
        event = paused_by(job)
        owner_since = event is not None and event.channel != Channel.SYSTEM
        if job.paused_by == Channel.SYSTEM and owner_since:
            # The owner paused it over the system's pause: their note
            # beside the system's reason, which stays the headline.
            details.insert(0, _owner_pause(job, event, viewer, first="then paused"))
        return "paused", pause_headline(job, event, viewer), details + streak
    if job.next_fire_at is None and job.parked_since:
        # Parked (jobs/models.py Job.parked_since): its run is still active,
        # and every fire since is declined under overlap skip.
        details = [
            "its run is still active: fires since"
            f" {moment(job.parked_since, job.timezone, now)} are skipped (overlap),"
            " the next comes after the run ends"
        ]
        if streak:
            return "failed", "Active, failing", details + streak
        return "active", "Active, waiting for its run", details
    if job.next_fire_at is None:
        # Finished (jobs/models.py JobStatus): not failing, whatever its
        # last run did; an edit of the schedule or its end brings it back.
        ended = "its one fire is made" if job.run_at else "no further fires"
        if job.end_at is not None and job.run_at is None:
            ended = f"ended at {moment(job.end_at, job.timezone, now)}"
        return "finished", "Finished", [ended, *streak]
    details = [f"next fire {moment(job.next_fire_at, job.timezone, now)}"]
    if streak:
        return "failed", "Active, failing", details + streak
    return "active", "Active", details


def _streak_text(job: Job) -> list[str]:
    """``2 failed runs in a row (it pauses itself at 5)``, or nothing."""
    count = job.consecutive_failures
    if not count:
        return []
    text = f"{count} failed run{'s' if count != 1 else ''} in a row"
    if job.pause_after_failures and job.state == JobState.ACTIVE:
        text += f" (it pauses itself at {job.pause_after_failures})"
    return [text]


def paused_by(job: Job) -> JobEvent | None:
    """The event of the job's latest pause, which says who paused it and
    through which channel; None once retention deleted it."""
    return (
        JobEvent.objects.filter(job=job, action="paused")
        .select_related("actor")
        .order_by("-created_at", "-id")
        .first()
    )


def pause_headline(job: Job, event: JobEvent | None, viewer) -> str:
    """``Paused by you: “deploy”``; for the system's own pauses, its reason
    (a 410 Gone, a failure streak, an unreadable schedule), also when the
    owner paused the job again since (``paused_by`` stays ``system``)."""
    if job.paused_by == Channel.SYSTEM:
        return job.system_pause_note or job.pause_note or "Paused automatically"
    return _owner_pause(job, event, viewer)


def _owner_pause(job: Job, event: JobEvent | None, viewer, first: str = "Paused") -> str:
    """``Paused by ann through the API: “deploy”``: who paused the job last
    (the latest "paused" event), how, and their note."""
    note = job.pause_note
    if event is None or event.actor is None:
        who = first
    elif event.actor_id == getattr(viewer, "pk", None):
        who = f"{first} by you"
    else:
        who = f"{first} by {event.actor}"
    if event is not None and event.channel == Channel.API:
        who += " through the API"
    return f"{who}: “{note}”" if note else who


def last_failure(runs: Sequence[Run]) -> Failure | None:
    """The newest of ``runs`` whose last attempt failed, with its error text.

    The strip's runs carry no error text (console/recent.py loads only what a
    square needs), so it is read here for this one run, by its primary key
    and partition key.
    """
    run = next((r for r in runs if r.state in FAILED_STATES), None)
    if run is None:
        return None
    error = (
        Run.objects.filter(pk=run.pk, scheduled_at=run.scheduled_at)
        .values_list("last_error", flat=True)
        .first()
    )
    return Failure(run=run, error=error or "")

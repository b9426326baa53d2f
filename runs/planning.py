"""Pure dispatch decisions: which fires of a due job become which runs.

No database and no clock here: the dispatcher passes the job's row, the
database's ``now`` and how many runs of the job are running and waiting, and gets back the
rows to insert and the job's next fire. ``tests/unit/test_planning.py`` pins the
misfire and overlap rules of docs/concepts/misfire-and-overlap.md case by case.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field, fields

from jobs.schedules import Schedule

# docs/concepts/misfire-and-overlap.md "Misfires": at most 100 missed rows per job per
# recovery; any beyond are only counted (on the job: missed_count, missed_since),
# never an uncapped burst of rows.
MAX_MISSED_ROWS = 100

SCHEDULED, CATCH_UP = "scheduled", "catch_up"
PENDING, MISSED, SKIPPED = "pending", "missed", "skipped"
# The reason of a fire that a backlog left behind (_runnable): no dispatcher
# reached it in time. runs/models.py Reason.NO_DISPATCHER.
NO_DISPATCHER = "no dispatcher"


@dataclass(frozen=True)
class DueJob:
    """The columns of a locked due job that the decision needs."""

    id: uuid.UUID
    cron: str | None
    interval_seconds: int | None
    timezone: str
    start_at: dt.datetime | None
    created_at: dt.datetime
    next_fire_at: dt.datetime
    misfire_policy: str
    max_catchup: int
    misfire_grace_seconds: int
    overlap_policy: str
    jitter_seconds: int = 0
    max_attempts: int = 3
    target_kind: str = "webhook"
    owner_id: int | None = None  # copied onto its runs (runs/models.py Run.owner_id)
    run_at: dt.datetime | None = None  # a one-off's one fire
    end_at: dt.datetime | None = None  # no fire after it

    @classmethod
    def from_row(cls, row: object) -> DueJob:
        """The decision's columns, read from a job (a model instance or any
        object with the same attribute names)."""
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})

    @property
    def schedule(self) -> Schedule:
        """The job's schedule, by ``Schedule.for_job``'s anchor rule."""
        return Schedule.for_job(
            cron=self.cron,
            interval_seconds=self.interval_seconds,
            timezone=self.timezone,
            start_at=self.start_at,
            created_at=self.created_at,
            run_at=self.run_at,
            end_at=self.end_at,
        )


@dataclass(frozen=True)
class PlannedRun:
    scheduled_at: dt.datetime
    kind: str
    state: str
    reason: str = ""


@dataclass
class Plan:
    runs: list[PlannedRun] = field(default_factory=list)
    next_fire_at: dt.datetime | None = None
    # Misfires beyond the row cap: counted exactly, not listed. missed_since is
    # the earliest of them (None when there are none).
    missed_counted: int = 0
    missed_since: dt.datetime | None = None

    def count(self, state: str) -> int:
        return sum(1 for r in self.runs if r.state == state)


def overlap_skips(policy: str, running: int, waiting: int) -> bool:
    """The overlap rule (docs/concepts/misfire-and-overlap.md "Overlap"): is a fire
    skipped, given the job's runs ``running`` and ``waiting`` (pending or retrying)?

    - ``skip``: while any run of the job is running or waiting;
    - ``queue``: while a run is already waiting (at most one waits, whether
      behind a running run or for a worker);
    - ``allow``: never.

    Stated once more, in SQL, by the dispatcher's fast path
    (dispatch/queries.py OVERLAP_SKIPS), which must be kept in step with it
    (tests/integration/test_dispatcher.py checks both on the same cases)."""
    if policy == "skip":
        return running + waiting > 0
    if policy == "queue":
        return waiting > 0
    return False


@dataclass(frozen=True)
class DueFires:
    """A job's due fires: the newest ``kept`` listed, the older ones counted."""

    kept: list[dt.datetime]  # the newest due fires, ascending
    older: int  # how many due fires precede kept[0]
    oldest: dt.datetime | None  # the first of those older fires
    upcoming: dt.datetime | None  # the first fire after now


def _due_fires(job: DueJob, now: dt.datetime) -> DueFires:
    """Fires in [next_fire_at, now]: the tail that can matter listed, the rest
    counted, and the first fire after now (None past the job's ``end_at``,
    or after a one-off's fire: the job is finished).

    The tail is the newest MAX_MISSED_ROWS + max_catchup + 1 fires: room for
    the recorded misfires, the catch-up runs and a fire within grace. Interval
    schedules are plain arithmetic. A cron's tail is found by searching back
    from now, and the fires before it are counted a local day at a time
    (jobs/schedules.py), so a recovery costs the same after an hour or a year
    down.
    """
    start = job.next_fire_at
    keep = MAX_MISSED_ROWS + max(job.max_catchup, 1) + 1
    if job.interval_seconds:
        # Arithmetic from next_fire_at, as the SQL fast path advances it
        # (dispatch/queries.py): the same fires whichever path takes the job.
        step = dt.timedelta(seconds=job.interval_seconds)
        until = now if job.end_at is None else min(now, job.end_at)
        total = (until - start) // step + 1
        first_kept = max(0, total - keep)
        kept = [start + step * k for k in range(first_kept, total)]
        upcoming: dt.datetime | None = start + step * total
        if job.end_at is not None and upcoming is not None and upcoming > job.end_at:
            upcoming = None
        return DueFires(kept, first_kept, start if first_kept else None, upcoming)
    schedule = job.schedule
    kept = schedule.latest_fires(start, now, keep)
    older = schedule.count_fires_between(start, kept[0]) if kept else 0
    oldest = next(schedule.iter_fires(start, inclusive=True), None) if older else None
    return DueFires(kept, older, oldest, schedule.next_fire(now))


def plan_job(job: DueJob, now: dt.datetime, running: int = 0, waiting: int = 0) -> Plan:
    """Decide the runs for one due job.

    1. List the due fires (scheduled_at <= now) from next_fire_at.
    2. Split them: reached within misfire_grace_seconds -> on time (run, even if
       late: that is "delayed", and shows as lag); older -> misfires.
    3. Misfire policy: ``skip`` records misfires as ``missed``; ``catch_up`` runs
       the most recent ``max_catchup`` of them (kind ``catch_up``) and records
       older ones as ``missed``.
    4. Overlap policy over the runnable fires (_runnable).
    5. Missed rows are capped at MAX_MISSED_ROWS, the newest kept; older
       misfires are counted (missed_counted, and the earliest as
       missed_since), never listed.
    6. Advance next_fire_at to the first fire after now: None when the
       job's ``end_at`` comes first, or its one-off has fired (finished).
    """
    due = _due_fires(job, now)
    grace = dt.timedelta(seconds=job.misfire_grace_seconds)
    misfires = [f for f in due.kept if now - f > grace]
    on_time = due.kept[len(misfires) :]

    catch_up: list[dt.datetime] = []
    if job.misfire_policy == "catch_up" and misfires:
        catch_up = misfires[-job.max_catchup :]
        misfires = misfires[: -job.max_catchup]
        reason = "over catch-up cap"
    else:
        reason = "past grace"
    runs = [PlannedRun(f, SCHEDULED, MISSED, reason) for f in misfires]
    runs += _runnable(job, catch_up, on_time, running, waiting)

    missed = [r.scheduled_at for r in runs if r.state == MISSED]
    unrecorded = set(missed[: max(0, len(missed) - MAX_MISSED_ROWS)])
    plan = Plan(
        runs=[r for r in runs if r.scheduled_at not in unrecorded],
        next_fire_at=due.upcoming,
        missed_counted=due.older + len(unrecorded),
    )
    if plan.missed_counted:
        plan.missed_since = due.oldest if due.older else min(unrecorded)
    return plan


def _runnable(
    job: DueJob, catch_up: list[dt.datetime], on_time: list[dt.datetime], running: int, waiting: int
) -> list[PlannedRun]:
    """The overlap policy over the catch-up and on-time fires, oldest first,
    given the job's runs already ``running`` and ``waiting`` (overlap_skips).

    ``skip`` records a fire as ``skipped`` while a run is running or
    waiting; ``queue`` keeps at most one run waiting; ``allow`` runs all.
    Each fire planned pending waits for the next. Catch-up runs are exempt:
    the owner asked for them, and the claim query still runs them one at a
    time, oldest first.

    A fire declined only because of a run this same plan made (a catch-up
    run, or an earlier fire of the backlog) was not declined by a run that
    ran too long: no dispatcher reached it before the job's next fire came
    due (it was down, restarting, or a full interval behind), and when one
    came back it found the fires together. It is ``missed`` with the reason
    NO_DISPATCHER. A fire declined by a run that was already active keeps
    ``overlap``: that run was there whether or not a dispatcher was.
    """
    runs = [PlannedRun(fire, CATCH_UP, PENDING) for fire in catch_up]
    made = len(catch_up)
    waiting += made
    for fire in on_time:
        if not overlap_skips(job.overlap_policy, running, waiting):
            runs.append(PlannedRun(fire, SCHEDULED, PENDING))
            waiting += 1
            made += 1
        elif overlap_skips(job.overlap_policy, running, waiting - made):
            runs.append(PlannedRun(fire, SCHEDULED, SKIPPED, "overlap"))
        else:
            runs.append(PlannedRun(fire, SCHEDULED, MISSED, NO_DISPATCHER))
    return runs

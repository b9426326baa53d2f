"""The job verbs that create or cancel runs: pause, resume, trigger,
send_test_delivery, backfill, soft_delete.

They live on the runs side because jobs sits below runs: a job knows its
schedule, its secrets and its own state, and nothing of runs. Each verb changes
the job through its own fields and ``job.record_event``, and its runs through
``Run.objects``, in one transaction. Views, the admin and the system's own
actors (auto-pause in runs/leases.py, auto-resume in the dispatcher) all call
these functions; none of them update job rows behind their back.

Each verb takes the row with ``Job.locked()`` (``SELECT … FOR UPDATE``),
decides on what the row holds now rather than on the caller's copy, writes
only the fields it changes, and bumps ``version`` in SQL (``Job.save``). The
caller's copy is refreshed afterwards, so an answer built from it (an API
response and its ETag) shows what was written. A verb on a job deleted
meanwhile writes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from alerts import events as alert_events
from core.db import db_now
from jobs import changes, history, quotas
from jobs.models import Channel, Job, JobState
from runs import identity, notify, parking, planning
from runs.models import Reason, Run, RunKind, RunState

MAX_BACKFILL = 1000

# The fields whose change moves the job's fires: an edit of one of them plans
# what the old schedule already made due, then recomputes next_fire_at.
SCHEDULE_FIELDS = frozenset(
    {"cron", "interval_seconds", "run_at", "timezone", "start_at", "end_at"}
)
# The fields the dispatcher's planning reads besides the schedule: an edit of
# one of them plans the due fires under the old values first, as the
# dispatcher would have a moment earlier.
PLANNING_FIELDS = SCHEDULE_FIELDS | {
    "target_kind",
    "misfire_policy",
    "max_catchup",
    "misfire_grace_seconds",
    "overlap_policy",
    "jitter_seconds",
    "max_attempts",
}
# The columns each verb writes, and so what its event may show changing.
PAUSE_FIELDS = frozenset({"state", "pause_note", "paused_at", "resume_at", "next_fire_at"})
RESUME_FIELDS = PAUSE_FIELDS | {"consecutive_failures"}
# Written with them, and left out of their events (which name the channel,
# and the system's reason as the note of its own pause).
PAUSED_BY = frozenset({"paused_by", "system_pause_note"})
DELETE_FIELDS = frozenset({"deleted_at", "next_fire_at"})


def settle_due_fires(current: Job, now: dt.datetime, *, stopping: str | None = None) -> int:
    """Plan the fires that are due (``next_fire_at <= now``) but that no
    dispatcher has reached yet, so that a pause, a delete or an edit that
    commits while fires are due never drops them (docs/concepts/pause-and-resume.md
    "Owner actions while fires are due").

    ``current`` is the job's locked row. Its due fires are planned as the
    dispatcher would plan them (runs/planning.py). When the job is stopping
    (``stopping`` is the reason, ``paused`` or ``deleted``), a fire that would
    have run is recorded ``skipped`` with that reason instead: no attempt of
    a paused or deleted job may start. Fires past the recorded cap are added
    to the stored missed count. Returns the runs recorded.

    A parked job (jobs/models.py Job.parked_since) is unparked first, at
    ``now``: the fires its run made it decline until now are counted on its
    skipped run, and its next fire is then planned like any other.
    """
    if current.parked_since is not None:
        current.next_fire_at = parking.unpark(current.pk, now)
        current.parked_since = None
    if current.state != JobState.ACTIVE or current.next_fire_at is None:
        return 0
    if current.next_fire_at > now:
        return 0
    due = planning.DueJob.from_row(current)
    if stopping:
        # Nothing will run: every fire that would have is skipped for the
        # pause (or delete) itself, not for an overlap that no longer matters.
        due = dataclasses.replace(due, overlap_policy="allow")
    running = Run.objects.filter(job_id=current.pk, state=RunState.RUNNING).count()
    waiting = Run.objects.filter(
        job_id=current.pk, state__in=(RunState.PENDING, RunState.RETRYING)
    ).count()
    plan = planning.plan_job(due, now, running, waiting)
    rows = []
    for planned in plan.runs:
        state, reason = planned.state, planned.reason
        if stopping and state == planning.PENDING:
            state, reason = planning.SKIPPED, stopping
        rows.append((planned.scheduled_at, planned.kind, state, reason))
    created = Run.objects.create_planned(current, rows, now=now)
    history.add_missed(current.pk, plan.missed_counted, plan.missed_since)
    current.next_fire_at = plan.next_fire_at
    return created


@transaction.atomic
def pause(
    job: Job,
    *,
    note: str = "",
    resume_at: dt.datetime | None = None,
    actor=None,
    channel: str = Channel.API,
) -> int:
    """Stop new fires at once and cancel waiting runs. Returns runs cancelled.

    A run that is already ``running`` finishes its current attempt, bounded
    by its deadline; its retries are cancelled when it reports back.
    """
    now = db_now()
    current = job.locked()
    if current is None:
        return 0
    return _pause_locked(
        current, now, note=note, resume_at=resume_at, actor=actor, channel=channel, job=job
    )


def _pause_locked(
    current: Job,
    now: dt.datetime,
    *,
    note: str,
    resume_at: dt.datetime | None,
    actor=None,
    channel: str,
    job: Job | None = None,
) -> int:
    """The pause, on the job's locked row ``current``.

    An owner's pause of a job the system paused keeps the system's pause:
    ``paused_by`` stays ``system`` and ``system_pause_note`` its reason, and
    the owner's note goes into ``pause_note`` beside it; the event says so
    (``system_pause_kept``). Only a resume ends the system's pause.
    """
    before = changes.snapshot(current, PAUSE_FIELDS)
    settle_due_fires(current, now, stopping=Reason.PAUSED)
    system_paused = current.state == JobState.PAUSED and current.paused_by == Channel.SYSTEM
    # Pausing a paused job changes its note and resume_at, not when the
    # pause began: that is where a catch-up resume counts fires from.
    if current.state != JobState.PAUSED or current.paused_at is None:
        current.paused_at = now
    current.state = JobState.PAUSED
    current.pause_note = note
    if not system_paused:
        current.paused_by = channel
        current.system_pause_note = note if channel == Channel.SYSTEM else ""
    current.resume_at = resume_at
    current.next_fire_at = None
    current.save(update_fields=sorted(PAUSE_FIELDS | PAUSED_BY))
    history.record_spans([current.pk], now)
    if job is not None:
        job.refresh_from_db()
    cancelled = Run.objects.cancel_waiting(job_id=current.pk, reason=Reason.PAUSED, now=now)
    recorded = {**changes.since(before, current), "cancelled_runs": cancelled}
    if system_paused:
        recorded["system_pause_kept"] = current.system_pause_note
    current.record_event("paused", actor=actor, channel=channel, changes=recorded)
    return cancelled


@transaction.atomic
def resume(
    job: Job,
    *,
    catch_up: bool = False,
    dry_run: bool = False,
    actor=None,
    channel: str = Channel.API,
    due_by: dt.datetime | None = None,
) -> dict[str, Any]:
    """Resume from now. Fires inside the pause are declined, not missed,
    unless ``catch_up`` asks for the last ``max_catchup`` of them.

    ``due_by`` is the auto-resume's condition: resume only if the row still
    asks for a ``resume_at`` at or before it. An owner who deleted the job,
    or paused it again with a later ``resume_at``, after the dispatcher read
    it, keeps what they did.
    """
    now = db_now()
    plan: dict[str, Any] = {"catch_up": [], "next_fire_at": None, "created": 0}
    current = job.locked()
    if current is None:
        return plan
    if due_by is not None and (
        current.state != JobState.PAUSED or current.resume_at is None or current.resume_at > due_by
    ):
        return plan
    catch_up_fires = current.fires_missed_while_paused(now) if catch_up else []
    next_fire = current.compute_next_fire(now)
    plan["catch_up"] = [f.isoformat() for f in catch_up_fires]
    plan["next_fire_at"] = next_fire.isoformat() if next_fire else None
    if dry_run or current.state == JobState.ACTIVE:
        return plan
    before = changes.snapshot(current, RESUME_FIELDS)
    current.state = JobState.ACTIVE
    current.pause_note = ""
    current.resume_at = None
    current.paused_at = None
    current.paused_by = ""
    current.system_pause_note = ""
    current.next_fire_at = next_fire
    current.consecutive_failures = 0
    current.save(update_fields=sorted(RESUME_FIELDS | PAUSED_BY))
    history.record_spans([current.pk], now)
    job.refresh_from_db()
    plan["created"] = Run.objects.create_for_fires(job, catch_up_fires, kind=RunKind.CATCH_UP)
    # Its catch-up runs, and any run backfilled while it was paused, may
    # start now (a manual run or test delivery made meanwhile already could).
    notify.runs_claimable("resume")
    job.record_event(
        "resumed",
        actor=actor,
        channel=channel,
        changes={**changes.since(before, current), "catch_up": plan["catch_up"]},
    )
    return plan


@transaction.atomic
def trigger(
    job: Job, *, idempotency_key: str | None = None, actor=None, channel: str = Channel.API
) -> Run:
    """A manual run, scheduled at the database's now, delivered like any other,
    at once even while the job is paused (docs/concepts/pause-and-resume.md
    "Run it now, while paused").

    Its id is ``manual_id(job, key)`` when the request carried an
    Idempotency-Key, else the id of the fire at that now (runs/identity.py).
    A key that already made a run of this job gets that run back, not a
    second one: the stored answer (jobs/idempotency.py) covers a repeat
    within 24 hours and serialises concurrent ones, and this covers a repeat
    after the answer expired, whose new run would otherwise collide with the
    first one's id.

    A new manual run counts against the owner's triggers per minute
    (jobs/quotas.py), with the job's test deliveries and retries, under the
    job's row lock, so that concurrent triggers cannot pass the limit
    together; over it, nothing is written.
    """
    keyed = None if idempotency_key is None else identity.manual_id(job.pk, idempotency_key)
    if keyed is not None:
        earlier = Run.objects.filter(pk=keyed).first()
        if earlier is not None:
            return earlier
    return _hand_made_run(
        job,
        lambda now: identity.fire_id(job.pk, now) if keyed is None else keyed,
        kind=RunKind.MANUAL,
        max_attempts=job.max_attempts,
        actor=actor,
        channel=channel,
        action="triggered",
    )


@transaction.atomic
def send_test_delivery(job: Job, *, actor=None, channel: str = Channel.ADMIN) -> Run:
    """A test delivery: a run of kind ``test``, made now, with one attempt,
    delivered at once even while the job is paused.

    It answers "does my target take this job's deliveries?" at once: no
    retries, and its outcome neither adds to nor resets the job's failure
    streak (runs/outcomes.py), so a test against a target that is down cannot
    pause the job. It counts against the owner's triggers per minute, like a
    manual run. The admin's "Send test delivery" and the API's
    ``POST /api/v1/jobs/{id}/test/`` both call it.
    """
    return _hand_made_run(
        job,
        lambda now: identity.fire_id(job.pk, now),
        kind=RunKind.TEST,
        max_attempts=1,
        actor=actor,
        channel=channel,
        action="test_delivery",
    )


def _hand_made_run(
    job: Job,
    run_id: Callable[[dt.datetime], uuid.UUID],
    *,
    kind: str,
    max_attempts: int,
    actor,
    channel: str,
    action: str,
) -> Run:
    """Insert a manual or test run, with the id ``run_id(now)``, within the
    owner's triggers per minute, on the job's locked row, and record the
    event ``action``.

    ``now`` is read once the row lock is held. The race this orders: a
    trigger that waited for a pause's lock, had it read its time before,
    would be scheduled before the pause's ``paused_at`` although made after
    the pause committed, and would wait for the resume instead of starting
    (runs/leases.py RUN_MAY_START)."""
    current = job.locked()
    if current is None:
        raise Job.DoesNotExist("The job was deleted.")
    now = db_now()
    quotas.check_triggers(
        current.owner, job.pk, Run.objects.manual_since(job.pk, now - quotas.TRIGGER_WINDOW), now
    )
    run = Run.for_job(
        job,
        id=run_id(now),
        scheduled_at=now,
        available_at=now,
        kind=kind,
        max_attempts=max_attempts,
    )
    run.save(force_insert=True)
    job.record_event(action, actor=actor, channel=channel, changes={"run": str(run.pk)})
    notify.runs_claimable("trigger")
    return run


@transaction.atomic
def backfill(
    job: Job,
    start: dt.datetime,
    end: dt.datetime,
    *,
    dry_run: bool = False,
    actor=None,
    channel: str = Channel.API,
) -> dict[str, Any]:
    """Every slot in [start, end) without a run becomes a ``backfill`` run.

    Slots that already have a run are left alone (the unique fire key makes
    a repeated backfill harmless). The new runs count against the owner's
    backfill runs per hour (jobs/quotas.py); over it, nothing is written.
    They become available one after another at PUNCTUAL_BACKFILL_RATE per
    second, oldest fire first, rather than all at once: a backfill of an
    ``allow`` job would otherwise send its whole window to the receiver in
    one burst, and take the workers from every other job meanwhile.
    """
    slots = job.schedule.fires_between(start, end, limit=MAX_BACKFILL)
    taken = set(
        Run.objects.filter(job=job, scheduled_at__in=slots).values_list("scheduled_at", flat=True)
    )
    free = [s for s in slots if s not in taken]
    created = 0
    if not dry_run and free:
        now = db_now()
        quotas.spend_backfill(job.owner, len(free), now)
        spread = Run.objects.spread_after(job, now=now, rate=settings.PUNCTUAL_BACKFILL_RATE)
        created = Run.objects.create_for_fires(job, free, kind=RunKind.BACKFILL, spread=spread)
        job.record_event(
            "backfilled",
            actor=actor,
            channel=channel,
            changes={"start": start.isoformat(), "end": end.isoformat(), "created": created},
        )
        notify.runs_claimable("backfill")
    return {"slots": [s.isoformat() for s in free], "created": created}


@transaction.atomic
def soft_delete(job: Job, *, actor=None, channel: str = Channel.API) -> int:
    """Hide the job and cancel its waiting runs; history stays for audit."""
    now = db_now()
    current = job.locked()
    if current is None:
        return 0
    before = changes.snapshot(current, DELETE_FIELDS)
    settle_due_fires(current, now, stopping=Reason.DELETED)
    # Before the row changes: the live jobs count's lock (quotas.lock_live_jobs).
    quotas.lock_live_jobs(current.owner_id)
    current.deleted_at = now
    current.next_fire_at = None
    current.save(update_fields=sorted(DELETE_FIELDS))
    history.record_spans([current.pk], now)
    job.refresh_from_db()
    cancelled = Run.objects.cancel_waiting(job_id=job.pk, reason=Reason.DELETED, now=now)
    job.record_event(
        "deleted",
        actor=actor,
        channel=channel,
        changes={**changes.since(before, current), "cancelled_runs": cancelled},
    )
    return cancelled


@transaction.atomic
def pause_unreadable(job_id, *, problem: str) -> bool:
    """Pause an active job whose schedule cannot be read (a time zone this
    host's tzdata lacks, a cron written around the API's checks), so that one
    bad row never stops the dispatcher. Returns whether the job was paused.

    The row is locked and its state re-checked first, so an owner's pause or
    delete that committed meanwhile is kept, not overwritten.
    """
    now = db_now()
    note = f"paused by the system: its schedule cannot be read: {problem}"
    note = note[: Job._meta.get_field("pause_note").max_length]
    paused = (
        Job.objects.filter(pk=job_id, state=JobState.ACTIVE, deleted_at__isnull=True)
        .select_for_update()
        .first()
    )
    if paused is None:
        return False
    values = {
        "state": JobState.PAUSED,
        "pause_note": note,
        "paused_at": now,
        "resume_at": None,
        "next_fire_at": None,
    }
    before = changes.snapshot(paused, values)
    Job.objects.filter(pk=job_id).update(
        **values,
        paused_by=Channel.SYSTEM,
        system_pause_note=note,
        version=F("version") + 1,
    )
    history.record_spans([job_id], now)
    cancelled = Run.objects.cancel_waiting(job_id=job_id, reason=Reason.PAUSED, now=now)
    paused.record_event(
        "paused",
        channel=Channel.SYSTEM,
        changes={
            **changes.diff({name: (old, values[name]) for name, old in before.items()}),
            "cancelled_runs": cancelled,
        },
    )
    alert_events.record([alert_events.Event(job_id, "paused", detail=note)], now)
    return True


def pause_by_system(job_id, *, note: str, now: dt.datetime) -> bool:
    """The auto-pause (410 Gone, a failure streak), inside the caller's
    transaction: the pause verb on the locked row, for a job that is still
    active and not deleted. An owner's pause, resume or delete that committed
    first is kept. Returns whether the job was paused."""
    current = (
        Job.objects.select_for_update()
        .filter(pk=job_id, state=JobState.ACTIVE, deleted_at__isnull=True)
        .first()
    )
    if current is None:
        return False
    _pause_locked(current, now, note=note, resume_at=None, channel=Channel.SYSTEM)
    alert_events.record([alert_events.Event(current.pk, "paused", detail=note)], now)
    return True


@transaction.atomic
def edit(
    job: Job, values: dict[str, Any], *, actor=None, channel: str = Channel.API
) -> dict[str, tuple[Any, Any]]:
    """Change a job's fields (an API PUT/PATCH, an admin form), on its locked
    row, and record the "updated" event with what changed. Returns ``{field:
    (old, new)}`` for what changed. Sending what is already there changes
    nothing: no new version, no event.

    In one transaction, on the locked row:

    1. The fires the old schedule already made due are planned under the old
       values (settle_due_fires), so an edit never drops them.
    2. A schedule change recomputes ``next_fire_at`` from now.
    3. A target kind change cancels the waiting runs (reason ``target
       changed``): a waiting pull run would otherwise block the new webhook
       runs forever, and they were made for a target that is gone.
    4. The schedule history gets a new span when the schedule changed.
    """
    now = db_now()
    current = job.locked()
    if current is None:
        raise Job.DoesNotExist("The job was deleted.")
    changed = {
        name: (getattr(current, name), value)
        for name, value in values.items()
        if getattr(current, name) != value
    }
    if not changed:
        return {}
    next_fire_before = current.next_fire_at
    if PLANNING_FIELDS.intersection(changed):
        settle_due_fires(current, now)
    fields = set(changed)
    for name, (_old, new) in changed.items():
        setattr(current, name, new)
    if SCHEDULE_FIELDS.intersection(changed) and current.state == JobState.ACTIVE:
        current.next_fire_at = current.compute_next_fire(now)
    if current.next_fire_at != next_fire_before:
        fields.add("next_fire_at")
    current.save(update_fields=sorted(fields))
    history.record_spans([current.pk], now)
    if "target_kind" in changed:
        Run.objects.cancel_waiting(job_id=current.pk, reason=Reason.TARGET_CHANGED, now=now)
    if PLANNING_FIELDS.intersection(changed) and current.state == JobState.ACTIVE:
        # The due fires settled above, or runs that a new overlap policy
        # no longer holds back, may start now.
        notify.runs_claimable("edit")
    job.refresh_from_db()
    job.record_event("updated", actor=actor, channel=channel, changes=changes.diff(changed))
    return changed

"""Per-owner limits (docs/guides/owners.md "Owner limits"): how many live jobs
an owner may have, how short an interval, how many runs their backfills may
create in an hour, and how often each of their jobs may be triggered (or a run
of it retried) in a minute.

Every decision and every refusal's wording is here, so the API and the admin
refuse the same request with the same text. A refusal raises
``core.errors.LimitExceeded`` before anything is written; the API answers it
403 or 429 (core/api_errors.py), the admin shows its message.

The counts come from the database, under a lock, so that two processes
cannot both take the last room: job creation holds the owner's row of live
jobs (``LIVE_JOBS_LOCKED``) and backfill the owner's advisory lock until
their transaction ends, a trigger or a retry holds its job's row.
The limits follow the job's owner, whoever acts; an owner's row in
``OwnerLimits`` replaces the defaults field by field.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from core.errors import LimitExceeded
from jobs.limits import OWNER_LIMITS
from jobs.models import LIVE_JOBS_LOCKED, BackfillUse, OwnerLimits, RetryUse

JOBS = "jobs_per_owner"
MIN_INTERVAL = "min_interval_seconds"
BACKFILL = "backfill_runs_per_hour"
TRIGGERS = "triggers_per_minute"

BACKFILL_WINDOW = dt.timedelta(hours=1)
TRIGGER_WINDOW = dt.timedelta(minutes=1)

# One owner's backfills at a time. Two-key advisory locks live
# apart from partitions.py's one-key lock; two owners whose ids share the
# second key would only wait for each other.
LOCK_OWNER = (
    "SELECT pg_advisory_xact_lock(hashtext('punctual: owner limits'),"
    " (%s::bigint %% 2147483647)::int)"
)

# Read on every create, in raw SQL: through the ORM each cost more to build
# than to run. An owner's overrides, in OWNER_LIMITS's order (NULL: none).
OVERRIDES = (
    f"SELECT {', '.join(OWNER_LIMITS)} FROM {OwnerLimits._meta.db_table} WHERE owner_id = %s"
)


@dataclass(frozen=True)
class Limits:
    """One owner's limits in force: the defaults, with their overrides."""

    jobs_per_owner: int
    min_interval_seconds: int
    backfill_runs_per_hour: int
    triggers_per_minute: int


def limits_for(owner) -> Limits:
    """``owner``'s limits: each override, or else its setting. A superuser's
    jobs have no minimum interval beyond the field's own (1 s)."""
    with connection.cursor() as cur:
        cur.execute(OVERRIDES, [owner.pk])
        row = cur.fetchone()
    return limits_from(owner, row)


def limits_from(owner, overrides: Sequence | None) -> Limits:
    """``owner``'s limits from their overrides as ``OVERRIDES`` reads them
    (None, or all NULL, without a row): for a caller that read them in a
    statement of its own."""
    row = overrides or (None,) * len(OWNER_LIMITS)
    values = {}
    for (name, (setting, _bounds)), override in zip(OWNER_LIMITS.items(), row, strict=True):
        values[name] = getattr(settings, setting) if override is None else override
    if owner.is_superuser:
        values[MIN_INTERVAL] = 1
    return Limits(**values)


def lock_owner(owner_id: int) -> None:
    """Hold ``owner_id``'s limits lock until the transaction ends."""
    with connection.cursor() as cur:
        cur.execute(LOCK_OWNER, [owner_id])


# -- quotas -------------------------------------------------------------------


def interval_refusal(limits: Limits, interval_seconds: int | None) -> str | None:
    """Why ``interval_seconds`` is too short for these limits, or None.

    A form or serializer shows it under the field, as any other bound."""
    least = limits.min_interval_seconds
    if interval_seconds is None or interval_seconds >= least:
        return None
    return (
        f"Must be at least {least:,} seconds: the shortest interval allowed for this owner's"
        f" jobs ({MIN_INTERVAL}). Ask an administrator to lower it."
    )


def new_jobs_refusal(owner, count: int, limits: Limits | None = None) -> LimitExceeded | None:
    """The refusal of ``count`` new jobs that would take ``owner`` past their
    live jobs limit (of ``limits``, read if not given), or None if they fit.

    Takes the owner's lock: call it in the transaction that inserts the jobs
    (``create_jobs``, jobs/creation.py, checks the limit again in its insert,
    under the same lock). The admin's job form calls it to refuse a job
    beside the form's other errors.
    The refusal is returned, not raised, so that the caller raises it after
    leaving its transaction block: nothing was written, and a refusal does
    not break an enclosing transaction (a savepoint-less block's error would).
    """
    live = lock_live_jobs(owner.pk)
    return jobs_refusal(live, count, (limits or limits_for(owner)).jobs_per_owner)


def lock_live_jobs(owner_id: int) -> int:
    """Lock ``owner_id``'s row of live jobs until the transaction ends, and
    return their live jobs count as the last writer of that row committed it.

    A create holds this lock while it inserts. A delete takes it before it
    marks its job deleted: a create that holds the lock and inserts the
    deleted job's name waits for the delete to end, so a delete that then
    waited for the lock (in the count's trigger) would wait for that create:
    a deadlock. Locked first, the delete waits instead before it touches
    its job, and the create finds the name still taken (a 400)."""
    with connection.cursor() as cur:
        cur.execute(LIVE_JOBS_LOCKED, {"owner": owner_id})
        [live] = cur.fetchone()
    return live


def jobs_refusal(live: int, count: int, allowed: int) -> LimitExceeded | None:
    """The refusal of ``count`` new jobs for an owner with ``live`` live jobs
    and a limit of ``allowed``, or None if they fit."""
    if live + count <= allowed:
        return None
    adding = "1 job" if count == 1 else f"{count:,} jobs"
    return LimitExceeded(
        JOBS,
        f"This owner has {live:,} live jobs and may have at most {allowed:,} ({JOBS});"
        f" adding {adding} would pass it. Delete jobs that are no longer needed, or ask an"
        " administrator to raise the limit.",
    )


# -- rates --------------------------------------------------------------------


def check_triggers(owner, job_id, manual: Iterable[dt.datetime], now: dt.datetime) -> None:
    """Refuse a manual run, test delivery or retry of the job ``job_id`` that
    would pass the owner's triggers per minute: the job's manual runs and
    test deliveries (their times, ``manual``) and its retries (``RetryUse``)
    of the last minute share it. The caller holds the job's row lock, and
    read ``manual`` under it."""
    allowed = limits_for(owner).triggers_per_minute
    if allowed == 0:
        raise LimitExceeded(
            TRIGGERS,
            f"This owner's jobs may not be triggered or retried by hand ({TRIGGERS} is 0). Ask"
            " an administrator to raise the limit.",
        )
    retries = RetryUse.objects.filter(job_id=job_id, used_at__gte=now - TRIGGER_WINDOW)
    uses = [(at, 1) for at in [*manual, *retries.values_list("used_at", flat=True)]]
    wait = _wait(uses, 1, allowed, TRIGGER_WINDOW, now)
    if wait is None:
        return
    raise LimitExceeded(
        TRIGGERS,
        f"This job was triggered or retried {len(uses):,} times in the last minute, and may be"
        f" at most {allowed:,} times a minute ({TRIGGERS}). Try again in {wait:,} s.",
        retry_after=wait,
    )


def spend_retry(owner, job_id, manual: Iterable[dt.datetime], now: dt.datetime) -> None:
    """Count an operator's retry of a run of ``job_id`` against the owner's
    triggers per minute (``check_triggers``), or refuse it. The caller holds
    the job's row lock, so two retries cannot both take the last one."""
    RetryUse.objects.filter(job_id=job_id, used_at__lt=now - TRIGGER_WINDOW).delete()
    check_triggers(owner, job_id, manual, now)
    RetryUse.objects.create(job_id=job_id, used_at=now)


def spend_backfill(owner, runs: int, now: dt.datetime) -> None:
    """Count ``runs`` new backfill runs against ``owner``'s hourly limit, or
    refuse them. Takes the owner's lock: call it in the transaction that
    inserts the runs, before it does."""
    if runs == 0:
        return
    lock_owner(owner.pk)
    allowed = limits_for(owner).backfill_runs_per_hour
    recent = BackfillUse.objects.filter(owner_id=owner.pk)
    recent.filter(used_at__lte=now - BACKFILL_WINDOW).delete()
    uses = list(recent.values_list("used_at", "runs"))
    if runs > allowed:
        raise LimitExceeded(
            BACKFILL,
            f"This backfill would create {runs:,} runs, more than this owner's backfills may"
            f" create in an hour ({allowed:,}, {BACKFILL}). Narrow the window.",
        )
    wait = _wait(uses, runs, allowed, BACKFILL_WINDOW, now)
    if wait is not None:
        used = sum(n for _, n in uses)
        raise LimitExceeded(
            BACKFILL,
            f"This backfill would create {runs:,} runs, but this owner's backfills created"
            f" {used:,} in the last hour, of at most {allowed:,} ({BACKFILL})."
            f" Try again in {wait:,} s, or narrow the window.",
            retry_after=wait,
        )
    BackfillUse.objects.create(owner_id=owner.pk, used_at=now, runs=runs)


def _wait(
    uses: list[tuple[dt.datetime, int]],
    wanted: int,
    allowed: int,
    window: dt.timedelta,
    now: dt.datetime,
) -> int | None:
    """None when ``wanted`` more fit beside ``uses`` (time, amount) within
    ``window`` of ``now``; else the whole seconds until enough of the oldest
    uses have left the window (at least 1). ``wanted`` must be at most
    ``allowed``: waiting never makes room for more, and the callers refuse
    that case themselves."""
    if wanted > allowed:
        raise ValueError(f"{wanted} can never fit in {allowed}")
    excess = sum(n for _, n in uses) + wanted - allowed
    if excess <= 0:
        return None
    freed = 0
    for at, amount in sorted(uses):
        freed += amount
        if freed >= excess:
            return max(1, math.ceil((at + window - now).total_seconds()))
    raise AssertionError("excess <= the uses' sum whenever wanted <= allowed")

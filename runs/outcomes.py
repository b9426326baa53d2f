"""Outcomes: write how attempts ended, as guarded, set-based updates
(docs/design/guarantees.md "Fencing", docs/concepts/runs-and-retries.md "Retries";
guarded, batched updates).

``complete()`` writes a batch of attempt outcomes (decided by
``runs/after_attempt.py``) in one transaction, fenced on the lease the
caller held (``runs/leases.py``): a result whose lease was lost is stale, and
is dropped and logged. ``fail_exhausted()`` ends the runs whose last attempt's
lease expired. Both keep the jobs' failure streaks and, in the same
transaction, pause the jobs that must pause (410 Gone, ``pause_after_failures``
reached): a pause is never lost to a crash or a database error between the
completion and the pause, and is never written from a stale copy of the job.

The SQL of this concern is named once, below; each statement says which loop
runs it and which race its guard prevents.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from dataclasses import dataclass, field

from psycopg.types.json import Jsonb

from alerts import events as alert_events
from core.db import db_now, dict_cursor, hot_transaction
from runs import notify, stats
from runs.after_attempt import FAILED, RETRYING, SUCCEEDED, pause_after_streak
from runs.leases import (
    LEASE_HELD,
    MAY_START,
    RECORD_LOST_ATTEMPTS,
    RUN_MAY_START,
    record_lost_attempts,
    window,
)
from runs.models import MAX_RESPONSE_CHARS

log = logging.getLogger("punctual.leases")


@dataclass
class Result:
    """The outcome of one attempt, as ``after_attempt()`` decided it."""

    run_id: uuid.UUID
    job_id: uuid.UUID
    attempt: int
    state: str  # succeeded | retrying | failed
    retry_in: float = 0.0  # seconds until the retry is claimable (retrying only)
    status_code: int | None = None
    error: str = ""  # what went wrong; "" on success
    response: str = ""  # the receiver's answer, success or not: an excerpt
    reason: str = ""
    started_at: dt.datetime | None = None
    duration_ms: int | None = None
    attempt_outcome: str = "succeeded"  # Attempt.Outcome value
    pause_note: str = ""  # not empty: pause the job (e.g. the target answered 410)
    # The run's, when the caller knows it (the claim returned it): it lets
    # COMPLETE look in the days of its batch only (runs/leases.py WINDOW).
    scheduled_at: dt.datetime | None = None


@dataclass
class Completed:
    applied: list[uuid.UUID] = field(default_factory=list)
    stale: list[uuid.UUID] = field(default_factory=list)
    # (job_id, note) for the jobs this batch paused (410, failure streak)
    pauses: list[tuple[uuid.UUID, str]] = field(default_factory=list)


# ---------------------------------------------------------------------------
# SQL
# ---------------------------------------------------------------------------

# Worker complete loop and the pull API's complete, fenced by the one lease
# rule (runs/leases.py LEASE_HELD): a worker whose run was taken over, or whose
# attempt deadline passed, must not overwrite the newer attempt (its row no
# longer matches, so it is reported stale). A retry of a run that may no
# longer start (runs/leases.py RUN_MAY_START: its job was paused or deleted
# meanwhile) becomes cancelled instead, so a pause that raced the delivery
# still stops the job; a manual run made during the pause keeps its retries.
# LOCK_RETRYING_JOBS runs first, so this statement's snapshot shows every
# pause that committed before it.
#
# The batch is one JSON object, each result under its run's id (RESULT), and
# the runs are found by their ids (a list of constants: their key, or a hash
# of them beside the window's scheduled_at), not by a join with the batch.
# Joined, the plan depended on the planner's estimate of the runs in the
# batch's window, which its statistics make one on a busy install (they have
# not seen the newest runs running yet): it then scanned the whole batch again
# for each run it found, the batch's square (117,000 rows compared for 343
# runs in a bench, 80 % of the statement's time, the largest share of
# PostgreSQL's time under overload; tests/integration/test_hot_plans.py "a
# completion and a heartbeat meet each run once"). A result's fields are read
# from the object by the run's id (a binary search of its keys), and the
# attempt rows take theirs from the update's RETURNING.
RESULT = "(%(results)s -> r.id::text)"
# Why a retry may not start (NULL: it may): 'deleted' or 'paused'. A
# subquery, so that the job is read for retries only.
STOPPED = (
    """(SELECT CASE WHEN NOT ("""
    + RUN_MAY_START.format(run="r", job="j")
    + """)
        THEN CASE WHEN j.deleted_at IS NOT NULL THEN 'deleted' ELSE 'paused' END END
    FROM jobs_job AS j WHERE j.id = r.job_id)"""
)
CANCEL = f"CASE WHEN {RESULT} ->> 'state' = 'retrying' THEN {STOPPED} END"
RETRY = f"({RESULT} ->> 'state' = 'retrying' AND {CANCEL} IS NULL)"
COMPLETE = (
    f"""
    WITH done AS (
        UPDATE runs_run AS r SET
            state = coalesce(CASE WHEN {CANCEL} IS NOT NULL THEN 'cancelled' END,
                             {RESULT} ->> 'state'),
            reason = coalesce({CANCEL}, {RESULT} ->> 'reason'),
            available_at = CASE WHEN {RETRY}
                                THEN ({RESULT} ->> 'available_at')::timestamptz END,
            finished_at = CASE WHEN {RETRY} THEN NULL ELSE %(now)s END,
            lease_owner = '',
            lease_until = NULL,
            last_status_code = ({RESULT} ->> 'status_code')::int,
            last_error = {RESULT} ->> 'error',
            last_response = {RESULT} ->> 'response'
        WHERE r.id = ANY(string_to_array(%(ids)s, ',')::uuid[])
          AND r.scheduled_at BETWEEN %(lo)s AND %(hi)s AND"""
    + LEASE_HELD.format(attempt=f"({RESULT} ->> 'attempt')::int")
    + f"""
        RETURNING r.id, r.scheduled_at, r.kind, r.attempt,
                  ({RESULT} ->> 'started_at')::timestamptz AS started_at,
                  {RESULT} ->> 'outcome' AS outcome,
                  ({RESULT} ->> 'duration_ms')::int AS duration_ms,
                  r.last_status_code, r.last_error, r.last_response
    ), attempts AS (
        -- The attempt of each applied result; the unique (run, number) key
        -- turns an attempt recorded twice (a completion retried after a lost
        -- commit acknowledgement) into a no-op.
        INSERT INTO runs_attempt
            (run_id, scheduled_at, number, worker, started_at, finished_at, outcome,
             status_code, duration_ms, error, response)
        SELECT d.id, d.scheduled_at, d.attempt, %(owner)s, d.started_at, %(now)s, d.outcome,
               d.last_status_code, d.duration_ms, left(d.last_error, 500), d.last_response
        FROM done AS d
        ON CONFLICT DO NOTHING
    )
    SELECT id, scheduled_at, kind FROM done
"""
)

# Same transaction as COMPLETE, just before it, when some result would retry:
# a key-share lock on those jobs' rows. The pause and delete verbs
# (runs/job_verbs.py) take the job row FOR UPDATE before they cancel the
# waiting runs, so either the verb committed before this lock was granted,
# and COMPLETE (a later statement, with a later snapshot) sees the job paused
# and cancels the retry; or the verb waits for this transaction, and its
# cancel, a statement that starts after this commit, sees the retry and
# cancels it. Without the lock, a COMPLETE whose snapshot predates the pause
# left a ``retrying`` run that the pause's cancel did not see. KEY SHARE does
# not conflict with JOB_STREAKS's row update, so two completions of one job
# cannot deadlock on it; it does not hold off an automatic pause written by
# another completion either, and cancel_stopped catches that retry.
# Sorted ids: two completions lock shared jobs in the same order.
LOCK_RETRYING_JOBS = """
    SELECT id FROM jobs_job WHERE id = ANY(%(ids)s::uuid[]) ORDER BY id FOR KEY SHARE
"""

# Worker complete loop, the pull API's complete and the dispatcher's
# housekeeping (fail_exhausted). consecutive_failures counts failed runs in a
# row; it is added to in SQL, not written from a value read earlier, so two
# batches that finish runs of one job at once do not lose a failure. Only rows
# that change are written, so the common "succeeded again" case touches no
# job row.
JOB_STREAKS = """
    UPDATE jobs_job AS j SET consecutive_failures =
        CASE WHEN s.reset THEN s.failures ELSE j.consecutive_failures + s.failures END
    FROM unnest(%(ids)s::uuid[], %(resets)s::bool[], %(failures)s::int[])
         AS s(id, reset, failures)
    WHERE j.id = s.id AND NOT (s.reset AND j.consecutive_failures = s.failures)
    RETURNING j.id, j.consecutive_failures, j.pause_after_failures, j.state
"""

# Dispatcher housekeeping: runs that may start (runs/leases.py RUN_MAY_START)
# whose last allowed attempt lost its lease end failed, and the lost attempt
# is recorded (the others, of paused or deleted jobs, are CANCEL_STOPPED's).
# FOR UPDATE re-checks ``lease_until < now`` under the row lock, so a run whose worker completed
# or heartbeated it meanwhile is left alone; SKIP LOCKED lets several
# dispatchers reap at once without waiting on each other (or on a claimer).
FAIL_EXHAUSTED = (
    """
    WITH c AS (
        SELECT r.id, r.scheduled_at FROM runs_run AS r
        WHERE r.state = 'running' AND r.lease_until < %(now)s
          AND r.attempt >= r.max_attempts
          AND EXISTS (SELECT 1 FROM jobs_job AS j WHERE j.id = r.job_id """
    + MAY_START
    + """)
        FOR UPDATE OF r SKIP LOCKED
"""
    + RECORD_LOST_ATTEMPTS
    + """
    UPDATE runs_run AS r SET state = 'failed', reason = %(reason)s, finished_at = %(now)s,
        lease_owner = '', lease_until = NULL, available_at = NULL,
        last_error = 'lease expired on the last attempt'
    FROM c WHERE r.id = c.id AND r.scheduled_at = c.scheduled_at
    RETURNING r.id, r.job_id, r.attempt, r.kind
"""
)

# Dispatcher housekeeping, next to FAIL_EXHAUSTED: the runs a pause or delete
# could not stop, and that may not start (runs/leases.py RUN_MAY_START: not a
# manual run or test delivery made during the pause), end ``cancelled`` with
# the reason ``paused`` or ``deleted``:
# - running runs whose lease expired (their worker died or stalled): the claim
#   no longer takes them over (runs/leases.py), and the lost attempt is
#   recorded ``interrupted``, whatever attempts were left;
# - retrying runs: a worker released at shutdown, or a retry a completion
#   wrote while another completion's automatic pause committed;
# - pending runs of a deleted job (a manual run triggered as it was deleted).
#   A pending run of a paused job stays: the owner backfilled it while the
#   job was paused, and it starts once the job is resumed (or it is a manual
#   run or test delivery made during the pause, which starts at once).
# None of them can have started an attempt meanwhile (the claim takes only
# runs that may start). FOR UPDATE re-checks the run's state and lease under its
# row lock, and FOR KEY SHARE the job's state: a run its worker completed or
# heartbeated, or a job resumed meanwhile, is left alone.
CANCEL_STOPPED = (
    """
    WITH c AS (
        SELECT r.id, r.scheduled_at,
               CASE WHEN j.deleted_at IS NULL THEN 'paused' ELSE 'deleted' END AS reason
        FROM runs_run AS r JOIN jobs_job AS j ON j.id = r.job_id
        WHERE r.state IN ('pending', 'running', 'retrying')
          AND NOT ("""
    + RUN_MAY_START.format(run="r", job="j")
    + """)
          AND (r.state = 'retrying'
               OR (r.state = 'running' AND r.lease_until < %(now)s)
               OR (r.state = 'pending' AND j.deleted_at IS NOT NULL))
        FOR UPDATE OF r SKIP LOCKED FOR KEY SHARE OF j SKIP LOCKED
"""
    + record_lost_attempts(
        "interrupted", "interrupted: the lease expired, and the job was paused or deleted"
    )
    + """
    UPDATE runs_run AS r SET state = 'cancelled', reason = c.reason, finished_at = %(now)s,
        lease_owner = '', lease_until = NULL, available_at = NULL
    FROM c WHERE r.id = c.id AND r.scheduled_at = c.scheduled_at
    RETURNING r.id, r.job_id, r.reason
"""
)


# ---------------------------------------------------------------------------
# complete
# ---------------------------------------------------------------------------


def complete(owner: str, results: list[Result], now: dt.datetime | None = None) -> Completed:
    """Write a batch of attempt outcomes, fenced on owner and attempt.

    1. Update the runs whose lease this owner still holds; the rest are stale.
    2. Record an Attempt row for each applied result.
    3. Update the jobs' failure streaks, and pause the jobs that must pause
       (``pause_note`` set, or ``pause_after_failures`` reached).
    4. Add the applied attempts to the delivery counters behind /metrics (one
       upsert, in this transaction, so they count exactly what committed).
    """
    done = Completed()
    if not results:
        return done
    by_id = {r.run_id: r for r in results}
    retrying_jobs = sorted({r.job_id for r in results if r.state == RETRYING})
    with hot_transaction():
        now = now or db_now()
        with dict_cursor() as cur:
            if retrying_jobs:
                cur.execute(LOCK_RETRYING_JOBS, {"ids": retrying_jobs})
            cur.execute(COMPLETE, complete_params(owner, results, now))
            rows = cur.fetchall()
        applied = {row["id"]: row["scheduled_at"] for row in rows}
        tests = _test_runs(rows)
        done.applied = [r.run_id for r in results if r.run_id in applied]
        done.stale = [r.run_id for r in results if r.run_id not in applied]
        if any(by_id[i].state == RETRYING and by_id[i].retry_in <= 0 for i in done.applied):
            # A retry due at once; later ones are the writer's timers
            # (dispatch/wakeup.py) or the safety poll's.
            notify.runs_claimable("retry")
        done.pauses = _pause(_update_streaks([by_id[i] for i in done.applied], tests), now)
        _record_alert_events([by_id[i] for i in done.applied], tests, now)
        # Last in the transaction: the counter rows are shared by the workers
        # of one shard, so their row locks are held only until the commit.
        stats.record_deliveries([by_id[i] for i in done.applied])
    for run_id in done.stale:
        r = by_id[run_id]
        log.warning(
            "stale completion dropped: the lease was lost",
            extra={"run_id": str(run_id), "job_id": str(r.job_id), "attempt": r.attempt},
        )
    return done


def complete_params(owner: str, results: list[Result], now: dt.datetime) -> dict:
    """COMPLETE's parameters. The batch is one JSON object, a result under
    each run's id, sent typed as jsonb (so that the statement's many reads
    of it do not parse it again each): psycopg builds array parameters
    element by element in Python (eleven arrays were a sixth of a busy
    worker's database thread); the JSON encoder is C. The ids go as one
    string too."""
    batch = {
        str(r.run_id): {
            "attempt": r.attempt,
            "state": r.state,
            "available_at": (now + dt.timedelta(seconds=r.retry_in)).isoformat(),
            "status_code": r.status_code,
            "error": r.error[:2000],
            "reason": r.reason,
            "response": r.response[:MAX_RESPONSE_CHARS],
            "outcome": r.attempt_outcome,
            "started_at": r.started_at.isoformat() if r.started_at else None,
            "duration_ms": r.duration_ms,
        }
        for r in results
    }
    return {
        "now": now,
        "owner": owner,
        "results": Jsonb(batch, dumps=_compact),
        "ids": ",".join(batch),
        **window(r.scheduled_at for r in results),
    }


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _test_runs(rows: list[dict]) -> set[uuid.UUID]:
    """The test deliveries among the rows COMPLETE or FAIL_EXHAUSTED returned."""
    from runs.models import RunKind

    return {row["id"] for row in rows if row["kind"] == RunKind.TEST}


def _update_streaks(results: list[Result], tests: set[uuid.UUID]) -> list[tuple[uuid.UUID, str]]:
    """Apply failure streaks per job; return the jobs that must pause.

    A test delivery (``tests``, run kind ``test``) is outside the streak: it
    neither adds a failure nor resets the count, so testing a target that is
    down never pauses the job. Its 410 Gone still pauses it (``pause_note``):
    the receiver said it wants no more deliveries.
    """
    streaks: dict[uuid.UUID, tuple[bool, int]] = {}
    pauses: list[tuple[uuid.UUID, str]] = []
    for r in results:
        if r.pause_note:
            pauses.append((r.job_id, r.pause_note))
        if r.run_id in tests:
            continue
        reset, failures = streaks.get(r.job_id, (False, 0))
        if r.state == SUCCEEDED:
            reset, failures = True, 0
        elif r.state == FAILED:
            failures += 1
        streaks[r.job_id] = (reset, failures)
    changed = [(job_id, reset, n) for job_id, (reset, n) in streaks.items() if reset or n]
    if not changed:
        return pauses
    with dict_cursor() as cur:
        cur.execute(
            JOB_STREAKS,
            {
                "ids": [c[0] for c in changed],
                "resets": [c[1] for c in changed],
                "failures": [c[2] for c in changed],
            },
        )
        rows = cur.fetchall()
    for row in rows:
        note = pause_after_streak(row["consecutive_failures"], row["pause_after_failures"])
        if note and row["state"] == "active":
            pauses.append((row["id"], note))
    return pauses


def _record_alert_events(results: list[Result], tests: set[uuid.UUID], now: dt.datetime) -> None:
    """The alert events of applied results, in the completion's transaction
    (alerts/events.py): cheap inserts, sent later by a worker's alert loop,
    never here. A test delivery raises none."""
    counted = [r for r in results if r.run_id not in tests]
    alert_events.record(
        [
            alert_events.Event(r.job_id, "failed", detail=r.error)
            for r in counted
            if r.state == FAILED
        ],
        now,
    )
    alert_events.recoveries([r.job_id for r in counted if r.state == SUCCEEDED], now)


# ---------------------------------------------------------------------------
# lease exhausted, pauses
# ---------------------------------------------------------------------------


def fail_exhausted(now: dt.datetime | None = None) -> int:
    """Runs whose last allowed attempt lost its lease end ``failed``."""
    from runs.models import Reason

    with hot_transaction():
        with dict_cursor() as cur:
            cur.execute(FAIL_EXHAUSTED, {"now": now or db_now(), "reason": Reason.LEASE_EXHAUSTED})
            rows = cur.fetchall()
        for row in rows:
            log.warning(
                "run failed: the last attempt's lease expired",
                extra={
                    "run_id": str(row["id"]),
                    "job_id": str(row["job_id"]),
                    "attempt": row["attempt"],
                },
            )
        failed = [
            Result(run_id=row["id"], job_id=row["job_id"], attempt=row["attempt"], state=FAILED)
            for row in rows
        ]
        now = now or db_now()
        tests = _test_runs(rows)
        _pause(_update_streaks(failed, tests), now)
        alert_events.record(
            [
                alert_events.Event(
                    row["job_id"], "failed", detail="lease expired on the last attempt"
                )
                for row in rows
                if row["id"] not in tests
            ],
            now,
        )
    return len(rows)


def cancel_stopped(now: dt.datetime | None = None) -> int:
    """Runs of paused or deleted jobs that nothing else will stop end
    ``cancelled`` (CANCEL_STOPPED). Returns the number of runs cancelled."""
    with hot_transaction(), dict_cursor() as cur:
        cur.execute(CANCEL_STOPPED, {"now": now or db_now()})
        rows = cur.fetchall()
    for row in rows:
        log.warning(
            "run cancelled: its job was paused or deleted",
            extra={"run_id": str(row["id"]), "job_id": str(row["job_id"]), "reason": row["reason"]},
        )
    return len(rows)


def _pause(pauses: list[tuple[uuid.UUID, str]], now: dt.datetime) -> list[tuple[uuid.UUID, str]]:
    """Pause jobs that asked for it (410 Gone, failure streak), inside the
    caller's transaction; returns the jobs paused.

    Each goes through the pause verb on its locked row (job_verbs.
    pause_by_system), only if it is still active and not deleted, so the
    fires already due are recorded, the waiting runs cancelled, the schedule
    history and the event written, exactly as for an owner's pause. Jobs are
    taken in id order, so two completions pausing the same jobs cannot
    deadlock.
    """
    from runs import job_verbs

    notes: dict[uuid.UUID, str] = {}
    for job_id, note in pauses:
        notes.setdefault(job_id, note)  # the first reason wins
    paused = []
    for job_id in sorted(notes):
        if job_verbs.pause_by_system(job_id, note=notes[job_id], now=now):
            log.warning(
                "job paused automatically", extra={"job_id": str(job_id), "note": notes[job_id]}
            )
            paused.append((job_id, notes[job_id]))
    return paused

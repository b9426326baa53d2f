"""Leases: claim, heartbeat, complete and release runs as guarded, set-based
updates (PRODUCT.md §1.3, §1.4; CONVENTIONS.md examples 5, 6 and 8).

Every statement here works on a batch and commits once. Every state change is
guarded on ``state = 'running' AND lease_owner = <me> AND attempt = <n>``:
when that matches nothing, the lease was lost (it expired and another worker
took the run over), so the result is stale and is dropped and logged. That
guard is the fencing that keeps a zombie worker from overwriting a newer
attempt. No row lock is ever held across network I/O: the claim commits before
the delivery starts.

The SQL for PostgreSQL is set-based (``unnest`` arrays, a CTE fence with
``FOR UPDATE SKIP LOCKED``). SQLite, the embedded single-host default, runs the
same decisions row by row inside its IMMEDIATE write lock.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass, field

from django.db import connection, transaction

from core.db import adapt_dt, adapt_uuid, is_postgres, parse_dt, parse_uuid
from runs import job_verbs, stats

log = logging.getLogger("punctual.leases")

# An attempt's deadline is its start + timeout_seconds + this grace. A
# heartbeat never extends a lease past it, so a wedged worker that keeps
# heartbeating still loses the run.
DEADLINE_GRACE_SECONDS = 5


@dataclass
class Claimed:
    run_id: uuid.UUID
    job_id: uuid.UUID
    scheduled_at: dt.datetime
    kind: str
    attempt: int
    max_attempts: int
    lease_until: dt.datetime
    deadline_at: dt.datetime
    job_name: str
    url: str
    payload: dict
    secret_encrypted: str
    previous_secret_encrypted: str
    previous_secret_until: dt.datetime | None
    timeout_seconds: int
    retry_backoff_seconds: int
    attempt_started_at: dt.datetime | None = None


@dataclass
class Result:
    """The outcome of one attempt, as the worker decided it (runs/retry.py)."""

    run_id: uuid.UUID
    job_id: uuid.UUID
    attempt: int
    state: str  # succeeded | retrying | failed
    retry_in: float = 0.0  # seconds until the retry is claimable (retrying only)
    status_code: int | None = None
    error: str = ""
    reason: str = ""
    started_at: dt.datetime | None = None
    duration_ms: int | None = None
    attempt_outcome: str = "succeeded"  # Attempt.Outcome value
    gone: bool = False  # the target answered 410: pause the job


@dataclass
class Completed:
    applied: list[uuid.UUID] = field(default_factory=list)
    stale: list[uuid.UUID] = field(default_factory=list)
    # (job_id, note) for jobs that must pause themselves (410, failure streak)
    pauses: list[tuple[uuid.UUID, str]] = field(default_factory=list)


# ---------------------------------------------------------------------------
# SQL (PostgreSQL)
# ---------------------------------------------------------------------------

_RETURNING = """
    RETURNING r.id, r.job_id, r.scheduled_at, r.kind, r.attempt, r.max_attempts,
              r.lease_until, r.deadline_at, j.name, j.url, j.payload,
              j.secret_encrypted, j.previous_secret_encrypted,
              j.previous_secret_until, j.timeout_seconds, j.retry_backoff_seconds,
              r.attempt_started_at
"""

# Counting the attempt at claim time means a worker that dies mid-delivery has
# still used an attempt: a receiver that kills workers cannot loop forever.
_TAKE = """
    UPDATE runs_run AS r SET
        state = 'running',
        attempt = r.attempt + 1,
        lease_owner = %(owner)s,
        lease_seconds = %(lease)s,
        attempt_started_at = %(now)s,
        deadline_at = %(now)s + make_interval(secs => j.timeout_seconds + %(grace)s),
        lease_until = least(
            %(now)s + make_interval(secs => %(lease)s),
            %(now)s + make_interval(secs => j.timeout_seconds + %(grace)s)),
        started_at = coalesce(r.started_at, %(now)s),
        lag_seconds = coalesce(r.lag_seconds, extract(epoch FROM %(now)s - r.scheduled_at))
    FROM c, jobs_job AS j
    WHERE r.id = c.id AND j.id = r.job_id
"""

# Due waiting runs (uses run_claim_webhook_idx / run_claim_pull_idx). Under
# overlap skip/queue a run waits while another run of its job is running, or
# while an earlier one is still waiting: that is what makes a queued fire start
# only when the one ahead ends, and it keeps two runs of one job out of the
# same batch (the partial unique index run_one_running_per_exclusive_job is
# the backstop). The CTE fence stops the planner from updating more than
# LIMIT rows, and SKIP LOCKED lets claimers take disjoint batches.
CLAIM_WAITING_PG = (
    """
    WITH c AS (
        SELECT r.id FROM runs_run AS r
        WHERE r.state IN ('pending', 'retrying') AND r.target_kind = %(target)s
          AND r.available_at <= %(now)s {scope}
          AND (NOT r.exclusive OR NOT EXISTS (
                SELECT 1 FROM runs_run AS e
                WHERE e.job_id = r.job_id AND e.exclusive AND e.id <> r.id
                  AND (e.state = 'running'
                       OR (e.state IN ('pending', 'retrying')
                           AND (e.scheduled_at, e.id) < (r.scheduled_at, r.id)))))
        ORDER BY r.available_at
        LIMIT %(limit)s
        FOR UPDATE OF r SKIP LOCKED
    )
"""
    + _TAKE
    + _RETURNING
)

# Running runs whose lease expired (their worker died or stalled): taken over
# at once with attempt + 1, and the lost attempt is recorded.
RECLAIM_EXPIRED_PG = (
    """
    WITH c AS (
        SELECT r.id FROM runs_run AS r
        WHERE r.state = 'running' AND r.target_kind = %(target)s
          AND r.lease_until < %(now)s AND r.attempt < r.max_attempts {scope}
        ORDER BY r.lease_until
        LIMIT %(limit)s
        FOR UPDATE OF r SKIP LOCKED
    ), lost AS (
        INSERT INTO runs_attempt
            (run_id, number, worker, started_at, finished_at, outcome, error)
        SELECT r.id, r.attempt, r.lease_owner, r.attempt_started_at, %(now)s,
               'lease_expired', 'lease expired: the worker stopped heartbeating'
        FROM runs_run AS r JOIN c ON c.id = r.id
        ON CONFLICT DO NOTHING
    )
"""
    + _TAKE
    + _RETURNING
)

PULL_SCOPE = (
    "AND r.job_id IN (SELECT id FROM jobs_job WHERE owner_id = %(owner_id)s"
    " AND deleted_at IS NULL {job})"
)

# One statement for every lease the process holds. Never past the deadline;
# an already-expired lease is not revived (someone may be taking it over).
HEARTBEAT_PG = """
    UPDATE runs_run AS r SET lease_until = least(
        %(now)s + make_interval(secs => coalesce(%(lease)s, r.lease_seconds)), r.deadline_at)
    FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS h(id, attempt)
    WHERE r.id = h.id AND r.attempt = h.attempt
      AND r.state = 'running' AND r.lease_owner = %(owner)s AND r.lease_until >= %(now)s
    RETURNING r.id, r.lease_until
"""

# Guarded on owner and attempt: a worker whose lease was taken over must not
# overwrite the newer attempt. A retry of a job paused or deleted meanwhile
# becomes cancelled instead.
COMPLETE_PG = """
    WITH v AS (
        SELECT * FROM unnest(
            %(ids)s::uuid[], %(attempts)s::int[], %(states)s::text[],
            %(available)s::timestamptz[], %(codes)s::int[], %(errors)s::text[],
            %(reasons)s::text[]
        ) AS v(id, attempt, state, available_at, status_code, error, reason)
    ), w AS (
        SELECT v.*, (v.state = 'retrying'
                     AND (j.state <> 'active' OR j.deleted_at IS NOT NULL)) AS cancel,
               j.deleted_at IS NOT NULL AS deleted
        FROM v JOIN runs_run AS r0 ON r0.id = v.id JOIN jobs_job AS j ON j.id = r0.job_id
    )
    UPDATE runs_run AS r SET
        state = CASE WHEN w.cancel THEN 'cancelled' ELSE w.state END,
        reason = CASE WHEN w.cancel THEN (CASE WHEN w.deleted THEN 'deleted' ELSE 'paused' END)
                      ELSE w.reason END,
        available_at = CASE WHEN w.state = 'retrying' AND NOT w.cancel THEN w.available_at END,
        finished_at = CASE WHEN w.state = 'retrying' AND NOT w.cancel THEN NULL
                           ELSE %(now)s END,
        lease_owner = '',
        lease_until = NULL,
        last_status_code = w.status_code,
        last_error = w.error
    FROM w
    WHERE r.id = w.id AND r.state = 'running'
      AND r.lease_owner = %(owner)s AND r.attempt = w.attempt
    RETURNING r.id
"""

INSERT_ATTEMPTS_PG = """
    INSERT INTO runs_attempt
        (run_id, number, worker, started_at, finished_at, outcome, status_code,
         duration_ms, error)
    SELECT a.run_id, a.number, %(owner)s, a.started_at, %(now)s, a.outcome,
           a.status_code, a.duration_ms, a.error
    FROM unnest(%(ids)s::uuid[], %(numbers)s::int[], %(started)s::timestamptz[],
                %(outcomes)s::text[], %(codes)s::int[], %(durations)s::int[],
                %(errors)s::text[])
         AS a(run_id, number, started_at, outcome, status_code, duration_ms, error)
    ON CONFLICT DO NOTHING
"""

# consecutive_failures counts failed runs in a row; only rows that change are
# written, so the common "succeeded again" case touches no job row.
JOB_STREAKS_PG = """
    UPDATE jobs_job AS j SET consecutive_failures =
        CASE WHEN s.reset THEN s.failures ELSE j.consecutive_failures + s.failures END
    FROM unnest(%(ids)s::uuid[], %(resets)s::bool[], %(failures)s::int[])
         AS s(id, reset, failures)
    WHERE j.id = s.id AND NOT (s.reset AND j.consecutive_failures = s.failures)
    RETURNING j.id, j.consecutive_failures, j.pause_after_failures, j.state
"""

# Give runs back without counting the attempt (graceful shutdown).
RELEASE_PG = """
    UPDATE runs_run AS r SET state = 'retrying', available_at = %(now)s,
        max_attempts = r.max_attempts + 1, lease_owner = '', lease_until = NULL
    FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS h(id, attempt)
    WHERE r.id = h.id AND r.attempt = h.attempt
      AND r.state = 'running' AND r.lease_owner = %(owner)s
"""


def db_now() -> dt.datetime:
    from core.db import db_now as _now

    return _now()


def _claimed_from_row(row) -> Claimed:
    payload = row[10]
    if isinstance(payload, str):
        import json

        payload = json.loads(payload)
    return Claimed(
        run_id=parse_uuid(row[0]),
        job_id=parse_uuid(row[1]),
        scheduled_at=parse_dt(row[2]),
        kind=row[3],
        attempt=row[4],
        max_attempts=row[5],
        lease_until=parse_dt(row[6]),
        deadline_at=parse_dt(row[7]),
        job_name=row[8],
        url=row[9],
        payload=payload,
        secret_encrypted=row[11],
        previous_secret_encrypted=row[12],
        previous_secret_until=parse_dt(row[13]),
        timeout_seconds=row[14],
        retry_backoff_seconds=row[15],
        attempt_started_at=parse_dt(row[16]),
    )


# ---------------------------------------------------------------------------
# claim
# ---------------------------------------------------------------------------


def claim(
    owner: str,
    *,
    limit: int,
    lease_seconds: int,
    target_kind: str = "webhook",
    job_owner_id: int | None = None,
    job_id: uuid.UUID | None = None,
    now: dt.datetime | None = None,
) -> list[Claimed]:
    """Take up to ``limit`` runs: expired leases first, then due waiting runs.

    ``job_owner_id`` (and optionally ``job_id``) scopes a pull worker's claim
    to its owner's own jobs.
    """
    with transaction.atomic():
        now = now or db_now()
        if is_postgres():
            claimed = _claim_pg(owner, limit, lease_seconds, target_kind, job_owner_id, job_id, now)
        else:
            claimed = _claim_sqlite(
                owner, limit, lease_seconds, target_kind, job_owner_id, job_id, now
            )
    return claimed


def _claim_pg(owner, limit, lease_seconds, target_kind, job_owner_id, job_id, now):
    params = {
        "owner": owner,
        "lease": lease_seconds,
        "grace": DEADLINE_GRACE_SECONDS,
        "now": now,
        "target": target_kind,
        "limit": limit,
        "owner_id": job_owner_id,
        "job_id": job_id,
    }
    scope = ""
    if job_owner_id is not None:
        scope = PULL_SCOPE.format(job="AND id = %(job_id)s" if job_id else "")
    claimed: list[Claimed] = []
    with connection.cursor() as cur:
        cur.execute(RECLAIM_EXPIRED_PG.format(scope=scope), params)
        claimed += [_claimed_from_row(r) for r in cur.fetchall()]
        if len(claimed) < limit:
            params["limit"] = limit - len(claimed)
            cur.execute(CLAIM_WAITING_PG.format(scope=scope), params)
            claimed += [_claimed_from_row(r) for r in cur.fetchall()]
    return claimed


_JOB_COLUMNS_SQLITE = """
    j.name, j.url, j.payload, j.secret_encrypted, j.previous_secret_encrypted,
    j.previous_secret_until, j.timeout_seconds, j.retry_backoff_seconds, r.attempt_started_at
"""


def _claim_sqlite(owner, limit, lease_seconds, target_kind, job_owner_id, job_id, now):
    scope, scope_params = "", []
    if job_owner_id is not None:
        scope = "AND j.owner_id = %s AND j.deleted_at IS NULL"
        scope_params = [job_owner_id]
        if job_id:
            scope += " AND j.id = %s"
            scope_params.append(adapt_uuid(job_id))
    n = adapt_dt(now)
    with connection.cursor() as cur:
        cur.execute(
            f"""SELECT r.id, r.attempt, r.lease_owner, r.attempt_started_at, j.timeout_seconds
                FROM runs_run r JOIN jobs_job j ON j.id = r.job_id
                WHERE r.state = 'running' AND r.target_kind = %s AND r.lease_until < %s
                  AND r.attempt < r.max_attempts {scope}
                ORDER BY r.lease_until LIMIT %s""",
            [target_kind, n, *scope_params, limit],
        )
        expired = cur.fetchall()
        for run_id, attempt, prev_owner, started, _ in expired:
            cur.execute(
                """INSERT INTO runs_attempt (run_id, number, worker, started_at, finished_at,
                       outcome, error) VALUES (%s, %s, %s, %s, %s, 'lease_expired',
                       'lease expired: the worker stopped heartbeating')
                   ON CONFLICT DO NOTHING""",
                [run_id, attempt, prev_owner, started, n],
            )
        cur.execute(
            f"""SELECT r.id, j.timeout_seconds FROM runs_run r JOIN jobs_job j ON j.id = r.job_id
                WHERE r.state IN ('pending', 'retrying') AND r.target_kind = %s
                  AND r.available_at <= %s {scope}
                  AND (NOT r.exclusive OR NOT EXISTS (
                        SELECT 1 FROM runs_run e
                        WHERE e.job_id = r.job_id AND e.exclusive AND e.id <> r.id
                          AND (e.state = 'running'
                               OR (e.state IN ('pending', 'retrying')
                                   AND (e.scheduled_at, e.id) < (r.scheduled_at, r.id)))))
                ORDER BY r.available_at LIMIT %s""",
            [target_kind, n, *scope_params, max(0, limit - len(expired))],
        )
        chosen = [(r[0], r[4]) for r in expired] + cur.fetchall()
        claimed = []
        for run_id, timeout in chosen:
            deadline = now + dt.timedelta(seconds=timeout + DEADLINE_GRACE_SECONDS)
            lease_until = min(now + dt.timedelta(seconds=lease_seconds), deadline)
            cur.execute("SELECT scheduled_at FROM runs_run WHERE id = %s", [run_id])
            lag = (now - parse_dt(cur.fetchone()[0])).total_seconds()
            cur.execute(
                """UPDATE runs_run SET state = 'running', attempt = attempt + 1,
                       lease_owner = %s, lease_seconds = %s, attempt_started_at = %s,
                       deadline_at = %s, lease_until = %s,
                       started_at = coalesce(started_at, %s),
                       lag_seconds = coalesce(lag_seconds, %s)
                   WHERE id = %s""",
                [
                    owner,
                    lease_seconds,
                    n,
                    adapt_dt(deadline),
                    adapt_dt(lease_until),
                    n,
                    lag,
                    run_id,
                ],
            )
            cur.execute(
                f"""SELECT r.id, r.job_id, r.scheduled_at, r.kind, r.attempt, r.max_attempts,
                           r.lease_until, r.deadline_at, {_JOB_COLUMNS_SQLITE}
                    FROM runs_run r JOIN jobs_job j ON j.id = r.job_id WHERE r.id = %s""",
                [run_id],
            )
            claimed.append(_claimed_from_row(cur.fetchone()))
    return claimed


# ---------------------------------------------------------------------------
# heartbeat, release
# ---------------------------------------------------------------------------


def heartbeat(
    owner: str,
    held: list[tuple[uuid.UUID, int]],
    *,
    lease_seconds: int | None = None,
    now: dt.datetime | None = None,
) -> dict[uuid.UUID, dt.datetime]:
    """Extend every lease in ``held`` ((run_id, attempt) pairs) in one statement.

    Returns the new ``lease_until`` of each lease still held; a pair missing
    from the answer was lost.
    """
    if not held:
        return {}
    with transaction.atomic():
        now = now or db_now()
        with connection.cursor() as cur:
            if is_postgres():
                cur.execute(
                    HEARTBEAT_PG,
                    {
                        "now": now,
                        "lease": lease_seconds,
                        "owner": owner,
                        "ids": [h[0] for h in held],
                        "attempts": [h[1] for h in held],
                    },
                )
                return {parse_uuid(r[0]): parse_dt(r[1]) for r in cur.fetchall()}
            kept = {}
            for run_id, attempt in held:
                cur.execute(
                    "SELECT lease_seconds, deadline_at FROM runs_run WHERE id = %s"
                    " AND attempt = %s AND state = 'running' AND lease_owner = %s"
                    " AND lease_until >= %s",
                    [adapt_uuid(run_id), attempt, owner, adapt_dt(now)],
                )
                row = cur.fetchone()
                if row is None:
                    continue
                until = min(now + dt.timedelta(seconds=lease_seconds or row[0]), parse_dt(row[1]))
                cur.execute(
                    "UPDATE runs_run SET lease_until = %s WHERE id = %s",
                    [adapt_dt(until), adapt_uuid(run_id)],
                )
                kept[run_id] = until
            return kept


def release(owner: str, held: list[tuple[uuid.UUID, int]], now: dt.datetime | None = None) -> int:
    """Give runs back at shutdown, claimable at once; the attempt is not counted."""
    if not held:
        return 0
    with transaction.atomic():
        now = now or db_now()
        with connection.cursor() as cur:
            if is_postgres():
                cur.execute(
                    RELEASE_PG,
                    {
                        "now": now,
                        "owner": owner,
                        "ids": [h[0] for h in held],
                        "attempts": [h[1] for h in held],
                    },
                )
                return cur.rowcount
            n = 0
            for run_id, attempt in held:
                cur.execute(
                    "UPDATE runs_run SET state = 'retrying', available_at = %s,"
                    " max_attempts = max_attempts + 1, lease_owner = '', lease_until = NULL"
                    " WHERE id = %s AND attempt = %s AND state = 'running' AND lease_owner = %s",
                    [adapt_dt(now), adapt_uuid(run_id), attempt, owner],
                )
                n += cur.rowcount
            return n


# ---------------------------------------------------------------------------
# complete
# ---------------------------------------------------------------------------


def complete(owner: str, results: list[Result], now: dt.datetime | None = None) -> Completed:
    """Write a batch of attempt outcomes, fenced on owner and attempt.

    1. Update the runs whose lease this owner still holds; the rest are stale.
    2. Record an Attempt row for each applied result.
    3. Update the jobs' failure streaks, and list the jobs that must pause
       (a 410 Gone, or ``pause_after_failures`` reached).
    4. Add the applied attempts to the delivery counters behind /metrics (one
       upsert, in this transaction, so they count exactly what committed).
    """
    done = Completed()
    if not results:
        return done
    with transaction.atomic():
        now = now or db_now()
        if is_postgres():
            applied = _complete_pg(owner, results, now)
        else:
            applied = _complete_sqlite(owner, results, now)
        by_id = {r.run_id: r for r in results}
        done.applied = [r.run_id for r in results if r.run_id in applied]
        done.stale = [r.run_id for r in results if r.run_id not in applied]
        _insert_attempts(owner, [by_id[i] for i in done.applied], now)
        done.pauses = _update_streaks([by_id[i] for i in done.applied])
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


def _complete_pg(owner: str, results: list[Result], now: dt.datetime) -> set[uuid.UUID]:
    with connection.cursor() as cur:
        cur.execute(
            COMPLETE_PG,
            {
                "now": now,
                "owner": owner,
                "ids": [r.run_id for r in results],
                "attempts": [r.attempt for r in results],
                "states": [r.state for r in results],
                "available": [now + dt.timedelta(seconds=r.retry_in) for r in results],
                "codes": [r.status_code for r in results],
                "errors": [r.error[:2000] for r in results],
                "reasons": [r.reason for r in results],
            },
        )
        return {parse_uuid(row[0]) for row in cur.fetchall()}


def _complete_sqlite(owner: str, results: list[Result], now: dt.datetime) -> set[uuid.UUID]:
    applied = set()
    n = adapt_dt(now)
    with connection.cursor() as cur:
        for r in results:
            cur.execute(
                "SELECT j.state, j.deleted_at FROM runs_run x JOIN jobs_job j ON j.id = x.job_id"
                " WHERE x.id = %s AND x.state = 'running' AND x.lease_owner = %s"
                " AND x.attempt = %s",
                [adapt_uuid(r.run_id), owner, r.attempt],
            )
            row = cur.fetchone()
            if row is None:
                continue
            state, reason, available, finished = r.state, r.reason, None, n
            if r.state == "retrying":
                if row[0] != "active" or row[1] is not None:
                    state, reason = "cancelled", "deleted" if row[1] else "paused"
                else:
                    available = adapt_dt(now + dt.timedelta(seconds=r.retry_in))
                    finished = None
            cur.execute(
                "UPDATE runs_run SET state = %s, reason = %s, available_at = %s,"
                " finished_at = %s, lease_owner = '', lease_until = NULL,"
                " last_status_code = %s, last_error = %s WHERE id = %s",
                [
                    state,
                    reason,
                    available,
                    finished,
                    r.status_code,
                    r.error[:2000],
                    adapt_uuid(r.run_id),
                ],
            )
            applied.add(r.run_id)
    return applied


def _insert_attempts(owner: str, results: list[Result], now: dt.datetime) -> None:
    if not results:
        return
    with connection.cursor() as cur:
        if is_postgres():
            cur.execute(
                INSERT_ATTEMPTS_PG,
                {
                    "owner": owner,
                    "now": now,
                    "ids": [r.run_id for r in results],
                    "numbers": [r.attempt for r in results],
                    "started": [r.started_at for r in results],
                    "outcomes": [r.attempt_outcome for r in results],
                    "codes": [r.status_code for r in results],
                    "durations": [r.duration_ms for r in results],
                    "errors": [r.error[:500] for r in results],
                },
            )
            return
        cur.executemany(
            "INSERT INTO runs_attempt (run_id, number, worker, started_at, finished_at,"
            " outcome, status_code, duration_ms, error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            [
                (
                    adapt_uuid(r.run_id),
                    r.attempt,
                    owner,
                    adapt_dt(r.started_at),
                    adapt_dt(now),
                    r.attempt_outcome,
                    r.status_code,
                    r.duration_ms,
                    r.error[:500],
                )
                for r in results
            ],
        )


def _update_streaks(results: list[Result]) -> list[tuple[uuid.UUID, str]]:
    """Apply failure streaks per job; return the jobs that must pause."""
    streaks: dict[uuid.UUID, list] = {}
    pauses: list[tuple[uuid.UUID, str]] = []
    for r in results:
        reset, failures = streaks.get(r.job_id, [False, 0])
        if r.state == "succeeded":
            reset, failures = True, 0
        elif r.state == "failed":
            failures += 1
        streaks[r.job_id] = [reset, failures]
        if r.gone:
            pauses.append((r.job_id, "Paused automatically: the target answered 410 Gone."))
    changed = [(job_id, s[0], s[1]) for job_id, s in streaks.items() if s[0] or s[1]]
    if not changed:
        return pauses
    with connection.cursor() as cur:
        if is_postgres():
            cur.execute(
                JOB_STREAKS_PG,
                {
                    "ids": [c[0] for c in changed],
                    "resets": [c[1] for c in changed],
                    "failures": [c[2] for c in changed],
                },
            )
            rows = cur.fetchall()
        else:
            rows = []
            for job_id, reset, failures in changed:
                expr = "%s" if reset else "consecutive_failures + %s"
                cur.execute(
                    f"UPDATE jobs_job SET consecutive_failures = {expr} WHERE id = %s"
                    " RETURNING id, consecutive_failures, pause_after_failures, state",
                    [failures, adapt_uuid(job_id)],
                )
                rows += cur.fetchall()
    for job_id, streak, limit, state in rows:
        if limit and streak >= limit and state == "active":
            pauses.append(
                (
                    parse_uuid(job_id),
                    f"Paused automatically after {streak} consecutive failed runs.",
                )
            )
    return pauses


def fail_exhausted(now: dt.datetime | None = None) -> int:
    """Runs whose last allowed attempt lost its lease end ``failed``."""
    from runs.models import Reason

    with transaction.atomic():
        now = now or db_now()
        n = adapt_dt(now)
        with connection.cursor() as cur:
            if is_postgres():
                cur.execute(
                    "SELECT id, job_id, attempt FROM runs_run WHERE state = 'running'"
                    " AND lease_until < %s AND attempt >= max_attempts FOR UPDATE SKIP LOCKED",
                    [n],
                )
            else:
                cur.execute(
                    "SELECT id, job_id, attempt FROM runs_run WHERE state = 'running'"
                    " AND lease_until < %s AND attempt >= max_attempts",
                    [n],
                )
            rows = cur.fetchall()
            ids = [row[0] for row in rows]
            if not ids:
                return 0
            marks = ", ".join(["%s"] * len(ids))
            cur.execute(
                "INSERT INTO runs_attempt (run_id, number, worker, started_at, finished_at,"
                " outcome, error) SELECT id, attempt, lease_owner, attempt_started_at, %s,"
                " 'lease_expired', 'lease expired: the worker stopped heartbeating'"
                f" FROM runs_run WHERE id IN ({marks}) ON CONFLICT DO NOTHING",
                [n, *ids],
            )
            cur.execute(
                "UPDATE runs_run SET state = 'failed', reason = %s, finished_at = %s,"
                " lease_owner = '', lease_until = NULL, available_at = NULL,"
                " last_error = 'lease expired on the last attempt'"
                f" WHERE id IN ({marks})",
                [Reason.LEASE_EXHAUSTED, n, *ids],
            )
            for run_id, job_id, attempt in rows:
                log.warning(
                    "run failed: the last attempt's lease expired",
                    extra={"run_id": str(run_id), "job_id": str(job_id), "attempt": attempt},
                )
        failed = [
            Result(run_id=parse_uuid(r[0]), job_id=parse_uuid(r[1]), attempt=r[2], state="failed")
            for r in rows
        ]
        pauses = _update_streaks(failed)
    apply_pauses(pauses)
    return len(ids)


def apply_pauses(pauses: list[tuple[uuid.UUID, str]]) -> None:
    """Pause jobs that asked for it (410 Gone, failure streak), via the domain verb."""
    from jobs.models import Channel, Job

    for job_id, note in pauses:
        job = Job.objects.live().filter(pk=job_id, state="active").first()
        if job is not None:
            job_verbs.pause(job, note=note, channel=Channel.SYSTEM)
            log.warning("job paused automatically", extra={"job_id": str(job_id), "note": note})

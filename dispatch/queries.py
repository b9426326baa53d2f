"""The dispatcher's SQL, in one place (CONVENTIONS.md example 8).

The ORM stays off this path: a tick locks up to ``batch_size`` due jobs, and
writes all their runs and next fires in one statement, one commit per batch.
PostgreSQL gets set-based SQL over ``unnest`` arrays; SQLite (the embedded,
single-host default) gets the same logic with ``executemany``, and relies on its
IMMEDIATE write lock instead of row locks.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django.db import connection

from core.db import adapt_dt, adapt_uuid, is_postgres, parse_dt, parse_uuid
from core.db import db_now as _db_now
from dispatch.planning import DueJob

_DUE_COLUMNS = """
    id, cron, interval_seconds, timezone, start_at, created_at, next_fire_at,
    misfire_policy, max_catchup, misfire_grace_seconds, overlap_policy,
    jitter_seconds, max_attempts, target_kind
"""

# Uses job_due_idx. SKIP LOCKED lets several dispatchers share the due set:
# each takes a disjoint batch, and none waits on another's locks.
LOCK_DUE_JOBS_PG = f"""
    SELECT {_DUE_COLUMNS}
    FROM jobs_job
    WHERE state = 'active' AND next_fire_at <= %(now)s {{shard}}
    ORDER BY next_fire_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
"""
SHARD_FILTER_PG = "AND mod(hashtext(id::text) & 2147483647, %(shards)s) = %(shard)s"

LOCK_DUE_JOBS_SQLITE = f"""
    SELECT {_DUE_COLUMNS}
    FROM jobs_job
    WHERE state = 'active' AND next_fire_at <= %(now)s
    ORDER BY next_fire_at
    LIMIT %(limit)s
"""

ACTIVE_COUNTS_PG = """
    SELECT job_id, count(*) FROM runs_run
    WHERE job_id = ANY(%s::uuid[]) AND state IN ('pending', 'running', 'retrying')
    GROUP BY job_id
"""

# Insert the batch's runs and advance the jobs in one statement. ON CONFLICT
# makes a fire that another dispatcher (or a crashed earlier tick that did
# commit) already inserted a no-op: the unique key is the guarantee, not this
# code.
INSERT_RUNS_AND_ADVANCE_PG = """
    WITH ins AS (
        INSERT INTO runs_run (
            id, job_id, scheduled_at, kind, state, reason, attempt, max_attempts,
            available_at, lease_owner, created_at, finished_at, last_error,
            target_kind, exclusive
        )
        SELECT gen_random_uuid(), r.job_id, r.scheduled_at, r.kind, r.state, r.reason, 0,
               r.max_attempts, r.available_at, '', %(now)s, r.finished_at, '',
               r.target_kind, r.exclusive
        FROM unnest(
            %(job_ids)s::uuid[], %(scheduled)s::timestamptz[], %(kinds)s::text[],
            %(states)s::text[], %(reasons)s::text[], %(max_attempts)s::int[],
            %(available)s::timestamptz[], %(finished)s::timestamptz[],
            %(targets)s::text[], %(exclusive)s::bool[]
        ) AS r(job_id, scheduled_at, kind, state, reason, max_attempts,
               available_at, finished_at, target_kind, exclusive)
        ON CONFLICT (job_id, scheduled_at) DO NOTHING
        RETURNING state
    ), adv AS (
        UPDATE jobs_job AS j SET next_fire_at = a.nxt
        FROM unnest(%(adv_ids)s::uuid[], %(adv_next)s::timestamptz[]) AS a(id, nxt)
        WHERE j.id = a.id
    )
    SELECT state, count(*) FROM ins GROUP BY state
"""

# The fast path, entirely in SQL, for the commonest due job: an interval job
# without jitter whose one due fire is within its grace. Lock, insert (with the
# overlap policy applied from run_active_idx) and advance in one statement;
# everything else (cron, several due fires, misfires, jitter) is left due for
# the planned path in Python. Measured on PostgreSQL this is what makes the
# dispatcher's cost track the due work (PERFORMANCE.md).
DISPATCH_SIMPLE_INTERVALS_PG = """
    WITH due AS (
        SELECT id, next_fire_at, interval_seconds, overlap_policy, max_attempts, target_kind
        FROM jobs_job
        WHERE state = 'active' AND next_fire_at <= %(now)s {shard}
          AND interval_seconds IS NOT NULL AND jitter_seconds = 0
          AND next_fire_at + make_interval(secs => interval_seconds) > %(now)s
          AND next_fire_at >= %(now)s - make_interval(secs => misfire_grace_seconds)
        ORDER BY next_fire_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ), planned AS MATERIALIZED (
        SELECT due.*, CASE
            WHEN overlap_policy = 'allow' THEN 'pending'
            WHEN (SELECT count(*) FROM runs_run AS a
                  WHERE a.job_id = due.id AND a.state IN ('pending', 'running', 'retrying'))
                 >= CASE WHEN overlap_policy = 'queue' THEN 2 ELSE 1 END THEN 'skipped'
            ELSE 'pending' END AS state
        FROM due
    ), ins AS (
        INSERT INTO runs_run (
            id, job_id, scheduled_at, kind, state, reason, attempt, max_attempts,
            available_at, lease_owner, created_at, finished_at, last_error,
            target_kind, exclusive
        )
        SELECT gen_random_uuid(), p.id, p.next_fire_at, 'scheduled', p.state,
               CASE WHEN p.state = 'skipped' THEN 'overlap' ELSE '' END, 0, p.max_attempts,
               CASE WHEN p.state = 'pending' THEN p.next_fire_at END, '', %(now)s,
               CASE WHEN p.state = 'skipped' THEN %(now)s END, '',
               p.target_kind, p.overlap_policy <> 'allow'
        FROM planned AS p
        ON CONFLICT (job_id, scheduled_at) DO NOTHING
        RETURNING state
    ), adv AS (
        UPDATE jobs_job AS j
        SET next_fire_at = due.next_fire_at + make_interval(secs => due.interval_seconds)
        FROM due WHERE j.id = due.id
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM adv), state, count(*) FROM ins GROUP BY state
"""

INSERT_RUN_SQLITE = """
    INSERT INTO runs_run (
        id, job_id, scheduled_at, kind, state, reason, attempt, max_attempts,
        available_at, lease_owner, created_at, finished_at, last_error,
        target_kind, exclusive
    ) VALUES (%s, %s, %s, %s, %s, %s, 0, %s, %s, '', %s, %s, '', %s, %s)
    ON CONFLICT (job_id, scheduled_at) DO NOTHING
"""
ADVANCE_JOB_SQLITE = "UPDATE jobs_job SET next_fire_at = %s WHERE id = %s"

EARLIEST_NEXT_FIRE = "SELECT min(next_fire_at) FROM jobs_job WHERE state = 'active'"
# One round trip for the loop's "how long may I sleep?" (uses job_due_idx).
SECONDS_TO_EARLIEST_PG = """
    SELECT extract(epoch FROM min(next_fire_at) - statement_timestamp())
    FROM jobs_job WHERE state = 'active'
"""


def db_now() -> dt.datetime:
    """The database clock; each tick reads it once and passes it along, so every
    comparison in the tick uses the same instant."""
    return _db_now()


def lock_due_jobs(
    now: dt.datetime, limit: int, shard: tuple[int, int] | None = None
) -> list[DueJob]:
    params = {"now": adapt_dt(now), "limit": limit}
    with connection.cursor() as cur:
        if is_postgres():
            shard_sql = ""
            if shard:
                shard_sql = SHARD_FILTER_PG
                params.update(shard=shard[0], shards=shard[1])
            cur.execute(LOCK_DUE_JOBS_PG.format(shard=shard_sql), params)
        else:
            cur.execute(LOCK_DUE_JOBS_SQLITE, params)
        rows = cur.fetchall()
    jobs = []
    for r in rows:
        jobs.append(
            DueJob(
                id=parse_uuid(r[0]),
                cron=r[1],
                interval_seconds=r[2],
                timezone=r[3],
                start_at=parse_dt(r[4]),
                created_at=parse_dt(r[5]),
                next_fire_at=parse_dt(r[6]),
                misfire_policy=r[7],
                max_catchup=r[8],
                misfire_grace_seconds=r[9],
                overlap_policy=r[10],
                jitter_seconds=r[11],
                max_attempts=r[12],
                target_kind=r[13],
            )
        )
    if shard and not is_postgres():
        jobs = [j for j in jobs if j.id.int % shard[1] == shard[0]]
    return jobs


def dispatch_simple_intervals(
    now: dt.datetime, limit: int, shard: tuple[int, int] | None = None
) -> tuple[int, dict[str, int]]:
    """The SQL fast path (PostgreSQL only): returns (jobs advanced, runs by state)."""
    params = {"now": now, "limit": limit}
    shard_sql = ""
    if shard:
        shard_sql = SHARD_FILTER_PG
        params.update(shard=shard[0], shards=shard[1])
    with connection.cursor() as cur:
        cur.execute(DISPATCH_SIMPLE_INTERVALS_PG.format(shard=shard_sql), params)
        rows = cur.fetchall()
    if not rows:
        return 0, {}
    return rows[0][0], {state: n for _, state, n in rows}


def active_counts(job_ids: Sequence) -> dict:
    """Runs pending, running or retrying per job (uses run_active_idx)."""
    if not job_ids:
        return {}
    with connection.cursor() as cur:
        if is_postgres():
            cur.execute(ACTIVE_COUNTS_PG, [list(job_ids)])
        else:
            marks = ", ".join(["%s"] * len(job_ids))
            cur.execute(
                "SELECT job_id, count(*) FROM runs_run WHERE job_id IN (" + marks + ")"
                " AND state IN ('pending', 'running', 'retrying') GROUP BY job_id",
                [adapt_uuid(j) for j in job_ids],
            )
        return {parse_uuid(job_id): n for job_id, n in cur.fetchall()}


def insert_runs_and_advance(
    now: dt.datetime, runs: list[tuple], advances: list[tuple]
) -> dict[str, int]:
    """Write a tick's runs and next fires. Returns inserted runs by state.

    ``runs`` rows: (job_id, scheduled_at, kind, state, reason, max_attempts,
    available_at, finished_at, target_kind, exclusive).
    ``advances`` rows: (job_id, next_fire_at).
    """
    if is_postgres():
        cols = list(zip(*runs, strict=True)) if runs else [[]] * 10
        params = {
            "now": now,
            "job_ids": list(cols[0]),
            "scheduled": list(cols[1]),
            "kinds": list(cols[2]),
            "states": list(cols[3]),
            "reasons": list(cols[4]),
            "max_attempts": list(cols[5]),
            "available": list(cols[6]),
            "finished": list(cols[7]),
            "targets": list(cols[8]),
            "exclusive": list(cols[9]),
            "adv_ids": [a[0] for a in advances],
            "adv_next": [a[1] for a in advances],
        }
        with connection.cursor() as cur:
            cur.execute(INSERT_RUNS_AND_ADVANCE_PG, params)
            return dict(cur.fetchall())

    import uuid

    inserted: dict[str, int] = {}
    with connection.cursor() as cur:
        for job_id, sched, kind, state, reason, max_att, avail, fin, target, excl in runs:
            cur.execute(
                INSERT_RUN_SQLITE,
                [
                    uuid.uuid4().hex,
                    adapt_uuid(job_id),
                    adapt_dt(sched),
                    kind,
                    state,
                    reason,
                    max_att,
                    adapt_dt(avail),
                    adapt_dt(now),
                    adapt_dt(fin),
                    target,
                    excl,
                ],
            )
            if cur.rowcount:
                inserted[state] = inserted.get(state, 0) + 1
        cur.executemany(
            ADVANCE_JOB_SQLITE, [(adapt_dt(nxt), adapt_uuid(job_id)) for job_id, nxt in advances]
        )
    return inserted


def seconds_to_earliest_fire() -> float | None:
    """Seconds from the database's now to the earliest next fire (None: no job)."""
    if is_postgres():
        with connection.cursor() as cur:
            cur.execute(SECONDS_TO_EARLIEST_PG)
            value = cur.fetchone()[0]
        return None if value is None else float(value)
    earliest = earliest_next_fire()
    return None if earliest is None else (earliest - db_now()).total_seconds()


def earliest_next_fire() -> dt.datetime | None:
    with connection.cursor() as cur:
        cur.execute(EARLIEST_NEXT_FIRE)
        return parse_dt(cur.fetchone()[0])

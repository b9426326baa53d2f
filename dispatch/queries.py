"""The dispatcher's SQL, in one place: each statement named once, with the loop that runs it.

The ORM stays off this path: a tick locks up to ``batch_size`` due jobs, and
writes all their runs and next fires in one statement over ``unnest`` arrays,
one commit per batch. Each statement says which loop runs it and which race
its guard prevents; rows are read by column name.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection

from core.db import DB_NOW_SQL, dict_cursor
from core.db import db_now as _db_now
from core.sql import Placeholder
from runs import identity
from runs.models import RUN_COLUMNS_SQL
from runs.planning import DueJob

# The floor of a caller that read none: every run is scheduled after it.
EPOCH = dt.datetime.min.replace(tzinfo=dt.UTC)
# The ceiling of a caller that gave none: every run is scheduled before it.
END_OF_TIME = dt.datetime.max.replace(tzinfo=dt.UTC)

# The columns of DueJob, in its field names.
_DUE_COLUMNS = """
    id, cron, interval_seconds, timezone, start_at, created_at, next_fire_at,
    misfire_policy, max_catchup, misfire_grace_seconds, overlap_policy,
    jitter_seconds, max_attempts, target_kind, owner_id, run_at, end_at
"""

# Dispatcher tick, planned path (uses job_due_idx). SKIP LOCKED lets several
# dispatchers share the due set: each takes a disjoint batch, so no fire is
# planned by two of them at once, and none waits on another's locks. NO KEY
# UPDATE (the lock its own UPDATE of next_fire_at needs) conflicts with
# another dispatcher and with an owner's verb (FOR UPDATE), but not with a
# worker's claim (FOR KEY SHARE, runs/leases.py): a claim in progress never
# makes a due job wait a tick.
LOCK_DUE_JOBS = f"""
    SELECT {_DUE_COLUMNS}
    FROM jobs_job
    WHERE state = 'active' AND next_fire_at <= %(now)s {{shard}}
    ORDER BY next_fire_at
    LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
"""
# One of several dispatchers (--shard K/N) plans only the jobs whose id
# hashes to K modulo N, so that each due job has one dispatcher.
SHARD_FILTER = "AND mod(hashtext(id::text) & 2147483647, %(shards)s) = %(shard)s"

# Which due jobs a dispatcher's statements read: every job, or, for one of
# several dispatchers started with --shard, its shard's (SHARD_FILTER).
SHARD = Placeholder("shard", {"every job": "", "one shard": SHARD_FILTER})

# Dispatcher tick, planned path: the runs each exclusive job already has
# running and waiting, the input of the overlap rule (uses run_active_idx).
# Read after the jobs are locked, so no other dispatcher adds a fire of these
# jobs meanwhile. ``floor``: the active floor the tick read first
# (runs/partitions.py), below which no run is unfinished; ``ceiling``: the
# active ceiling, past which none is.
ACTIVE_COUNTS = """
    SELECT job_id,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state <> 'running') AS waiting
    FROM runs_run
    WHERE job_id = ANY(%(ids)s::uuid[]) AND state IN ('pending', 'running', 'retrying')
      AND scheduled_at >= %(floor)s AND scheduled_at < %(ceiling)s
    GROUP BY job_id
"""

# Dispatcher tick, planned path: insert the batch's runs and advance the jobs
# in one statement. ON CONFLICT makes a fire that another dispatcher (or a
# crashed earlier tick that did commit) already inserted a no-op: the unique
# key is the guarantee against a duplicate fire, not this code.
#
# Fires past a recovery's recorded cap (runs/planning.py: missed_counted) are
# added to the job's missed_count, the first of them kept as missed_since
# unless an earlier outage set it, and to the open schedule span's
# missed_count, which the auditor reconciles (jobs/history.py). Jobs without
# such fires add 0 and keep their missed_since (theirs is NULL here).
#
# A recovery writes up to ~100 rows per job, so the rows are sent compactly:
# what is the job's (id, attempts, target, overlap, jitter) once per job, and
# per row only the job's position, the fire and the position of its (kind,
# state, reason) among the batch's few distinct ones.
INSERT_RUNS_AND_ADVANCE = f"""
    WITH ins AS (
        INSERT INTO runs_run ({RUN_COLUMNS_SQL})
        SELECT r.id, j.id, r.scheduled_at, s.kind, s.state, s.reason, 0,
               j.max_attempts,
               CASE WHEN s.state = 'pending' THEN r.scheduled_at + j.jitter END,
               '', %(now)s,
               CASE WHEN s.state <> 'pending' THEN %(now)s::timestamptz END,
               '', j.target_kind, j.exclusive, j.owner_id
        FROM unnest(%(run_ids)s::uuid[], %(run_jobs)s::int[], %(run_at)s::timestamptz[],
                    %(run_shapes)s::int[])
                 AS r(id, job, scheduled_at, shape)
        JOIN unnest(%(ids)s::uuid[], %(max_attempts)s::int[], %(targets)s::text[],
                    %(exclusive)s::bool[], %(jitter)s::interval[], %(owners)s::bigint[])
                 WITH ORDINALITY
                 AS j(id, max_attempts, target_kind, exclusive, jitter, owner_id, n)
             ON j.n = r.job
        JOIN unnest(%(kinds)s::text[], %(states)s::text[], %(reasons)s::text[])
                 WITH ORDINALITY AS s(kind, state, reason, n)
             ON s.n = r.shape
        ON CONFLICT (job_id, scheduled_at) DO NOTHING
        RETURNING state
    ), adv AS (
        UPDATE jobs_job AS j
        SET next_fire_at = a.nxt,
            missed_count = j.missed_count + a.missed,
            missed_since = coalesce(j.missed_since, a.since)
        FROM unnest(%(ids)s::uuid[], %(next)s::timestamptz[], %(missed)s::bigint[],
                    %(missed_since)s::timestamptz[]) AS a(id, nxt, missed, since)
        WHERE j.id = a.id
    ), span AS (
        UPDATE jobs_schedulespan AS s SET missed_count = s.missed_count + a.missed
        FROM unnest(%(ids)s::uuid[], %(missed)s::bigint[]) AS a(id, missed)
        WHERE s.job_id = a.id AND s.ended_at IS NULL AND a.missed > 0
    )
    SELECT state, count(*) AS runs FROM ins GROUP BY state
"""

# The fast path's statement of the overlap rule, for its one fire of job
# ``j``. The rule itself is stated in runs/planning.py (overlap_skips):
# ``skip`` skips a fire while the job has a run running or waiting, ``queue``
# while it has one waiting (pending or retrying), ``allow`` never. Read once
# the job is locked, as the planned path reads ACTIVE_COUNTS (uses
# run_active_idx, one probe per partition from the floor to the ceiling).
OVERLAP_SKIPS = """
    (j.overlap_policy <> 'allow' AND EXISTS (
        SELECT 1 FROM runs_run AS a
        WHERE a.job_id = j.id AND a.state IN ('pending', 'running', 'retrying')
          AND a.scheduled_at >= %(floor)s AND a.scheduled_at < %(ceiling)s
          AND (a.state <> 'running' OR j.overlap_policy = 'skip')))
"""

# Whether the job ``j`` has more than one fire due (its next one after
# next_fire_at is due too): the dispatcher is behind it.
SEVERAL_DUE = "(j.next_fire_at + make_interval(secs => j.interval_seconds) <= %(now)s)"
# How many fires of the job ``j`` are due: next_fire_at and each one an
# interval later up to now, none past its end_at.
DUE_COUNT = """least(
    floor(extract(epoch FROM %(now)s - j.next_fire_at) / j.interval_seconds) + 1,
    coalesce(floor(extract(epoch FROM j.end_at - j.next_fire_at) / j.interval_seconds) + 1,
             2147483647))::bigint"""
# The fire after the due ones of a job behind (a backlog), or NULL past its end_at.
AFTER_BACKLOG = f"""CASE
    WHEN j.end_at IS NULL
         OR j.next_fire_at + make_interval(secs => {DUE_COUNT} * j.interval_seconds) <= j.end_at
    THEN j.next_fire_at + make_interval(secs => {DUE_COUNT} * j.interval_seconds)
END"""

# Dispatcher tick, fast path, for the commonest due job: an interval job
# without jitter whose due fires are within its grace. With one due fire,
# its fire is pending, or skipped by the overlap rule (written as the planned
# path writes it: reason "overlap", finished at once). With several (the
# dispatcher is behind), only a job parked behind its active run is taken
# here (below: the run was there before all of them, so all are overlaps, as
# the planned path would decide), and under skip or queue a job with no run
# in the way: its first due fire runs and the others, held back by it, are
# ``missed`` with reason "no dispatcher" (runs/planning.py _runnable), all on
# one row that counts them (``fires``) instead of a row each (``backlog``; a
# job with a run already somewhere among them is left to the planned path).
# An overloaded install finds many jobs a few intervals behind, and a row
# for each of their fires, written in Python, was what kept it behind. The
# other jobs with several fires due are locked but left as they are, and the
# planned path takes them in this same tick. Everything else (cron,
# misfires, jitter) is left due for the planned path in Python.
# Measured on PostgreSQL this is what makes the dispatcher's cost track the
# due work, not the table size.
#
# Skipped fires are decided here too, not left to the planned path: under
# overload nearly every due job still has a run waiting, and the fast path
# then walked past all of them (one overlap probe per partition each) to
# find its batch, every tick, before the planned path took them one by one
# in Python.
#
# Parking (docs/concepts/misfire-and-overlap.md "Parked while its run is
# active"): when the dispatcher is behind an overlap ``skip`` job (several
# of its fires due at once) whose run is still active, the job is parked
# instead of stepped. Its skipped row stands for every fire from there on
# (``fires`` NULL), the job leaves the due set (next_fire_at NULL,
# parked_since the fire); when one of its runs ends, the trigger
# run_unparks_jobs (runs/migrations/0015) counts the fires declined and sets
# the next one. A dispatcher that keeps up does not park: a fire declined by
# the active run is one skipped row and the job steps on. Measured
# (docs/benchmarks.md "Overload"), a parking and its end (the held run's
# lock, the trigger's locked read and two updates) cost PostgreSQL more than
# the one to three rows it saves per run past the peak: parking each job at
# its first declined fire made an install deliver less past its peak than
# at it. An install far past its peak falls behind most jobs, and there
# parking keeps the dispatcher's work at a few rows per delivery, however
# many fires each run declines. A run cannot end unseen between this
# statement's read and its commit: the end of an exclusive run locks its job
# (runs/migrations/0016), and the tick holds its jobs locked from its first
# statement on. So either the run's end holds the job first, and the tick
# does not take the job (SKIP LOCKED) until the run has ended; or the tick
# holds it first, and the run's end waits for this commit and finds the job
# parked. The skipped row goes in first and the job parks only if it did
# (ON CONFLICT: a fire that already had a row, a backfill's say, is not a
# parking's first fire).
#
# A job with an end_at takes this path too: its next fire is NULL (the job
# is finished) once the one after this would be past end_at.
#
# Two statements, set-based, because
# run ids are uuid5 of the fire (runs/identity.py) and PostgreSQL cannot hash
# them without extensions:
# LOCK_SIMPLE_INTERVALS locks the due jobs and returns each fire's name,
# formatted by PostgreSQL so that Python parses no timestamps; Python hashes
# the names; DISPATCH_SIMPLE_INTERVALS inserts the runs and advances the jobs.
# SKIP LOCKED and ON CONFLICT guard as in LOCK_DUE_JOBS and
# INSERT_RUNS_AND_ADVANCE.
#
# The batch travels as one delimited string each way (the rows' ctids, the
# names, the ids), not as rows and arrays: psycopg converts rows and array
# elements one by one in Python, which measured ~15 ms per batch of 1,000,
# as much as the hashing and the second round trip together. A ctid's text
# has no space and a name or a uuid no comma, so the delimiters are safe.
#
# The second statement finds the jobs again by ctid (a row's physical
# address): a Tid Scan costs the same however large the table is. The
# planner prices each address as a random page read (``random_page_cost``,
# 4 by default), so with its default it chose to read the whole table
# instead (a Seq Scan, twice: to join ``due`` and to update) once a batch's
# addresses outnumbered about a third of the table's pages: at 40,000 jobs
# and batches of 1,000, each tick read 80,000 job rows for its 1,000, which
# was about half of the statement's time (auto_explain under
# ``bench e2e --jobs 40000``), and that work grew with the fleet, not with
# the fires. The rows were locked by the first statement a moment before,
# so they are in shared buffers: the statement runs with a random page
# priced as a sequential one (JOBS_IN_MEMORY: 1, ``seq_page_cost``'s
# default), which says so, and reads its batch only
# (tests/integration/test_hot_plans.py, "a tick reads the jobs it locked by
# their address"). Finding rows by ctid is safe because this transaction
# holds the rows FOR NO KEY UPDATE (as LOCK_DUE_JOBS, for the same reason)
# from the first statement on: no one else can update, delete or move them
# (a claim's KEY SHARE lock moves nothing), so their ctids and next_fire_at
# (the fire that was named) are the ones the first statement read. Both aggregates read the locked
# rows in one pass, so the n-th ctid and the n-th name are the same job's.
LOCK_SIMPLE_INTERVALS = f"""
    SELECT string_agg(tid, ' ') AS tids, string_agg(name, ',') AS names,
           string_agg(second, ',') AS seconds
    FROM (
        SELECT ctid::text AS tid,
               {identity.FIRE_NAME_SQL.format(job="id", at="next_fire_at")} AS name,
               {
    identity.FIRE_NAME_SQL.format(
        job="id", at="(next_fire_at + make_interval(secs => interval_seconds))"
    )
}
                   AS second
        FROM jobs_job AS j
        WHERE state = 'active' AND next_fire_at <= %(now)s {{shard}}
          AND interval_seconds IS NOT NULL AND jitter_seconds = 0
          AND next_fire_at >= %(now)s - make_interval(secs => misfire_grace_seconds)
        ORDER BY next_fire_at
        LIMIT %(limit)s
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS locked
"""
# The second statement's pricing: its jobs' pages are in memory (above).
JOBS_IN_MEMORY = "SET LOCAL random_page_cost = 1"
PRICED_AS_CONFIGURED = "SET LOCAL random_page_cost TO DEFAULT"
DISPATCH_SIMPLE_INTERVALS = f"""
    WITH due AS (
        SELECT j.id, f.run_id, j.next_fire_at, j.interval_seconds, j.overlap_policy,
               j.max_attempts, j.target_kind, j.owner_id, {OVERLAP_SKIPS} AS skipped,
               {SEVERAL_DUE} AS several, f.second_id, {DUE_COUNT} AS due_count
        FROM unnest(string_to_array(%(tids)s, ' ')::tid[],
                    string_to_array(%(run_ids)s, ',')::uuid[],
                    string_to_array(%(second_ids)s, ',')::uuid[]) AS f(tid, run_id, second_id)
        JOIN jobs_job AS j ON j.ctid = f.tid
    ), backlog AS (
        SELECT due.id FROM due
        WHERE due.several AND NOT due.skipped AND due.overlap_policy IN ('skip', 'queue')
          AND NOT EXISTS (
              SELECT 1 FROM runs_run AS x
              WHERE x.job_id = due.id AND x.scheduled_at > due.next_fire_at
                -- A bound the planner can prune the days with: these fires
                -- are within the job's grace, which is a day at most.
                AND x.scheduled_at >= %(now)s - interval '1 day'
                AND x.scheduled_at < due.next_fire_at
                    + make_interval(secs => due.due_count * due.interval_seconds))
    ), holders AS (
        -- The jobs parked behind their active run (the overlap probe's).
        SELECT due.id AS job_id FROM due
        WHERE due.several AND due.skipped AND due.overlap_policy = 'skip'
    ), ins AS (
        INSERT INTO runs_run ({RUN_COLUMNS_SQL}, fires)
        SELECT due.run_id, due.id, due.next_fire_at, 'scheduled',
               CASE WHEN due.skipped THEN 'skipped' ELSE 'pending' END,
               CASE WHEN due.skipped THEN 'overlap' ELSE '' END, 0,
               due.max_attempts,
               CASE WHEN NOT due.skipped THEN due.next_fire_at END, '', %(now)s,
               CASE WHEN due.skipped THEN %(now)s::timestamptz END, '',
               due.target_kind, due.overlap_policy <> 'allow', due.owner_id,
               CASE WHEN due.id IN (SELECT job_id FROM holders) THEN NULL ELSE 1 END
        FROM due
        WHERE NOT due.several OR due.id IN (SELECT job_id FROM holders)
           OR due.id IN (SELECT id FROM backlog)
        UNION ALL
        SELECT due.second_id, due.id,
               due.next_fire_at + make_interval(secs => due.interval_seconds), 'scheduled',
               'missed', 'no dispatcher', 0, due.max_attempts, NULL, '', %(now)s, %(now)s, '',
               due.target_kind, due.overlap_policy <> 'allow', due.owner_id, due.due_count - 1
        FROM due
        WHERE due.id IN (SELECT id FROM backlog)
        ON CONFLICT (job_id, scheduled_at) DO NOTHING
        RETURNING job_id, state, fires
    ), parked AS (
        SELECT job_id AS id FROM ins WHERE fires IS NULL
    ), adv AS (
        UPDATE jobs_job AS j
        SET next_fire_at = CASE
                WHEN j.id IN (SELECT id FROM parked) THEN NULL
                WHEN j.id IN (SELECT id FROM backlog) THEN {AFTER_BACKLOG}
                WHEN j.end_at IS NULL
                     OR j.next_fire_at + make_interval(secs => j.interval_seconds) <= j.end_at
                THEN j.next_fire_at + make_interval(secs => j.interval_seconds)
            END,
            parked_since = CASE WHEN j.id IN (SELECT id FROM parked) THEN j.next_fire_at END
        WHERE j.ctid = ANY(string_to_array(%(tids)s, ' ')::tid[])
          AND (NOT {SEVERAL_DUE} OR j.id IN (SELECT id FROM parked)
               OR j.id IN (SELECT id FROM backlog))
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM adv) AS jobs,
           (SELECT count(*) FROM ins WHERE state = 'pending') AS pending,
           (SELECT count(*) FROM ins WHERE state = 'skipped') AS skipped,
           (SELECT count(*) FROM ins WHERE state = 'missed') AS missed,
           (SELECT string_agg(job_id || ':' || fires, ',') FROM ins WHERE state = 'missed')
               AS missed_fires
"""

# Dispatcher loop and the lag sample: the earliest next fire (uses job_due_idx).
EARLIEST_NEXT_FIRE = """
    SELECT min(next_fire_at) AS earliest FROM jobs_job WHERE state = 'active' {shard}
"""
# Dispatcher loop: "how long may I sleep?" in one round trip, by the database
# clock, so a skewed host clock cannot make it sleep past a fire. Filtered by
# the dispatcher's shard: another shard's overdue job is not this one's work,
# and counting it would make this dispatcher poll at its minimum sleep.
SECONDS_TO_EARLIEST = f"""
    SELECT extract(
        epoch FROM min(next_fire_at) - coalesce(%(now)s::timestamptz, {DB_NOW_SQL})
    ) AS wait
    FROM jobs_job WHERE state = 'active' {{shard}}
"""


def db_now() -> dt.datetime:
    """The database clock; each tick reads it once and passes it along, so every
    comparison in the tick uses the same instant."""
    return _db_now()


def _shard(params: dict, shard: tuple[int, int] | None) -> str:
    if not shard:
        return SHARD["every job"]
    params.update(shard=shard[0], shards=shard[1])
    return SHARD["one shard"]


def lock_due_jobs(
    now: dt.datetime, limit: int, shard: tuple[int, int] | None = None
) -> list[DueJob]:
    params: dict = {"now": now, "limit": limit}
    with dict_cursor() as cur:
        cur.execute(LOCK_DUE_JOBS.format(shard=_shard(params, shard)), params)
        return [DueJob(**row) for row in cur.fetchall()]


def dispatch_simple_intervals(
    now: dt.datetime,
    limit: int,
    shard: tuple[int, int] | None = None,
    floor: dt.datetime = EPOCH,
    ceiling: dt.datetime = END_OF_TIME,
) -> tuple[int, dict[str, int], dict[uuid.UUID, int]]:
    """The SQL fast path: returns (jobs advanced, runs created by state, the
    fires each job behind recorded ``missed``, "no dispatcher").
    ``floor``, ``ceiling``: the tick's active floor and ceiling
    (runs/partitions.py; the defaults bound nothing)."""
    params: dict = {"now": now, "limit": limit}
    with connection.cursor() as cur:
        cur.execute(LOCK_SIMPLE_INTERVALS.format(shard=_shard(params, shard)), params)
        tids, names, seconds = cur.fetchone()
        if tids is None:
            return 0, {}, {}
        run_ids = ",".join(identity.ids_for_names(names.split(",")))
        second_ids = ",".join(identity.ids_for_names(seconds.split(",")))
        cur.execute(JOBS_IN_MEMORY)
        cur.execute(
            DISPATCH_SIMPLE_INTERVALS,
            {
                "now": now,
                "tids": tids,
                "run_ids": run_ids,
                "second_ids": second_ids,
                "floor": floor,
                "ceiling": ceiling,
            },
        )
        jobs, pending, skipped, missed, missed_fires = cur.fetchone()
        cur.execute(PRICED_AS_CONFIGURED)
    created = {"pending": pending, "skipped": skipped, "missed": missed}
    backlog = {
        uuid.UUID(job): int(fires)
        for job, fires in (item.split(":") for item in (missed_fires or "").split(",") if item)
    }
    return jobs, {state: n for state, n in created.items() if n}, backlog


def active_counts(
    job_ids: Sequence[uuid.UUID], floor: dt.datetime = EPOCH, ceiling: dt.datetime = END_OF_TIME
) -> dict[uuid.UUID, tuple[int, int]]:
    """(running, waiting) runs per job; waiting is pending or retrying
    (uses run_active_idx). Jobs with neither are left out. ``floor``,
    ``ceiling``: the tick's active floor and ceiling (the defaults bound
    nothing)."""
    if not job_ids:
        return {}
    with dict_cursor() as cur:
        cur.execute(ACTIVE_COUNTS, {"ids": list(job_ids), "floor": floor, "ceiling": ceiling})
        return {row["job_id"]: (row["running"], row["waiting"]) for row in cur.fetchall()}


@dataclass(frozen=True)
class Advance:
    """One planned job's part of a tick's write: its next fire and what its
    runs share."""

    id: uuid.UUID
    next_fire_at: dt.datetime | None
    max_attempts: int = 3
    target_kind: str = "webhook"
    exclusive: bool = True
    jitter: dt.timedelta = dt.timedelta(0)
    missed_counted: int = 0  # fires missed past the recorded cap, counted only
    missed_since: dt.datetime | None = None  # the first of them
    owner_id: int | None = None  # the job's, copied onto its runs


def insert_runs_and_advance(
    now: dt.datetime, advances: Sequence[Advance], runs: Sequence[tuple]
) -> dict[str, int]:
    """Write a tick's runs and next fires. Returns inserted runs by state.

    ``runs`` rows: (position of the job in ``advances``, scheduled_at, kind,
    state, reason). A pending run is available at scheduled_at + the job's
    jitter; any other is finished at ``now``. Each run's id is its fire's
    (runs/identity.py), made here so that no caller can insert a fire under
    another id.
    """
    shapes: dict[tuple[str, str, str], int] = {}
    run_ids, run_jobs, run_at, run_shapes = [], [], [], []
    for job, scheduled_at, kind, state, reason in runs:
        run_ids.append(identity.fire_id(advances[job].id, scheduled_at))
        run_jobs.append(job + 1)  # WITH ORDINALITY counts from 1
        run_at.append(scheduled_at)
        run_shapes.append(shapes.setdefault((kind, state, reason), len(shapes) + 1))
    params: dict[str, Any] = {
        "now": now,
        "run_ids": run_ids,
        "run_jobs": run_jobs,
        "run_at": run_at,
        "run_shapes": run_shapes,
        "kinds": [k for k, _, _ in shapes],
        "states": [s for _, s, _ in shapes],
        "reasons": [r for _, _, r in shapes],
        "ids": [a.id for a in advances],
        "next": [a.next_fire_at for a in advances],
        "max_attempts": [a.max_attempts for a in advances],
        "targets": [a.target_kind for a in advances],
        "exclusive": [a.exclusive for a in advances],
        "jitter": [a.jitter for a in advances],
        "owners": [a.owner_id for a in advances],
        "missed": [a.missed_counted for a in advances],
        "missed_since": [a.missed_since if a.missed_counted else None for a in advances],
    }
    with dict_cursor() as cur:
        cur.execute(INSERT_RUNS_AND_ADVANCE, params)
        return {row["state"]: row["runs"] for row in cur.fetchall()}


def seconds_to_earliest_fire(
    shard: tuple[int, int] | None = None, now: dt.datetime | None = None
) -> float | None:
    """Seconds from the database's now (or ``now``, in tests) to the earliest
    next fire of the shard (None: no active job there)."""
    params: dict = {"now": now}
    with dict_cursor() as cur:
        cur.execute(SECONDS_TO_EARLIEST.format(shard=_shard(params, shard)), params)
        wait = cur.fetchone()["wait"]
    return None if wait is None else float(wait)


def earliest_next_fire(shard: tuple[int, int] | None = None) -> dt.datetime | None:
    params: dict = {}
    with dict_cursor() as cur:
        cur.execute(EARLIEST_NEXT_FIRE.format(shard=_shard(params, shard)), params)
        return cur.fetchone()["earliest"]

"""Daily partitions of the runs and attempts tables.

``runs_run`` and ``runs_attempt`` are range-partitioned by ``scheduled_at``
(an attempt carries a copy of its run's), one partition per UTC day, plus a
default partition each that catches any row outside the days that have one
(a backfill far in the past, a fire far in the future), so an insert never
fails for want of a partition. Partitions are named after their day:
``runs_run_p20261201`` and ``runs_attempt_p20261201`` hold the runs
scheduled on 2026-12-01 and their attempts.

- ``ensure_partitions()``: the dispatchers' housekeeping creates today's and
  the next ``DAYS_AHEAD`` days' partitions ahead of time. Idempotent, and
  serialized across processes by an advisory lock. Rows of that day already
  in the default partition (a fire planned that far ahead) are moved into the
  new partition before it is attached.
- ``drop_expired_days()``: retention drops a day's two partitions (DETACH,
  then DROP) once the whole day is older than the cutoff, unless the day still
  holds a run that is pending, running or retrying: such a day is kept, and
  its finished runs are deleted row by row (runs/retention.py).

- The active floor (``runs_active_floor``, one row): a time at or before
  the ``scheduled_at`` of every run that is pending, running or retrying.
  The hot statements that look for such runs (the claims, the dispatcher's
  overlap checks) add ``scheduled_at >= floor``, so the planner keeps only
  the days from the floor on: planning a claim costs the same with 30 days
  of history as with none (each statement is planned afresh, and the
  planner's time grows with the partitions it keeps). How it stays true:
  - lowering: after each INSERT statement on ``runs_run``, a trigger lowers
    the floor to the day of the oldest unfinished run the statement wrote,
    if that is older (migrations 0011, 0012). One other statement makes a
    run unfinished: an operator's retry moves a failed or missed run back to
    waiting (``Run.retry``), and lowers the floor to its day in the same
    transaction (``lower_active_floor()``), so the run is claimable at once.
  - raising: ``raise_active_floor()``, in the dispatchers' housekeeping,
    sets it to the oldest unfinished run's day, never later than yesterday.
    It locks the row, then holds ``FLOOR_LOCK_KEY`` exclusively (trying,
    never waiting), which every lowering holds shared, so no run written but
    not yet committed is left below it. It waits for the row at most
    ``FLOOR_LOCK_TIMEOUT``: the claims and ticks hold it FOR SHARE, and a
    stream of overlapping share lockers can keep it forever (a new share
    lock never queues behind a waiting FOR UPDATE). A raise that cannot
    have the row is left for the next round, and the dispatcher goes on.
  - reading: ``now_and_floor()`` reads it FOR SHARE, so a lowering cannot
    commit while the reader's transaction uses the old value: a run it
    writes below that value is seen by the reader's next transaction,
    never missed by one that already read the floor.
- The active ceiling: no unfinished run is scheduled later than the
  database's clock. Fires are made once due, a manual run or a test
  delivery is scheduled at its trigger's time (runs/job_verbs.py), and
  backfills and retries are for past fires. The dispatcher's overlap probes
  (dispatch/queries.py OVERLAP_SKIPS, ACTIVE_COUNTS) add
  ``scheduled_at < ceiling``, the tick's time plus ``ACTIVE_CEILING_MARGIN``,
  so the planner leaves out the coming week's partitions, which hold no
  active run: each probe reads today's and tomorrow's partitions (and the
  default one while the floor is before the first day's partition), three
  index probes instead of nine (a tick of 1,000 fires read 12,000 buffers
  of empty partitions' indexes for them).

Both partition changes take the tables' locks with a short ``lock_timeout``:
a DDL statement waiting for a long query would queue every claim and insert
behind it. One that times out is retried at the next housekeeping round.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import OperationalError, connection, transaction
from psycopg.errors import LockNotAvailable

from core.db import DB_NOW_SQL
from core.sql import Placeholder

log = logging.getLogger("punctual.retention")

# Today plus this many days ahead have their partitions at all times.
DAYS_AHEAD = 7
# How long a partition change may wait for the tables' locks before it gives
# up for this round (hot statements queue behind a waiting DDL statement).
LOCK_TIMEOUT = "2s"
# pg_advisory_xact_lock key: one partition change at a time, across all
# dispatchers and prune_runs.
ADVISORY_KEY = 0x50554E43  # "PUNC"

# pg_advisory_xact_lock key of the active floor: held shared by the trigger
# that lowers it (migration 0011 spells the same number), exclusively by
# raise_active_floor().
FLOOR_LOCK_KEY = 0x464C4F52  # "FLOR"

# How long raise_active_floor() waits for the floor's row before it leaves
# the raise for the next housekeeping round: the dispatcher's loop waits
# that long at most, a small part of the second a fire may be late by.
FLOOR_LOCK_TIMEOUT = "100ms"

# The active ceiling's margin past the tick's time (see the module): a day,
# far more than a tick lasts or a clock may be corrected by, and still only
# today's and tomorrow's partitions for the planner to keep.
ACTIVE_CEILING_MARGIN = dt.timedelta(days=1)

# (parent, default partition), runs first: every statement that writes both
# tables locks runs_run first, and so does every partition change here.
TABLES = (("runs_run", "runs_run_default"), ("runs_attempt", "runs_attempt_default"))

# What ANALYZE records for runs_run.job_id on every partition (a column
# option, which each partition needs for itself): its distinct values are a
# hundredth of its rows. The claim's overlap test (runs/leases.py ITS_TURN)
# asks, for each waiting run it considers, whether another run of that job is
# active, and only an index probe by job keeps that cheap. Measured, a
# partition holding one job's runs (a backfill landed in the default
# partition) gets n_distinct = 1 from ANALYZE; the planner then expects every
# row to match any job and scans the whole partition for each probe: one
# claim took 11 s beside 40,000 such runs, instead of 50 ms. The override
# holds the estimate at "many jobs", which is what every partition of a live
# install has, and takes effect at the partition's next ANALYZE.
JOB_ID_DISTINCT = -0.01
SET_JOB_ID_DISTINCT = (
    f"ALTER TABLE {{part}} ALTER COLUMN job_id SET (n_distinct = {JOB_ID_DISTINCT})"
)

# The day partitions of one table and their upper bounds, oldest first.
DAY_PARTITIONS = """
    SELECT c.relname AS name
    FROM pg_inherits AS i
    JOIN pg_class AS c ON c.oid = i.inhrelid
    JOIN pg_class AS p ON p.oid = i.inhparent
    WHERE p.relname = %(parent)s AND c.relname ~ '_p[0-9]{8}$'
    ORDER BY c.relname
"""

# A day's runs that are not finished yet (uses the partition's run_active_idx).
DAY_HAS_ACTIVE_RUNS = """
    SELECT EXISTS (
        SELECT 1 FROM {part} WHERE state IN ('pending', 'running', 'retrying')
    ) AS active
"""


def partition_name(parent: str, day: dt.date) -> str:
    return f"{parent}_p{day:%Y%m%d}"


# The day partition of runs_run that SET_JOB_ID_DISTINCT and
# DAY_HAS_ACTIVE_RUNS are run on: each day's in turn.
PART = Placeholder(
    "part",
    {"a day's partition, here 2026-12-01's": partition_name("runs_run", dt.date(2026, 12, 1))},
)


def _day_of(name: str) -> dt.date:
    return dt.datetime.strptime(name[-8:], "%Y%m%d").date()


def _day_start(at: dt.datetime | dt.date) -> dt.datetime:
    """Midnight UTC of ``at``'s day."""
    day = at.astimezone(dt.UTC).date() if isinstance(at, dt.datetime) else at
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def _bounds(day: dt.date) -> tuple[str, str]:
    lo = _day_start(day)
    return lo.isoformat(), (lo + dt.timedelta(days=1)).isoformat()


def day_partitions(parent: str = "runs_run") -> list[dt.date]:
    """The days that have a partition of ``parent``, oldest first."""
    with connection.cursor() as cur:
        cur.execute(DAY_PARTITIONS, {"parent": parent})
        return [_day_of(row[0]) for row in cur.fetchall()]


def _lock_for_change(cur) -> None:
    cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    cur.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_KEY])


def _create_day(cur, day: dt.date) -> int:
    """Create and attach ``day``'s partition of both tables; returns the rows
    moved in from the default partitions.

    The table is made standalone and attached afterwards, with a CHECK that
    matches its bounds, so that ATTACH needs no scan of it, and so that rows
    of that day already in the default partition can be moved in first
    (attaching a range the default partition still holds rows of fails).
    """
    lo, hi = _bounds(day)
    moved = 0
    for parent, default in TABLES:
        part = partition_name(parent, day)
        cur.execute(f"CREATE TABLE {part} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        cur.execute(
            f"ALTER TABLE {part} ADD CONSTRAINT {part}_bounds"
            " CHECK (scheduled_at >= %(lo)s AND scheduled_at < %(hi)s)",
            {"lo": lo, "hi": hi},
        )
        cur.execute(
            f"WITH moved AS (DELETE FROM {default}"
            " WHERE scheduled_at >= %(lo)s AND scheduled_at < %(hi)s RETURNING *)"
            f" INSERT INTO {part} SELECT * FROM moved",
            {"lo": lo, "hi": hi},
        )
        moved += cur.rowcount
        cur.execute(
            f"ALTER TABLE {parent} ATTACH PARTITION {part} FOR VALUES FROM (%(lo)s) TO (%(hi)s)",
            {"lo": lo, "hi": hi},
        )
        cur.execute(f"ALTER TABLE {part} DROP CONSTRAINT {part}_bounds")
        if parent == "runs_run":
            cur.execute(SET_JOB_ID_DISTINCT.format(part=part))
    return moved


def ensure_partitions(today: dt.date, days_ahead: int = DAYS_AHEAD) -> list[dt.date]:
    """Make sure ``today`` .. ``today + days_ahead`` have their partitions.

    Returns the days created. Each day is its own short transaction, under
    the advisory lock, and re-checks what exists once it holds the lock: two
    dispatchers doing this at once create each day once.
    """
    wanted = [today + dt.timedelta(days=n) for n in range(days_ahead + 1)]
    created: list[dt.date] = []
    for day in wanted:
        if day in set(day_partitions()):
            continue
        try:
            with transaction.atomic(), connection.cursor() as cur:
                _lock_for_change(cur)
                if day in set(day_partitions()):
                    continue
                moved = _create_day(cur, day)
        except OperationalError as exc:
            log.warning(
                "partition not created: tables busy, retried next round",
                extra={"day": day.isoformat(), "error": str(exc)},
            )
            return created
        created.append(day)
        log.info("partition created", extra={"day": day.isoformat(), "moved_rows": moved})
    return created


def _has_active_runs(day: dt.date) -> bool:
    with connection.cursor() as cur:
        cur.execute(DAY_HAS_ACTIVE_RUNS.format(part=partition_name("runs_run", day)))
        return bool(cur.fetchone()[0])


def drop_expired_days(cutoff: dt.datetime) -> tuple[list[dt.date], list[dt.date]]:
    """Drop the day partitions (runs and attempts) whose whole day is before
    ``cutoff``; returns (days dropped, days kept because a run is active).

    Each day is one short transaction that locks both parent tables (runs
    first) and then checks again for active runs: with the lock held, no run
    of that day can be retried or claimed in between.
    """
    dropped: list[dt.date] = []
    kept: list[dt.date] = []
    for day in day_partitions():
        if dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC) > cutoff:
            break
        # First without the lock: a day kept for an unfinished run is looked
        # at every round, and must not take the tables' lock every time.
        if _has_active_runs(day):
            kept.append(day)
            continue
        try:
            with transaction.atomic(), connection.cursor() as cur:
                _lock_for_change(cur)
                if day not in set(day_partitions()):
                    continue  # another process dropped it meanwhile
                cur.execute("LOCK TABLE runs_run, runs_attempt IN ACCESS EXCLUSIVE MODE")
                cur.execute(DAY_HAS_ACTIVE_RUNS.format(part=partition_name("runs_run", day)))
                if cur.fetchone()[0]:
                    kept.append(day)
                    continue
                for parent, _ in reversed(TABLES):
                    part = partition_name(parent, day)
                    cur.execute(f"ALTER TABLE {parent} DETACH PARTITION {part}")
                    cur.execute(f"DROP TABLE {part}")
        except OperationalError as exc:
            log.warning(
                "partition not dropped: tables busy, retried next round",
                extra={"day": day.isoformat(), "error": str(exc)},
            )
            break
        dropped.append(day)
        log.info("partition dropped", extra={"day": day.isoformat()})
    return dropped, kept


# ---------------------------------------------------------------------------
# The active floor (see the module's docstring)
# ---------------------------------------------------------------------------

# First statement of a claim or a dispatcher tick: the database's now and the
# floor, the row held FOR SHARE until the transaction ends.
NOW_AND_FLOOR = f"""
    SELECT {DB_NOW_SQL} AS now, since AS floor FROM runs_active_floor FOR SHARE
"""

# The oldest unfinished run in the default partition (any day may be there).
OLDEST_ACTIVE_IN_DEFAULT = """
    SELECT min(scheduled_at) FROM runs_run_default
    WHERE state IN ('pending', 'running', 'retrying')
"""

# The insert trigger's lowering, for a run made unfinished by an update
# (migration 0012): the shared advisory lock, then the row.
LOWER_FLOOR = "SELECT runs_active_floor_lower(%(at)s)"

# raise_active_floor()'s write, once it holds the row and the advisory lock:
# the row is rewritten only when the floor moves.
SET_FLOOR = """
    UPDATE runs_active_floor SET since = %(since)s WHERE since IS DISTINCT FROM %(since)s
"""


def now_and_floor() -> tuple[dt.datetime, dt.datetime]:
    """NOW_AND_FLOOR, inside the caller's transaction."""
    with connection.cursor() as cur:
        cur.execute(NOW_AND_FLOOR)
        now, floor = cur.fetchone()
    return now.astimezone(dt.UTC), floor


def lower_active_floor(at: dt.datetime) -> None:
    """Lower the floor to ``at``'s day if it is above it, in the caller's
    transaction, as the insert trigger does for the runs it writes: for a
    statement that makes an older run unfinished again (``Run.retry``). It
    waits for the claims and ticks that hold the row FOR SHARE, as an
    insert's trigger does."""
    with connection.cursor() as cur:
        cur.execute(LOWER_FLOOR, {"at": at})


def raise_active_floor(now: dt.datetime) -> dt.datetime | None:
    """Set the floor to the start of the oldest unfinished run's day, and no
    later than the start of yesterday (UTC), so the dispatcher's fires of
    the last day never have to lower it. Returns the floor set, or None when
    a run insert was in progress, or the claims and ticks held the row for
    longer than ``FLOOR_LOCK_TIMEOUT`` (the next round tries again).

    The row first, FOR UPDATE: it waits for the claims and ticks that read the
    floor to end, for ``FLOOR_LOCK_TIMEOUT`` at most. Then the advisory lock,
    by trying: holding it while waiting for the row would deadlock with a tick
    that holds the row FOR SHARE and whose insert's trigger waits for the
    advisory lock. Each check below is a statement of its own, after both: it
    sees every insert that committed before, and no insert can commit an
    unfinished run meanwhile
    (the trigger waits for the advisory lock)."""
    floor = _day_start(now) - dt.timedelta(days=1)
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"SET LOCAL lock_timeout = '{FLOOR_LOCK_TIMEOUT}'")
            cur.execute("SELECT since FROM runs_active_floor FOR UPDATE")
            return _raise_locked(cur, floor)
    except OperationalError as exc:
        if not isinstance(exc.__cause__, LockNotAvailable):
            raise
        log.info(
            "active floor not raised: claims or ticks hold its row, retried next round",
            extra={"lock_timeout": FLOOR_LOCK_TIMEOUT},
        )
        return None


def _raise_locked(cur, floor: dt.datetime) -> dt.datetime | None:
    """raise_active_floor() once it holds the floor's row."""
    cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [FLOOR_LOCK_KEY])
    if not cur.fetchone()[0]:
        return None
    cur.execute(OLDEST_ACTIVE_IN_DEFAULT)
    oldest = cur.fetchone()[0]
    if oldest is not None:
        floor = min(floor, _day_start(oldest))
    for day in day_partitions():
        if _day_start(day) >= floor:
            break
        if _has_active_runs(day):
            floor = _day_start(day)
            break
    cur.execute(SET_FLOOR, {"since": floor})
    return floor

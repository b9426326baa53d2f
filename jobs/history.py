"""Schedule history: the spans of a job's state and schedule, in database time.

Every write that changes a job's ``state``, ``deleted_at`` or schedule
(``cron``, ``interval_seconds``, ``timezone``, ``start_at``, ``run_at``,
``end_at``) calls
``record_spans`` in the same transaction, with the same database ``now`` it
decided on: the open span of each job is closed at ``at`` and a new one opens
with what the row holds now. A job whose row matches its open span keeps it,
so calling this after any write is harmless.

A deferred constraint trigger (migration jobs 0006) checks at commit that
every job's open span matches its row, so a code path that changes a job and
forgets the history fails loudly instead of leaving the auditor blind.

The auditor (ops/audit.py) expects, for each ``active`` span, every fire in
``(started_at, ended_at]`` to have a run or to be counted in the span's
``missed_count``; ``paused`` and ``deleted`` spans expect nothing. A span
keeps its schedule's ``end_at`` and ``run_at``: its fires end at ``end_at``
(nothing is expected after it, though the span stays open), and a one-off's
span expects its one fire at ``run_at``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connection

# The row's span state: a deleted job is "deleted", whatever its state says.
_ROW_STATE = "CASE WHEN j.deleted_at IS NOT NULL THEN 'deleted' ELSE j.state END"

# Close the open span of each job whose row no longer matches it.
CLOSE_CHANGED = f"""
    UPDATE jobs_schedulespan AS s SET ended_at = %(at)s
    FROM jobs_job AS j
    WHERE j.id = ANY(%(ids)s::uuid[]) AND s.job_id = j.id AND s.ended_at IS NULL
      AND (s.state, s.cron, s.interval_seconds, s.timezone, s.start_at, s.anchor,
           s.run_at, s.end_at)
          IS DISTINCT FROM
          ({_ROW_STATE}, j.cron, j.interval_seconds, j.timezone, j.start_at, j.created_at,
           j.run_at, j.end_at)
"""

# A span opened at ``at`` for each row of ``jobs`` (the jobs table, or a
# statement's rows with the columns of NEW_JOBS_RETURN).
_OPEN_FROM = f"""
    INSERT INTO jobs_schedulespan (
        job_id, started_at, ended_at, state, cron, interval_seconds, timezone,
        start_at, anchor, missed_count, run_at, end_at
    )
    SELECT j.id, %(at)s, NULL, {_ROW_STATE}, j.cron, j.interval_seconds, j.timezone,
           j.start_at, j.created_at, 0, j.run_at, j.end_at
    FROM {{jobs}} AS j
"""

# Open a span for each job that has none open (new, or just closed above).
_OPEN = (
    _OPEN_FROM.format(jobs="jobs_job")
    + """
    WHERE NOT EXISTS (
        SELECT 1 FROM jobs_schedulespan AS s WHERE s.job_id = j.id AND s.ended_at IS NULL)
"""
)
OPEN_MISSING = _OPEN + " AND j.id = ANY(%(ids)s::uuid[])"

# The first span of each job a statement inserts: for a statement whose
# ``new_jobs`` clause (WITH) is that insert, returning NEW_JOBS_RETURN. A new
# job has no span to close, and the clause's rows are exactly the new jobs.
OPEN_FOR_NEW_JOBS = _OPEN_FROM.format(jobs="new_jobs")
NEW_JOBS_RETURN = (
    "id, state, deleted_at, cron, interval_seconds, timezone, start_at, created_at, run_at, end_at"
)


def open_missing_spans(at: dt.datetime) -> int:
    """Open a span for every job that has none: for jobs inserted in bulk by
    SQL (``manage.py bench``). Returns the spans opened."""
    with connection.cursor() as cur:
        cur.execute(_OPEN, {"at": at})
        return cur.rowcount


def open_spans(job_ids: Sequence, at: dt.datetime) -> None:
    """Open the first span of each of ``job_ids``, jobs just inserted in this
    transaction: one statement, however many jobs (a new job has no span to
    close, so ``record_spans``' first statement would find nothing)."""
    if not job_ids:
        return
    # One array literal rather than a list: psycopg quotes a list item by
    # item, which for a thousand ids costs more than the statement.
    ids = "{" + ",".join(str(uuid.UUID(str(i))) for i in job_ids) + "}"
    with connection.cursor() as cur:
        cur.execute(OPEN_MISSING, {"ids": ids, "at": at})


def record_spans(job_ids: Sequence, at: dt.datetime) -> None:
    """Bring the schedule history of ``job_ids`` up to date with their rows,
    as of the database time ``at``. Call it in the transaction that wrote
    the rows."""
    if not job_ids:
        return
    params: dict[str, Any] = {"ids": [str(i) for i in job_ids], "at": at}
    with connection.cursor() as cur:
        cur.execute(CLOSE_CHANGED, params)
        cur.execute(OPEN_MISSING, params)


# Fires counted past a recovery's recorded cap: on the job (shown to its
# owner) and on its open span (reconciled by the auditor).
ADD_MISSED = """
    WITH j AS (
        UPDATE jobs_job SET missed_count = missed_count + %(n)s,
                            missed_since = coalesce(missed_since, %(since)s)
        WHERE id = %(id)s
    )
    UPDATE jobs_schedulespan SET missed_count = missed_count + %(n)s
    WHERE job_id = %(id)s AND ended_at IS NULL
"""


def add_missed(job_id, n: int, since: dt.datetime | None) -> None:
    """Count ``n`` fires that were missed and not recorded one by one, the
    earliest at ``since``. The dispatcher does the same, set-based, in its
    insert statement (dispatch/queries.py)."""
    if n <= 0:
        return
    with connection.cursor() as cur:
        cur.execute(ADD_MISSED, {"id": job_id, "n": n, "since": since})

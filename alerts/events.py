"""Record alert events: a cheap INSERT in the transaction of the fact that
causes them, never a send (docs/guides/alerts.md "Events").

Who calls ``record``, in their own transaction:

- runs/outcomes.py: a run failed after its last attempt (``failed``), a job
  recovered (``recovered``: a run succeeded, and the job had a ``failed`` or
  ``paused`` alert since its last success, ``recoveries``);
- runs/job_verbs.py: the job was paused by the system (``paused``);
- dispatch/dispatcher.py: fires were missed (``missed``, with how many).

``record_install`` is the worker's alert loop's (dispatch/alert_loop.py), for the
install events superusers get: workers behind, no dispatcher.

The quiet period: one alert per job, kind and channel is due per
``PUNCTUAL_ALERT_QUIET_SECONDS``. An event while a fresh alert of its job,
kind and channel is waiting folds into it (``count`` + 1, the newest
``detail``: "and 4 more failures"); otherwise a new alert is due one quiet
period after the previous one was due, or at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings

from core.db import dict_cursor

MAX_DETAIL = 1000


@dataclass(frozen=True)
class Event:
    job_id: uuid.UUID | None
    kind: str
    count: int = 1
    detail: str = ""


# The fold: the partial unique index alert_one_pending (alerts/models.py)
# names the one fresh pending alert of a job, kind and channel; a second
# event finds it there instead of inserting a second alert. Check-then-insert
# would let two completions both insert.
_FOLD = """
    ON CONFLICT (job_id, kind, channel_id)
        WHERE state = 'pending' AND attempts = 0 AND NOT (kind = 'test')
    DO UPDATE SET count = a.count + EXCLUDED.count, detail = EXCLUDED.detail,
                  updated_at = EXCLUDED.updated_at
"""

_COLUMNS = """
    INSERT INTO alerts_alert AS a
        (channel_id, job_id, kind, state, count, detail, due_at, next_attempt_at, attempts,
         lease_owner, last_error, created_at, updated_at)
"""

# Worker complete loop, pull API complete, dispatcher tick and housekeeping,
# in their transactions: one statement per batch, only when the batch has
# events. An owner without channels joins no row. A job's own selection
# (alerts_jobchannel) replaces its owner's channels.
RECORD = (
    "WITH ins AS ("
    + _COLUMNS
    + """
    SELECT c.id, e.job_id, e.kind, 'pending', e.n, e.detail, d.due, d.due, 0, '', '',
           statement_timestamp(), statement_timestamp()
    FROM unnest(%(jobs)s::uuid[], %(kinds)s::text[], %(counts)s::int[], %(details)s::text[])
         AS e(job_id, kind, n, detail)
    JOIN jobs_job AS j ON j.id = e.job_id
    JOIN alerts_channel AS c ON c.owner_id = j.owner_id
    CROSS JOIN LATERAL (
        SELECT greatest(%(now)s, max(p.due_at) + %(quiet)s * interval '1 second') AS due
        FROM alerts_alert AS p
        WHERE p.job_id = e.job_id AND p.kind = e.kind AND p.channel_id = c.id
    ) AS last
    CROSS JOIN LATERAL (SELECT coalesce(last.due, %(now)s) AS due) AS d
    WHERE (NOT EXISTS (SELECT 1 FROM alerts_jobchannel AS s WHERE s.job_id = j.id)
           OR EXISTS (SELECT 1 FROM alerts_jobchannel AS s
                      WHERE s.job_id = j.id AND s.channel_id = c.id))
"""
    + _FOLD
    + """
        RETURNING a.job_id, a.kind
    ), troubled AS (
        -- The jobs whose next success is a recovery.
        INSERT INTO alerts_alertedjob (job_id, since)
        SELECT DISTINCT job_id, %(now)s::timestamptz FROM ins WHERE kind IN ('failed', 'paused')
        ON CONFLICT (job_id) DO NOTHING
    )
    SELECT count(*) AS n FROM ins
"""
)

# Worker complete loop and the pull API's complete, for every batch with
# successes: the jobs among them that were in trouble (alerts_alertedjob, a
# table of a few rows: one key probe per job) are no longer, and recover.
RESOLVE = """
    DELETE FROM alerts_alertedjob WHERE job_id = ANY(%(ids)s::uuid[]) RETURNING job_id
"""

# The worker's alert loop: an install event, to every active superuser's
# channels.
RECORD_INSTALL = (
    _COLUMNS
    + """
    SELECT c.id, NULL, %(kind)s, 'pending', 1, %(detail)s, d.due, d.due, 0, '', '',
           statement_timestamp(), statement_timestamp()
    FROM alerts_channel AS c
    JOIN auth_user AS u ON u.id = c.owner_id AND u.is_superuser AND u.is_active
    CROSS JOIN LATERAL (
        SELECT greatest(%(now)s, max(p.due_at) + %(quiet)s * interval '1 second') AS due
        FROM alerts_alert AS p
        WHERE p.job_id IS NULL AND p.kind = %(kind)s AND p.channel_id = c.id
    ) AS last
    CROSS JOIN LATERAL (SELECT coalesce(last.due, %(now)s) AS due) AS d
"""
    + _FOLD
)


def _merged(events: Iterable[Event]) -> dict[tuple[uuid.UUID, str], Event]:
    """One event per job and kind (one statement cannot fold a row twice):
    their counts added, the last detail kept."""
    merged: dict[tuple[uuid.UUID, str], Event] = {}
    for e in events:
        if e.job_id is None:
            continue
        key = (e.job_id, e.kind)
        before = merged.get(key)
        count = e.count + (before.count if before else 0)
        merged[key] = Event(e.job_id, e.kind, count, (e.detail or "")[:MAX_DETAIL])
    return merged


def record(events: Iterable[Event], now) -> int:
    """Record ``events`` (inside the caller's transaction); returns the
    alerts inserted or folded into."""
    merged = _merged(events)
    if not merged:
        return 0
    # Sorted: two transactions fold into the same alerts in the same order.
    items = [merged[k] for k in sorted(merged, key=lambda k: (str(k[0]), k[1]))]
    with dict_cursor() as cur:
        cur.execute(
            RECORD,
            {
                "jobs": [e.job_id for e in items],
                "kinds": [e.kind for e in items],
                "counts": [e.count for e in items],
                "details": [e.detail for e in items],
                "now": now,
                "quiet": settings.PUNCTUAL_ALERT_QUIET_SECONDS,
            },
        )
        return cur.fetchone()["n"]


def recoveries(job_ids: Iterable[uuid.UUID], now) -> int:
    """The jobs among ``job_ids`` (each had a run succeed, in the caller's
    transaction) that had a failure or pause alert since their last success
    recover: a ``recovered`` event each."""
    ids = sorted(set(job_ids))
    if not ids:
        return 0
    with dict_cursor() as cur:
        cur.execute(RESOLVE, {"ids": ids})
        recovered = [row["job_id"] for row in cur.fetchall()]
    return record([Event(job_id, "recovered") for job_id in recovered], now)


def record_install(kind: str, detail: str, now) -> int:
    """Record an install event for the superusers' channels."""
    with dict_cursor() as cur:
        cur.execute(
            RECORD_INSTALL,
            {
                "kind": kind,
                "detail": detail[:MAX_DETAIL],
                "now": now,
                "quiet": settings.PUNCTUAL_ALERT_QUIET_SECONDS,
            },
        )
        return cur.rowcount

"""The backlog rule: how long the oldest claimable run has waited for a
worker, and when that makes the service degraded. Shared by the health
answer (ops/health.py), the admin banner and dashboard, and the alert loop's
"workers behind" install event (dispatch/alert_loop.py).
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings

from core.db import DB_NOW_SQL, db_now, dict_cursor
from core.sql import Placeholder
from runs.leases import MAY_START

# The oldest claimable run of a target kind: waiting (pending or retrying), due, and
# allowed to start (runs/leases.py RUN_MAY_START: of an active job, or a
# manual run or test delivery made while its job is paused). ``ORDER BY
# available_at LIMIT 1`` reads run_claim_webhook_idx from its start in every
# day's partition (one probe each) and merges them; the first row's job is
# then looked up by its key. A run of a skip/queue job
# waiting for its job's running run (runs_exclusive_running, one key probe)
# waits for its own job, not for a worker, and is passed over. A backfill
# spread over the coming minutes (PUNCTUAL_BACKFILL_RATE) is not due yet and
# does not count. The health check asks about webhook runs only: the pull
# runs' workers are their owner's, not the service's. The dashboard's "Oldest
# waiting run" asks about both kinds (a pull run waiting for a worker that is
# gone was once shown there as nothing waiting); a pull run's probe reads
# run_claim_pull_owner_idx for one owner, and the waiting pull runs (that
# partial index holds nothing else) for all.
# ``now`` is the caller's (None: the database clock's, in the same round trip);
# ``owner`` narrows it to one owner's runs (run_claim_owner_idx), None: all.
OLDEST_CLAIMABLE = f"""
    WITH t AS (SELECT coalesce(%(now)s::timestamptz, {DB_NOW_SQL}) AS now)
    SELECT extract(epoch FROM t.now - r.available_at) AS age, r.id AS run_id,
           r.scheduled_at, j.id AS job_id, j.name AS job_name
    FROM t, runs_run AS r JOIN jobs_job AS j ON j.id = r.job_id
    WHERE r.state IN ('pending', 'retrying') AND r.target_kind = {{kind}}
      AND r.available_at <= t.now {MAY_START}
      AND (%(owner)s::bigint IS NULL OR r.owner_id = %(owner)s::bigint)
      AND NOT (r.exclusive AND EXISTS (
          SELECT 1 FROM runs_exclusive_running AS x WHERE x.job_id = r.job_id))
    ORDER BY r.available_at
    LIMIT 1
"""
# A literal, not a parameter: each kind's statement matches its partial
# indexes' predicate whatever plan is made.
TARGET_KIND = Placeholder("kind", {"webhook": "'webhook'", "pull": "'pull'"})


def oldest_claimable(
    now: dt.datetime | None = None, owner_id: int | None = None, target_kind: str = "webhook"
) -> dict | None:
    """The oldest claimable run of ``target_kind`` (``age`` in seconds,
    ``run_id``, ``scheduled_at``, ``job_id``, ``job_name``), of one owner or
    of all (``owner_id`` None), or None when no run waits for a worker."""
    with dict_cursor() as cur:
        cur.execute(
            OLDEST_CLAIMABLE.format(kind=TARGET_KIND[target_kind]), {"now": now, "owner": owner_id}
        )
        row = cur.fetchone()
    if row is None:
        return None
    return {**row, "age": max(0.0, float(row["age"]))}


def oldest_waiting(owner_id: int | None = None) -> dict | None:
    """The oldest claimable run of either kind (the dashboard's "Oldest
    waiting run"), with its ``target_kind``; None when none waits."""
    now = db_now()
    found = [
        {**row, "target_kind": kind}
        for kind in TARGET_KIND.texts
        if (row := oldest_claimable(now, owner_id, kind)) is not None
    ]
    return max(found, key=lambda row: row["age"], default=None)


def backlog_seconds(now: dt.datetime | None = None) -> float:
    """How long the oldest claimable run has waited for a worker (0: none),
    at ``now`` (None: the database's now)."""
    row = oldest_claimable(now)
    return 0.0 if row is None else row["age"]


def backlog_reason(age: float) -> str | None:
    """The reason the backlog makes the service degraded, or None: shared by
    the health answer and the admin banner."""
    limit = settings.PUNCTUAL_BACKLOG_DEGRADED_SECONDS
    if age <= limit:
        return None
    return (
        f"oldest claimable run has waited {age:.0f} s for a worker"
        f" (over {limit:.0f} s): deliveries are late"
    )

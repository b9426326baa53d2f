"""``GET /api/v1/health/``: is the scheduler keeping time? (docs/operating/health.md)

No authentication: load balancers, uptime checks and on-call scripts call it.
It answers 200 when all is well, and 503 with ``"status": "degraded"`` and a
list of ``reasons`` when:

- no dispatcher has been seen within ``fleet.ALIVE_WITHIN`` (30 s), by the
  database clock: fires are going late right now;
- the dispatch lag is over ``LAG_LIMIT`` (30 s): dispatchers run, but cannot
  keep up (or are all sharded away from some jobs);
- the oldest claimable run has waited longer than
  ``PUNCTUAL_BACKLOG_DEGRADED_SECONDS`` (60 s): fires are made on time, but
  the workers do not deliver them (too few, or one owner's flood);
- the database does not answer (``"database": "error"``).

Four small queries, each served by an index (heartbeat rows, ``job_due_idx``,
``run_claim_webhook_idx``), so probing it every few seconds costs nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache

from core.db import DB_NOW_SQL, db_now, dict_cursor
from core.http import json_require_safe
from core.sql import Placeholder
from dispatch import fleet, queries
from runs.leases import MAY_START

log = logging.getLogger("punctual.health")

LAG_LIMIT = 30.0


def dispatch_lag_seconds(now: dt.datetime) -> float:
    """How late the most overdue active job is: max(0, now − min(next_fire_at)).

    ``min(next_fire_at)`` over active jobs is one probe of ``job_due_idx``;
    paused and deleted jobs have no next fire and do not count.
    """
    earliest = queries.earliest_next_fire()
    if earliest is None:
        return 0.0
    return max(0.0, (now - earliest).total_seconds())


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


@dataclass
class Health:
    database: str = "ok"
    dispatchers: int | None = None
    workers: int | None = None
    dispatch_lag_seconds: float | None = None
    backlog_seconds: float | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.reasons

    def as_json(self) -> dict[str, object]:
        body: dict[str, object] = {
            "status": "ok" if self.ok else "degraded",
            "database": self.database,
            "dispatchers": self.dispatchers,
            "workers": self.workers,
            "dispatch_lag_seconds": self.dispatch_lag_seconds,
            "backlog_seconds": self.backlog_seconds,
        }
        if not self.ok:
            body["reasons"] = self.reasons
        return body


def check() -> Health:
    """Read the fleet, the lag and the backlog, by the database clock, and judge them."""
    health = Health()
    try:
        now = db_now()
        health.dispatchers = fleet.alive("dispatcher", now).count()
        health.workers = fleet.alive("worker", now).count()
        lag = dispatch_lag_seconds(now)
        backlog = backlog_seconds(now)
    except DatabaseError as exc:
        # The details (host names, user names) go to the log, not to an
        # unauthenticated caller.
        log.error("health check: database unavailable", extra={"error": str(exc)})
        health.database = "error"
        health.reasons.append("database unavailable")
        return health
    health.dispatch_lag_seconds = round(lag, 3)
    health.backlog_seconds = round(backlog, 3)
    if health.dispatchers == 0:
        window = int(fleet.ALIVE_WITHIN.total_seconds())
        health.reasons.append(f"no dispatcher seen within {window} s")
    if lag > LAG_LIMIT:
        health.reasons.append(f"dispatch lag {lag:.0f} s is over {LAG_LIMIT:.0f} s")
    if reason := backlog_reason(backlog):
        health.reasons.append(reason)
    return health


@never_cache
@json_require_safe
def health_view(request: HttpRequest) -> JsonResponse:
    health = check()
    response = JsonResponse(health.as_json(), status=200 if health.ok else 503)
    # A 503 here reports the fleet's state; it is not an error of this view.
    # Without this, Django logs every probe during an outage as an ERROR.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response

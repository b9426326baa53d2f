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

from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache

from core.db import db_now
from core.http import json_require_safe
from dispatch import fleet, queries
from dispatch.backlog import (
    backlog_reason,
    backlog_seconds,
    oldest_claimable,
    oldest_waiting,
)

log = logging.getLogger("punctual.health")

# The backlog rule lives with the engine (dispatch/backlog.py), where the
# workers' alert loop reads it too; its callers here keep their names.
__all__ = [
    "Health",
    "backlog_reason",
    "backlog_seconds",
    "check",
    "health_view",
    "oldest_claimable",
    "oldest_waiting",
]

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

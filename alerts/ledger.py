"""The alert ledger's state changes, as guarded statements (alerts/models.py
``Alert``; docs/guides/alerts.md "Delivery").

pending → sending (``claim``: the attempt counted, a lease taken) → sent,
or back to pending after a retryable failure (a later ``next_attempt_at``),
or failed once ``PUNCTUAL_ALERT_MAX_ATTEMPTS`` are spent (``complete``). A
worker that dies mid-send holds its lease until it expires; then any worker's
claim takes the alert over, as a run's lease is taken over.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import uuid
from dataclasses import dataclass

from django.conf import settings

from core.db import db_now, dict_cursor, hot_transaction

log = logging.getLogger("punctual.alerts")

# The alert loop of every worker (dispatch/alert_loop.py): due pending alerts, and
# alerts whose sender's lease expired mid-send (its worker died), oldest
# first. SKIP LOCKED: two workers' loops take different alerts. The attempt
# is counted here, at the claim, so an alert whose senders keep dying still
# runs out of attempts. Served by alert_claim_idx.
CLAIM = """
    WITH c AS (
        SELECT a.id, a.channel_id, a.job_id FROM alerts_alert AS a
        WHERE a.state IN ('pending', 'sending') AND a.next_attempt_at <= %(now)s
          AND (a.state = 'pending' OR a.lease_until < %(now)s)
        ORDER BY a.next_attempt_at
        LIMIT %(limit)s
        FOR UPDATE OF a SKIP LOCKED
    )
    UPDATE alerts_alert AS a SET
        state = 'sending', attempts = a.attempts + 1, lease_owner = %(owner)s,
        lease_until = %(now)s + %(lease)s * interval '1 second', updated_at = %(now)s
    FROM c JOIN alerts_channel AS ch ON ch.id = c.channel_id
         LEFT JOIN jobs_job AS j ON j.id = c.job_id
    WHERE a.id = c.id
    RETURNING a.id, a.attempts AS attempt, a.kind, a.count, a.detail, a.due_at, a.job_id,
              j.name AS job_name, ch.name AS channel_name, ch.url_encrypted
"""

# The alert loop, after its sends: fenced on the lease this worker took and
# on the attempt number, so a sender whose lease expired (and whose alert
# another worker took over) cannot overwrite the newer attempt's state.
COMPLETE = """
    UPDATE alerts_alert AS a SET
        state = v.state,
        next_attempt_at = coalesce(v.next_attempt_at, a.next_attempt_at),
        last_error = v.error,
        sent_at = CASE WHEN v.state = 'sent' THEN %(now)s END,
        lease_owner = '', lease_until = NULL, updated_at = %(now)s
    FROM jsonb_to_recordset(%(results)s::jsonb)
         AS v(id bigint, attempts int, state text, next_attempt_at timestamptz, error text)
    WHERE a.id = v.id AND a.state = 'sending' AND a.lease_owner = %(owner)s
      AND a.attempts = v.attempts
    RETURNING a.id, a.state
"""


@dataclass(frozen=True)
class Claimed:
    id: int
    attempt: int
    kind: str
    count: int
    detail: str
    due_at: dt.datetime
    job_id: uuid.UUID | None
    job_name: str | None
    channel_name: str
    url_encrypted: str


@dataclass(frozen=True)
class Sent:
    """How one attempt ended."""

    id: int
    attempt: int
    ok: bool
    error: str = ""


def claim(owner: str, *, limit: int, lease_seconds: float, now=None) -> list[Claimed]:
    with hot_transaction(), dict_cursor() as cur:
        cur.execute(
            CLAIM,
            {"now": now or db_now(), "owner": owner, "limit": limit, "lease": lease_seconds},
        )
        return [Claimed(**row) for row in cur.fetchall()]


def retry_delay(attempt: int, rng: random.Random) -> float:
    """Full jitter, as for runs: between 0 and min(1 hour, base × 2^(n−1))."""
    base = settings.PUNCTUAL_ALERT_RETRY_SECONDS
    return rng.uniform(0, min(3600.0, base * 2 ** (attempt - 1)))


def complete(owner: str, sent: list[Sent], *, rng: random.Random, now=None) -> dict[int, str]:
    """Write how ``sent`` ended; returns {alert id: state} of those written
    (a missing one lost its lease: another worker took it over)."""
    if not sent:
        return {}
    now = now or db_now()
    cap = settings.PUNCTUAL_ALERT_MAX_ATTEMPTS
    rows = []
    for s in sent:
        if s.ok:
            state, when = "sent", None
        elif s.attempt < cap:
            state, when = "pending", now + dt.timedelta(seconds=retry_delay(s.attempt, rng))
        else:
            state, when = "failed", None
        rows.append(
            {
                "id": s.id,
                "attempts": s.attempt,
                "state": state,
                "next_attempt_at": when.isoformat() if when else None,
                "error": s.error[:2000],
            }
        )
    with hot_transaction(), dict_cursor() as cur:
        cur.execute(COMPLETE, {"now": now, "owner": owner, "results": json.dumps(rows)})
        written = {row["id"]: row["state"] for row in cur.fetchall()}
    for s in sent:
        if s.id not in written:
            log.warning(
                "stale alert result dropped: the lease was lost",
                extra={"alert_id": s.id, "attempt": s.attempt},
            )
    return written


def queue_test(channel, now=None) -> int:
    """A test alert for ``channel``, due now, sent by a worker like any
    other; returns its id."""
    from alerts.models import Alert, AlertKind

    now = now or db_now()
    alert = Alert.objects.create(
        channel=channel,
        kind=AlertKind.TEST,
        detail="A test alert, sent on request.",
        due_at=now,
        next_attempt_at=now,
    )
    return alert.pk

"""Wake idle workers when runs become claimable (docs/operating/processes.md "Wake-ups").

An idle ``manage.py work`` process waits on ``LISTEN punctual_runs``
(dispatch/wakeup.py) instead of polling the claim query. Whatever makes a
webhook run claimable now sends one NOTIFY on that channel, inside the
transaction that made the run, so PostgreSQL delivers it only at commit, when
the run is visible to the claim, and never when the transaction rolls back.

One NOTIFY per transaction, never one per row (and never a trigger): a tick
that creates a thousand runs wakes each worker once, and the woken workers
claim them in batches. The payload only says what made the runs (``dispatch``,
``trigger``, ...), for whoever watches the channel; workers ignore it.
A run that becomes claimable later (a retry's backoff, a job's jitter) is
announced by whoever knows when: see dispatch/wakeup.py.
"""

from __future__ import annotations

from django.db import connection

CHANNEL = "punctual_runs"

# Any transaction that made a run claimable. pg_notify, not NOTIFY, because the
# channel and payload are parameters; PostgreSQL folds identical notifications
# of one transaction into one anyway.
NOTIFY_CLAIMABLE = "SELECT pg_notify(%(channel)s, %(kind)s)"


def runs_claimable(kind: str) -> None:
    """Announce, at the caller's commit, that runs became claimable now."""
    with connection.cursor() as cur:
        cur.execute(NOTIFY_CLAIMABLE, {"channel": CHANNEL, "kind": kind})

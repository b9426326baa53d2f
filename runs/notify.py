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

Who listens: each idle ``manage.py work`` process (dispatch/wakeup.py), and
each web process while a pull worker's claim waits (api/claim_waits.py).
Both open their LISTEN connection with ``listen_conninfo`` below.
"""

from __future__ import annotations

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import ConnectionHandler

CHANNEL = "punctual_runs"

# Any transaction that made a run claimable. pg_notify, not NOTIFY, because the
# channel and payload are parameters; PostgreSQL folds identical notifications
# of one transaction into one anyway.
NOTIFY_CLAIMABLE = "SELECT pg_notify(%(channel)s, %(kind)s)"


def runs_claimable(kind: str) -> None:
    """Announce, at the caller's commit, that runs became claimable now."""
    with connection.cursor() as cur:
        cur.execute(NOTIFY_CLAIMABLE, {"channel": CHANNEL, "kind": kind})


# A LISTEN connection only reads, so a network path that dies silently would
# go unnoticed: TCP keepalives close it within about a minute (TCP only; a
# Unix socket cannot drop that way). Until then the safety poll still runs.
# Keepalive settings in the database URL take precedence over these.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def _listen_database() -> BaseDatabaseWrapper:
    """The connection settings LISTEN uses: ``PUNCTUAL_LISTEN_DATABASE_URL``
    when set (a direct connection, when DATABASE_URL leads to a transaction
    pooler), else the Django connection's own."""
    if settings.PUNCTUAL_LISTEN_DATABASE is None:
        return connection
    return ConnectionHandler({DEFAULT_DB_ALIAS: settings.PUNCTUAL_LISTEN_DATABASE})[
        DEFAULT_DB_ALIAS
    ]


def listen_conninfo(application_name: str) -> dict:
    """The LISTEN database's libpq parameters (not Django's own options, such
    as the cursor factory), for a separate connection, with TCP keepalives
    unless the URL sets its own. It prepares nothing (psycopg's
    ``prepare_threshold`` None): it runs a few statements, once each."""
    known = {option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults()}
    params = {k: v for k, v in _listen_database().get_connection_params().items() if k in known}
    return {
        **KEEPALIVES,
        **params,
        "application_name": application_name[:63],
        "prepare_threshold": None,
    }

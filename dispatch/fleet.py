"""The fleet registry: every dispatcher and worker beats its own row.

Health (``/api/v1/health/``), ``/metrics`` and the admin dashboard read these
rows to tell who is alive. "Alive" means seen within ALIVE_WITHIN by the
database clock.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid

from django.db import connection

from core.db import DB_NOW_SQL, db_now
from dispatch.models import LagSample, ProcessHeartbeat

ALIVE_WITHIN = dt.timedelta(seconds=30)
FORGET_AFTER = dt.timedelta(days=1)
SAMPLE_RETENTION = dt.timedelta(days=2)

# Every dispatcher's and worker's beat, every 2 s: one statement and one
# transaction, stamped by the database clock. Once idle workers stopped
# polling (dispatch/wakeup.py), these beats became most of what an idle fleet
# costs the database. A process that starts again under the same name takes
# the row over, with its own pid and start.
BEAT = f"""
    INSERT INTO dispatch_processheartbeat
        (name, kind, host, pid, started_at, last_seen, in_flight, stopping)
    SELECT %(name)s, %(kind)s, %(host)s, %(pid)s, coalesce(%(started_at)s, t.now), t.now,
           %(in_flight)s, %(stopping)s
    FROM (SELECT {DB_NOW_SQL} AS now) AS t
    ON CONFLICT (name) DO UPDATE SET
        kind = EXCLUDED.kind, host = EXCLUDED.host, pid = EXCLUDED.pid,
        started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen,
        in_flight = EXCLUDED.in_flight, stopping = EXCLUDED.stopping
    RETURNING started_at
"""


def default_name(kind: str) -> str:
    return f"{kind}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Registration:
    """One process's heartbeat row."""

    def __init__(self, kind: str, name: str | None = None) -> None:
        self.kind = kind
        self.name = name or default_name(kind)
        self.started_at: dt.datetime | None = None

    def beat(self, *, in_flight: int = 0, stopping: bool = False) -> None:
        with connection.cursor() as cur:
            cur.execute(
                BEAT,
                {
                    "name": self.name,
                    "kind": self.kind,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "started_at": self.started_at,  # None: the first beat is the start
                    "in_flight": in_flight,
                    "stopping": stopping,
                },
            )
            self.started_at = cur.fetchone()[0]

    def leave(self) -> None:
        ProcessHeartbeat.objects.filter(name=self.name).delete()


def alive(kind: str, now: dt.datetime | None = None):
    now = now or db_now()
    return ProcessHeartbeat.objects.filter(kind=kind, last_seen__gte=now - ALIVE_WITHIN)


def record_lag(lag_seconds: float, fires: int, now: dt.datetime) -> None:
    LagSample.objects.create(at=now, lag_seconds=lag_seconds, fires=fires)


def prune(now: dt.datetime) -> int:
    """Forget processes silent for a day, and lag samples older than two days."""
    gone, _ = ProcessHeartbeat.objects.filter(last_seen__lt=now - FORGET_AFTER).delete()
    old, _ = LagSample.objects.filter(at__lt=now - SAMPLE_RETENTION).delete()
    return gone + old

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

from core.db import db_now
from dispatch.models import LagSample, ProcessHeartbeat

ALIVE_WITHIN = dt.timedelta(seconds=30)
FORGET_AFTER = dt.timedelta(days=1)
SAMPLE_RETENTION = dt.timedelta(days=2)


def default_name(kind: str) -> str:
    return f"{kind}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Registration:
    """One process's heartbeat row."""

    def __init__(self, kind: str, name: str | None = None) -> None:
        self.kind = kind
        self.name = name or default_name(kind)
        self.started_at: dt.datetime | None = None

    def beat(self, *, in_flight: int = 0, stopping: bool = False) -> None:
        now = db_now()
        if self.started_at is None:
            self.started_at = now
        ProcessHeartbeat.objects.update_or_create(
            name=self.name,
            defaults={
                "kind": self.kind,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started_at": self.started_at,
                "last_seen": now,
                "in_flight": in_flight,
                "stopping": stopping,
            },
        )

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

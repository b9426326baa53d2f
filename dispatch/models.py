"""Process heartbeats: who is alive in the fleet, and a little lag history.

Each dispatcher and worker upserts its own row every few seconds. Health, the
metrics endpoint and the admin dashboard read these rows; rows of processes
that have been silent for a day are pruned by the dispatcher.
"""

from __future__ import annotations

from django.db import models


class ProcessKind(models.TextChoices):
    DISPATCHER = "dispatcher", "Dispatcher"
    WORKER = "worker", "Worker"


class ProcessHeartbeat(models.Model):
    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=12, choices=ProcessKind.choices)
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    # Work the process reports about itself at its last beat.
    in_flight = models.PositiveIntegerField(default=0)
    stopping = models.BooleanField(default=False)

    class Meta:
        ordering = ["kind", "name"]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class LagSample(models.Model):
    """Dispatch lag as one dispatcher saw it at one moment (dashboard chart)."""

    at = models.DateTimeField(db_index=True)
    lag_seconds = models.FloatField()
    fires = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.lag_seconds:.2f}s at {self.at:%H:%M:%S}"

"""Alert channels and the alert ledger (docs/guides/alerts.md).

- ``Channel``: an owner's apprise URL, encrypted at rest (jobs/crypto.py),
  shown once when it is created and masked afterwards.
- ``JobChannel``: a job's own selection of its owner's channels. A job with
  none uses all of its owner's channels.
- ``Alert``: one alert for one channel, with its own state, attempts and
  lease, like a run: recorded in the transaction of the fact that causes it
  (alerts/events.py), sent by a worker (dispatch/alert_loop.py), never lost to a
  dead worker (the lease expires and another takes it over) and never in the
  way of deliveries.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

MAX_CHANNEL_NAME = 100
MAX_CHANNEL_URL = 2000


class ChannelQuerySet(models.QuerySet["Channel"]):
    def for_owner(self, user) -> ChannelQuerySet:
        """The one owner filter the API and the admin use."""
        if user.is_superuser:
            return self
        return self.filter(owner=user)


class Channel(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_channels"
    )
    name = models.CharField(max_length=MAX_CHANNEL_NAME)
    # The apprise URL holds the service's credentials (a bot token, an SMTP
    # password): only its Fernet ciphertext is stored, and ``masked`` (scheme
    # and host, alerts/channels.py) is what the admin and the API show.
    url_encrypted = models.TextField(editable=False)
    masked = models.CharField(max_length=300, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ChannelQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="alert_channel_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.masked})"


class JobChannel(models.Model):
    """A job's own channel selection (its owner's channels only: the API and
    the admin refuse another owner's)."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="+")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "channel"], name="job_channel_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} → {self.channel_id}"


class AlertedJob(models.Model):
    """A job with a failure or pause alert and no success since: its next
    successful run is a recovery (alerts/events.py ``recoveries``). Small:
    one row per job in trouble, none for the rest."""

    job = models.OneToOneField(
        "jobs.Job", primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    since = models.DateTimeField()

    def __str__(self) -> str:
        return str(self.job_id)


class AlertKind(models.TextChoices):
    FAILED = "failed", "run failed"
    PAUSED = "paused", "paused by the system"
    MISSED = "missed", "fires missed"
    RECOVERED = "recovered", "recovered"
    WORKERS_BEHIND = "workers_behind", "workers behind"
    NO_DISPATCHER = "no_dispatcher", "no dispatcher"
    TEST = "test", "test alert"


class AlertState(models.TextChoices):
    PENDING = "pending"  # waiting for its time (first send, or a retry)
    SENDING = "sending"  # a worker holds its lease and is sending it
    SENT = "sent"
    FAILED = "failed"  # its attempts ran out


class Alert(models.Model):
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="alerts")
    # None: an install event (workers behind, no dispatcher) or a test alert.
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    kind = models.CharField(max_length=20, choices=AlertKind.choices)
    state = models.CharField(max_length=10, choices=AlertState.choices, default=AlertState.PENDING)
    # How many events this alert stands for: the first, and the repeats
    # folded into it during the quiet period ("and 4 more failures").
    count = models.PositiveIntegerField(default=1)
    # The latest event's detail (a run's error, the pause note).
    detail = models.TextField(blank=True, default="")
    # When the alert was due first: one quiet period after the previous
    # alert of its job, kind and channel was due, or at once. Never changed.
    due_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    sent_at = models.DateTimeField(null=True, blank=True)
    # Indexed: pruning deletes the oldest first (runs/retention.py).
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-due_at", "-id"]
        indexes = [
            # The sender's claim (alerts/ledger.py CLAIM): due pending alerts
            # and leases expired mid-send.
            models.Index(
                fields=["next_attempt_at"],
                name="alert_claim_idx",
                condition=Q(state__in=["pending", "sending"]),
            ),
            # The quiet period's look-up of the previous alert
            # (alerts/events.py RECORD), and a job page's recent alerts.
            models.Index(fields=["job", "kind", "channel", "due_at"], name="alert_previous_idx"),
        ]
        constraints = [
            # At most one fresh (never attempted) pending alert per job, kind
            # and channel: repeats fold into it (ON CONFLICT … DO UPDATE).
            # NULLS NOT DISTINCT: install events (no job) fold as well.
            models.UniqueConstraint(
                fields=["job", "kind", "channel"],
                name="alert_one_pending",
                condition=Q(state="pending", attempts=0) & ~Q(kind="test"),
                nulls_distinct=False,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} → {self.channel.name} ({self.state})"

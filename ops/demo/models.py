"""The demo receiver's table: demo-only, installed with PUNCTUAL_DEMO=true."""

from __future__ import annotations

from django.db import models


class DemoDelivery(models.Model):
    """A webhook the built-in demo receiver got (ops/demo/views.py, ``make run``).

    One row per ``webhook-id``: a redelivery of the same run is counted in
    ``times_received``, never stored twice. That is the de-duplication every
    receiver should do.
    """

    webhook_id = models.CharField(max_length=100, unique=True)
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="+")
    attempt = models.PositiveIntegerField(null=True, blank=True)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    signature_valid = models.BooleanField(default=False)
    # Why the signature did not verify ("" when it did).
    error = models.CharField(max_length=200, blank=True, default="")
    times_received = models.PositiveIntegerField(default=1)
    # What the receiver answered the last time (its ?status= switch, or 401),
    # and the path and query string that delivery came to.
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_request = models.CharField(max_length=300, blank=True, default="")
    first_received_at = models.DateTimeField()
    last_received_at = models.DateTimeField()

    class Meta:
        ordering = ["-first_received_at"]
        verbose_name_plural = "demo deliveries"

    def __str__(self) -> str:
        return f"{self.webhook_id} ({'valid' if self.signature_valid else 'invalid'})"

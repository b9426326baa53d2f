"""The demo receiver's deliveries go when prune_runs prunes the runs they were for."""

from __future__ import annotations

from django.dispatch import receiver

from ops.demo.models import DemoDelivery
from ops.signals import runs_pruned


@receiver(runs_pruned, dispatch_uid="demo.prune_deliveries")
def prune_deliveries(sender, *, cutoff, **kwargs) -> int:
    deleted, _ = DemoDelivery.objects.filter(last_received_at__lt=cutoff).delete()
    return deleted

"""Template context for every admin page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class DispatcherOutage:
    now: datetime
    last_seen: datetime | None  # None: no dispatcher on record at all


def dispatcher_outage(request) -> dict:
    """``dispatcher_outage``: set when no dispatcher has been seen within
    ``fleet.ALIVE_WITHIN``, which is when every owner's fires go late.
    ``claim_backlog``: the reason /api/v1/health/ gives when the oldest
    claimable run has waited too long for a worker (deliveries go late).

    A callable, so that the queries run only on pages that show the banner
    (templates/admin/base_site.html), and only for signed-in staff.
    """

    def outage() -> DispatcherOutage | None:
        user = getattr(request, "user", None)
        if user is None or not (user.is_active and user.is_staff):
            return None
        from django.db.models import Max

        from core.db import db_now
        from dispatch import fleet
        from dispatch.models import ProcessHeartbeat, ProcessKind

        now = db_now()
        if fleet.alive(ProcessKind.DISPATCHER, now).exists():
            return None
        last_seen = ProcessHeartbeat.objects.filter(kind=ProcessKind.DISPATCHER).aggregate(
            last=Max("last_seen")
        )["last"]
        return DispatcherOutage(now=now, last_seen=last_seen)

    def backlog() -> str | None:
        """The health check's backlog reason (ops/health.py), for staff."""
        user = getattr(request, "user", None)
        if user is None or not (user.is_active and user.is_staff):
            return None
        from ops import health

        return health.backlog_reason(health.backlog_seconds())

    return {"dispatcher_outage": outage, "claim_backlog": backlog}


def demo_mode(request) -> dict:
    """``demo_mode``: PUNCTUAL_DEMO is on (``make run``), so every admin page
    says which webhook targets this install allows and where the demo's
    catch-all receiver is (templates/admin/punctual/demo_banner.html)."""
    from django.conf import settings

    return {"demo_mode": settings.PUNCTUAL_DEMO}

"""System checks for settings Punctual's correctness depends on."""

from __future__ import annotations

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.compatibility)
def utc_everywhere(app_configs, **kwargs):
    """Naive datetimes or a local TIME_ZONE would shift fires by the server's offset."""
    errors = []
    if not settings.USE_TZ:
        errors.append(checks.Error("USE_TZ must be True", id="punctual.E001"))
    if settings.TIME_ZONE != "UTC":
        errors.append(checks.Error('TIME_ZONE must be "UTC"', id="punctual.E002"))
    return errors

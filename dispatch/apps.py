from __future__ import annotations

from django.apps import AppConfig


class DispatchConfig(AppConfig):
    name = "dispatch"
    verbose_name = "Fleet"
    default_auto_field = "django.db.models.BigAutoField"

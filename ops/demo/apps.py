from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The built-in demo receiver and ``manage.py demo`` (``make run``).

    Installed only when PUNCTUAL_DEMO is true, so its table is never part of a
    production schema.
    """

    name = "ops.demo"
    label = "demo"
    verbose_name = "Demo"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ops.demo import pruning  # noqa: F401  (connects to ops.signals.runs_pruned)

from __future__ import annotations

from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operations on top of the engine: health, /metrics, the admin dashboard,
    the benchmark, pruning. The demo is its own app (ops.demo), installed only
    with PUNCTUAL_DEMO=true."""

    name = "ops"
    verbose_name = "Operations"

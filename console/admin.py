"""Registers the console's model admins on the Punctual admin site.

Django's autodiscovery imports this module; each admin is in the module of
its concern, and registers itself with ``@admin.register``. Their URLs follow
the models' own apps: ``/admin/jobs/job/``, ``/admin/runs/run/``.
"""

from __future__ import annotations

from console import (  # noqa: F401  (each registers its admin on import)
    alert_admin,
    event_admin,
    job_admin,
    owner_limits_admin,
    run_admin,
    token_admin,
)

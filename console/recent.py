"""The last few runs of each job on a page, in one query.

The jobs list shows every job's last run and a strip of its recent outcomes.
Fetching them per row would cost one query per job; fetching all of a page's
runs would cost a scan of their whole history. Instead, one statement takes the
newest ``per_job`` runs of each job through the ``(job_id, scheduled_at)``
index of the ``run_one_per_fire`` constraint: ``CROSS JOIN LATERAL`` with
``LIMIT``, one short backward index scan per job, however long each job's
history is.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence

from runs.models import Run

# What a strip square and a "last run" cell read; nothing else is loaded, so
# touching another field in a template would cost a query per run.
FIELDS = (
    "id",
    "job_id",
    "scheduled_at",
    "state",
    "kind",
    "reason",
    "lag_seconds",
    "started_at",
    "finished_at",
    "last_status_code",
)

# The jobs list and the dashboard, one query per page of jobs.
RECENT_RUNS = f"""
    SELECT {", ".join("r." + f for f in FIELDS)}
    FROM unnest(%s::uuid[]) AS j(id)
    CROSS JOIN LATERAL (
        SELECT {", ".join(FIELDS)}
        FROM {Run._meta.db_table}
        WHERE job_id = j.id
        ORDER BY scheduled_at DESC
        LIMIT %s
    ) AS r
"""


def recent_runs(job_ids: Sequence[uuid.UUID], per_job: int) -> dict[uuid.UUID, list[Run]]:
    """``{job_id: [newest run, ...]}`` with at most ``per_job`` runs per job."""
    by_job: dict[uuid.UUID, list[Run]] = defaultdict(list)
    if not job_ids or per_job <= 0:
        return by_job
    for run in Run.objects.raw(RECENT_RUNS, [list(job_ids), per_job]):
        by_job[run.job_id].append(run)
    for runs in by_job.values():
        runs.sort(key=lambda r: r.scheduled_at, reverse=True)
    return by_job

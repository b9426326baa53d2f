"""The last few runs of each job on a page, in one query.

The jobs list shows every job's last run and a strip of its recent outcomes.
Fetching them per row would cost one query per job; fetching all of a page's
runs would cost a scan of their whole history. Instead, one statement takes the
newest ``per_job`` runs of each job through the ``(job_id, scheduled_at)``
index of the ``run_one_per_fire`` constraint: ``CROSS JOIN LATERAL`` with
``LIMIT``, one short backward index scan per job, however long each job's
history is. The jobs list's statement also takes each job's last run
(runs/last_run.py, the API's definition), which may be older than the strip.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence

from runs.last_run import FIELDS, LAST_RUN_OF_JOB
from runs.models import Run

# A job's page: its strip of newest runs.
RECENT_RUNS = f"""
    SELECT {", ".join("r." + f for f in FIELDS)}, false AS is_last_run
    FROM unnest(%s::uuid[]) AS j(id)
    CROSS JOIN LATERAL (
        SELECT {", ".join(FIELDS)}
        FROM {Run._meta.db_table}
        WHERE job_id = j.id
        ORDER BY scheduled_at DESC
        LIMIT %s
    ) AS r
"""

# The jobs list, one query per page of jobs: the strips, and each job's last run.
RECENT_AND_LAST_RUNS = f"""
    {RECENT_RUNS}
    UNION ALL
    SELECT {", ".join("l." + f for f in FIELDS)}, true AS is_last_run
    FROM unnest(%s::uuid[]) AS j(id)
    CROSS JOIN LATERAL ({LAST_RUN_OF_JOB}) AS l
"""

Strips = dict[uuid.UUID, list[Run]]


def _strips(rows) -> Strips:
    by_job: Strips = defaultdict(list)
    for run in rows:
        by_job[run.job_id].append(run)
    for runs in by_job.values():
        runs.sort(key=lambda r: r.scheduled_at, reverse=True)
    return by_job


def recent_runs(job_ids: Sequence[uuid.UUID], per_job: int) -> Strips:
    """``{job_id: [newest run, ...]}`` with at most ``per_job`` runs per job."""
    if not job_ids or per_job <= 0:
        return defaultdict(list)
    return _strips(Run.objects.raw(RECENT_RUNS, [list(job_ids), per_job]))


def recent_and_last_runs(
    job_ids: Sequence[uuid.UUID], per_job: int
) -> tuple[Strips, dict[uuid.UUID, Run]]:
    """``recent_runs``, and ``{job_id: its last run}`` (a job without one
    left out), in one statement."""
    if not job_ids:
        return defaultdict(list), {}
    ids = list(job_ids)
    rows = list(Run.objects.raw(RECENT_AND_LAST_RUNS, [ids, max(per_job, 0), ids]))
    # is_last_run is the statement's own column, not a field of the model.
    last = {run.job_id: run for run in rows if getattr(run, "is_last_run", False)}
    return _strips(run for run in rows if not getattr(run, "is_last_run", False)), last

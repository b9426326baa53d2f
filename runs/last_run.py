"""A job's last run: what the API's ``last_run`` and the admin's "last run"
column both show (docs/guides/api.md "Jobs").

The last run is the newest run, by fire time, that was attempted: running,
retrying, succeeded or failed. A skipped, cancelled or missed run, or one
still pending, says nothing about how the job's deliveries go, so it is
never the last run; a job none of whose runs was attempted has none.

``LAST_RUN_OF_JOB`` is the one definition, a ``LATERAL`` subquery over a
page of jobs ``j``: one backward walk of the ``(job_id, scheduled_at)``
index of the ``run_one_per_fire`` constraint per job, which stops at the
first attempted run (the newest run or close to it). The API reads it alone
(``last_runs``); the admin's jobs list reads it with the strips' runs, in
the same query (console/recent.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from runs.models import Run, RunState

ATTEMPTED_STATES = (RunState.RUNNING, RunState.RETRYING, RunState.SUCCEEDED, RunState.FAILED)

# What a strip square, a "last run" cell and the API's LastRun read; nothing
# else is loaded, so touching another field would cost a query per run.
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

# The last run of the job j.id.
LAST_RUN_OF_JOB = f"""
    SELECT {", ".join(FIELDS)}
    FROM {Run._meta.db_table}
    WHERE job_id = j.id AND state IN ({", ".join(f"'{s}'" for s in ATTEMPTED_STATES)})
    ORDER BY scheduled_at DESC
    LIMIT 1
"""

# The API's job list and job detail: one query per page.
LAST_RUNS = f"""
    SELECT {", ".join("r." + f for f in FIELDS)}
    FROM unnest(%s::uuid[]) AS j(id)
    CROSS JOIN LATERAL ({LAST_RUN_OF_JOB}) AS r
"""


def last_runs(job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Run]:
    """``{job_id: its last run}``; a job without one is left out."""
    if not job_ids:
        return {}
    return {run.job_id: run for run in Run.objects.raw(LAST_RUNS, [list(job_ids)])}

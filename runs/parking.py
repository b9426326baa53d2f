"""Parked jobs, from Python (docs/concepts/misfire-and-overlap.md "Parked
while its run is active").

The dispatcher's fast path parks a job (dispatch/queries.py
DISPATCH_SIMPLE_INTERVALS) and the end of the run it waits for unparks it
(the trigger run_unparks_jobs, runs/migrations/0015). An owner's verb that
pauses, deletes or re-plans a parked job ends the parking first, at its own
``now`` (runs/job_verbs.py settle_due_fires): the fires declined until then
are counted on the skipped run, and the job has a next fire again that the
verb then treats as any other.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.db import connection

# The database function of migrations 0014 and 0015, then the job's next fire it set.
UNPARK = "SELECT jobs_unpark(%s, %s)"
NEXT_FIRE = "SELECT next_fire_at FROM jobs_job WHERE id = %s"


def unpark(job_id: uuid.UUID, now: dt.datetime) -> dt.datetime | None:
    """End the job's parking at ``now`` (the caller holds its row) and
    return its next fire (None: past its ``end_at``, finished)."""
    with connection.cursor() as cur:
        cur.execute(UNPARK, [job_id, now])
        cur.execute(NEXT_FIRE, [job_id])
        return cur.fetchone()[0]

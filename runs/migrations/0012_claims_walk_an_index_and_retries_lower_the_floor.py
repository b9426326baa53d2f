# Every claim walks an index in its own order (runs/leases.py ORDERED_WALK),
# and a retried run lowers the active floor (runs/partitions.py).
#
# - run_running_idx: running runs by (target_kind, scheduled_at), the order
#   in which CLAIM_EXPIRED takes over expired leases. Before it, that claim
#   ordered by lease_until, which no index gives (heartbeats rewrite it, and
#   it stays out of every index so that they are HOT updates): its only plan
#   was a Sort, which the claim's enable_sort = off priced at 1e10 on
#   PostgreSQL 15 to 17, far past jit_above_cost.
# - run_claim_pull_owner_idx: a pull worker's due runs by (owner_id,
#   available_at), the order of its claim over all its owner's jobs
#   (run_claim_pull_idx serves a claim for one job).
# - runs_active_floor_lower(at): lowers the floor to at's day, under the
#   shared advisory lock that raise_active_floor() takes exclusively. The
#   insert trigger now calls it, and so does Run.retry, the one statement
#   that moves a finished run back to waiting: a retried run older than the
#   floor is claimable at once, not after the next raise lowers it.

from django.db import migrations, models

# runs/partitions.py FLOOR_LOCK_KEY, spelled here as the migration's own.
FLOOR_LOCK_KEY = 0x464C4F52  # "FLOR"

FORWARD = f"""
CREATE FUNCTION runs_active_floor_lower(oldest timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({FLOOR_LOCK_KEY});
    -- A statement of its own, after the lock: it reads the floor as the last
    -- raise committed it.
    UPDATE runs_active_floor SET since = date_trunc('day', oldest, 'UTC')
    WHERE since > oldest;
END $$;

CREATE OR REPLACE FUNCTION runs_active_floor_cover() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    oldest timestamptz;
BEGIN
    SELECT min(scheduled_at) INTO oldest FROM new_runs
    WHERE state IN ('pending', 'running', 'retrying');
    IF oldest IS NOT NULL THEN
        PERFORM runs_active_floor_lower(oldest);
    END IF;
    RETURN NULL;
END $$;
"""

BACKWARD = f"""
CREATE OR REPLACE FUNCTION runs_active_floor_cover() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    oldest timestamptz;
BEGIN
    SELECT min(scheduled_at) INTO oldest FROM new_runs
    WHERE state IN ('pending', 'running', 'retrying');
    IF oldest IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock_shared({FLOOR_LOCK_KEY});
    UPDATE runs_active_floor SET since = date_trunc('day', oldest, 'UTC')
    WHERE since > oldest;
    RETURN NULL;
END $$;
DROP FUNCTION runs_active_floor_lower(timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0011_active_floor"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["target_kind", "scheduled_at"],
                condition=models.Q(state="running"),
                name="run_running_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["owner_id", "available_at"],
                condition=models.Q(state__in=["pending", "retrying"], target_kind="pull"),
                name="run_claim_pull_owner_idx",
            ),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]

# The active floor (runs/partitions.py "The active floor"): one row holding a
# time at or before the scheduled_at of every run that is pending, running or
# retrying. The hot statements that look for such runs bound scheduled_at by
# it, so the planner keeps only the days from the floor on instead of every
# day that retention keeps.
#
# - runs_active_floor: the row. It starts at -infinity (no bound) and the
#   dispatchers' housekeeping raises it to the oldest unfinished run's day.
#   (The start is 0001-01-01, not -infinity, which Python cannot read.)
# - runs_active_floor_cover: after every INSERT statement on runs_run, the
#   oldest unfinished run it wrote, if any, lowers the floor to its day. It
#   first takes a shared advisory lock, which the raise takes exclusively, so
#   a raise never computes past a run that is written but not yet committed;
#   its UPDATE waits for the readers that hold the row FOR SHARE.
#   A statement trigger on the parent sees the rows of every partition (its
#   transition table); one that wrote no unfinished run, or none older than
#   the floor, writes nothing.

from django.db import migrations

# runs/partitions.py FLOOR_LOCK_KEY, spelled here as the migration's own.
FLOOR_LOCK_KEY = 0x464C4F52  # "FLOR"

FORWARD = f"""
CREATE TABLE runs_active_floor (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    since timestamptz NOT NULL
);
INSERT INTO runs_active_floor (one, since) VALUES (true, '0001-01-01T00:00:00Z');

CREATE FUNCTION runs_active_floor_cover() RETURNS trigger
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
    -- A statement of its own, after the lock: it reads the floor as the last
    -- raise committed it.
    UPDATE runs_active_floor SET since = date_trunc('day', oldest, 'UTC')
    WHERE since > oldest;
    RETURN NULL;
END $$;

CREATE TRIGGER runs_active_floor_cover
    AFTER INSERT ON runs_run REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION runs_active_floor_cover();
"""

BACKWARD = """
DROP TRIGGER runs_active_floor_cover ON runs_run;
DROP FUNCTION runs_active_floor_cover();
DROP TABLE runs_active_floor;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_job_id_distinct_on_partitions"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]

"""Schedule history for the jobs that exist already, and the guard that keeps
it complete (jobs/history.py).

Existing jobs get one open span from their creation, in their current state:
what happened before this migration was not recorded.

The guard is a deferred constraint trigger: at commit, every job whose state,
deletion or schedule was written in the transaction must have an open span
that matches its row. A code path that changes a job without calling
``history.record_spans`` fails instead of leaving a hole in the history. It
fires only when one of those columns is in the UPDATE's SET list, so the
dispatcher's ``next_fire_at`` updates never pay for it.
"""

from django.db import migrations

BACKFILL = """
    INSERT INTO jobs_schedulespan (
        job_id, started_at, ended_at, state, cron, interval_seconds, timezone,
        start_at, anchor, missed_count
    )
    SELECT j.id, j.created_at, NULL,
           CASE WHEN j.deleted_at IS NOT NULL THEN 'deleted' ELSE j.state END,
           j.cron, j.interval_seconds, j.timezone, j.start_at, j.created_at, 0
    FROM jobs_job AS j
    WHERE NOT EXISTS (
        SELECT 1 FROM jobs_schedulespan AS s WHERE s.job_id = j.id AND s.ended_at IS NULL)
"""

GUARD = """
CREATE FUNCTION jobs_schedule_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A deferred trigger's NEW is the row as that statement left it; later
    -- statements of the transaction may have changed it again. Check the
    -- row as it is at commit.
    IF EXISTS (
        SELECT 1 FROM jobs_job AS j
        WHERE j.id = NEW.id AND NOT EXISTS (
            SELECT 1 FROM jobs_schedulespan AS s
            WHERE s.job_id = j.id AND s.ended_at IS NULL
              AND s.state = CASE WHEN j.deleted_at IS NOT NULL THEN 'deleted' ELSE j.state END
              AND s.cron IS NOT DISTINCT FROM j.cron
              AND s.interval_seconds IS NOT DISTINCT FROM j.interval_seconds
              AND s.timezone = j.timezone
              AND s.start_at IS NOT DISTINCT FROM j.start_at
              AND s.anchor = j.created_at)
    ) THEN
        RAISE EXCEPTION 'job % changed its state or schedule without a schedule history span', NEW.id
            USING HINT = 'call jobs.history.record_spans() in the same transaction';
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER job_schedule_history_guard
    AFTER INSERT OR UPDATE OF state, deleted_at, cron, interval_seconds, timezone, start_at, created_at
    ON jobs_job DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION jobs_schedule_history_guard();
"""

UNGUARD = """
DROP TRIGGER IF EXISTS job_schedule_history_guard ON jobs_job;
DROP FUNCTION IF EXISTS jobs_schedule_history_guard();
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0005_schedule_history")]

    operations = [
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.RunSQL(GUARD, UNGUARD),
    ]

"""End dates and one-off jobs (docs/concepts/schedules.md "End dates and
one-off jobs"): a job's ``end_at`` (no fire after it) and ``run_at`` (one
fire, instead of a cron or an interval), on the job and on its schedule
history's spans. Existing jobs and spans get neither.

The schedule history's guard (migration 0006) compares the two new columns
too: a job whose end or one-off time changes needs a new span, as for any
other schedule change.
"""

from django.conf import settings
import importlib

from django.db import migrations, models

GUARD_0006 = importlib.import_module("jobs.migrations.0006_schedule_history_guard").GUARD

GUARD = """
CREATE OR REPLACE FUNCTION jobs_schedule_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
              AND s.anchor = j.created_at
              AND s.run_at IS NOT DISTINCT FROM j.run_at
              AND s.end_at IS NOT DISTINCT FROM j.end_at)
    ) THEN
        RAISE EXCEPTION 'job % changed its state or schedule without a schedule history span', NEW.id
            USING HINT = 'call jobs.history.record_spans() in the same transaction';
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER job_schedule_history_guard ON jobs_job;
CREATE CONSTRAINT TRIGGER job_schedule_history_guard
    AFTER INSERT OR UPDATE OF state, deleted_at, cron, interval_seconds, timezone, start_at,
                              created_at, run_at, end_at
    ON jobs_job DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION jobs_schedule_history_guard();
"""

# Back to migration 0006's guard.
UNGUARD = (
    "DROP TRIGGER IF EXISTS job_schedule_history_guard ON jobs_job;"
    " DROP FUNCTION IF EXISTS jobs_schedule_history_guard();" + GUARD_0006
)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0015_job_http_options"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="job",
            name="job_exactly_one_schedule",
        ),
        migrations.AddField(
            model_name="job",
            name="end_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="run_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedulespan",
            name="end_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedulespan",
            name="run_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("cron__isnull", False),
                        ("interval_seconds__isnull", True),
                        ("run_at__isnull", True),
                    ),
                    models.Q(
                        ("cron__isnull", True),
                        ("interval_seconds__isnull", False),
                        ("run_at__isnull", True),
                    ),
                    models.Q(
                        ("cron__isnull", True),
                        ("interval_seconds__isnull", True),
                        ("run_at__isnull", False),
                    ),
                    _connector="OR",
                ),
                name="job_exactly_one_schedule",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("end_at__isnull", True),
                    models.Q(
                        models.Q(
                            ("start_at__isnull", True),
                            ("end_at__gt", models.F("start_at")),
                            _connector="OR",
                        ),
                        models.Q(
                            ("run_at__isnull", True),
                            ("end_at__gt", models.F("run_at")),
                            _connector="OR",
                        ),
                    ),
                    _connector="OR",
                ),
                name="job_end_after_start",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("run_at__isnull", True), ("start_at__isnull", True), _connector="OR"
                ),
                name="job_one_off_has_no_start",
            ),
        ),
        migrations.RunSQL(GUARD, UNGUARD),
    ]

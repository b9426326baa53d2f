# The partial unique index behind "under skip and queue at most one run of a
# job is running" (Run.Meta constraint run_one_running_per_exclusive_job) was
# created by 0001 and then dropped, unnoticed, by 0002: when the foreign key's
# db_index went to False, Django dropped every plain btree index on job_id
# alone, and this unique index is one. The migration state still lists the
# constraint, so only the database is repaired here.
#
# CONCURRENTLY: the runs table may be large, and a plain CREATE INDEX would
# block the claims and the dispatcher while it is built. A build that fails
# (a job with two exclusive runs running at that moment) leaves an invalid
# index behind: drop it and run `migrate` again once those runs have ended.

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runs", "0004_attempt_outcome_interrupted"),
    ]

    operations = [
        migrations.RunSQL(
            sql=(
                "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS run_one_running_per_exclusive_job"
                " ON runs_run (job_id) WHERE state = 'running' AND exclusive"
            ),
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]

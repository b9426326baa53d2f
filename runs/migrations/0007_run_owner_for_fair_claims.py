# Every run carries its job's owner (runs_run.owner_id), so that the worker's
# claim can share its batch between owners (runs/leases.py FAIR_CLAIM) with
# index probes per owner instead of a join to every job.
#
# - The column is added to the partitioned table (every day's partition gets
#   it), filled from the jobs, then made NOT NULL. A job's owner never changes
#   once the job exists (the admin shows it read-only on an existing job), so
#   the copy never goes stale.
# - The hot insert paths (the dispatcher's set-based inserts, create_planned,
#   create_for_fires, trigger) write the owner themselves. The trigger
#   run_owner_from_job fills it for any other insert that leaves it out (a
#   script, a test helper): its WHEN clause is evaluated per row in C, so a
#   path that writes the owner pays no function call.
# - run_claim_owner_idx: (owner_id, available_at) over due-able webhook runs
#   only, like run_claim_webhook_idx, so it stays tiny however much history
#   the table keeps. Its first entry after an owner is the next owner with
#   waiting runs and that owner's oldest available_at (runs/leases.py
#   WAITING_OWNERS); an owner's entries in available_at order are that owner's
#   claim order.
#
# The fill rewrites every row once and holds the tables' lock meanwhile: on a
# large install, stop the dispatchers and workers while it runs.

from django.db import migrations, models

FORWARD = """
ALTER TABLE runs_run ADD COLUMN owner_id bigint;
UPDATE runs_run AS r SET owner_id = j.owner_id FROM jobs_job AS j WHERE j.id = r.job_id;
-- Runs whose job row is gone (none should exist: owners and jobs are deleted
-- through the ORM, which deletes their runs first) cannot be claimed anyway.
DELETE FROM runs_run WHERE owner_id IS NULL;
ALTER TABLE runs_run ALTER COLUMN owner_id SET NOT NULL;

CREATE FUNCTION run_owner_from_job() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT owner_id INTO NEW.owner_id FROM jobs_job WHERE id = NEW.job_id;
    RETURN NEW;
END $$;
CREATE TRIGGER run_owner_from_job
    BEFORE INSERT ON runs_run FOR EACH ROW
    WHEN (NEW.owner_id IS NULL)
    EXECUTE FUNCTION run_owner_from_job();

CREATE INDEX run_claim_owner_idx ON runs_run (owner_id, available_at)
    WHERE state IN ('pending', 'retrying') AND target_kind = 'webhook';
"""

BACKWARD = """
DROP INDEX run_claim_owner_idx;
DROP TRIGGER run_owner_from_job ON runs_run;
DROP FUNCTION run_owner_from_job();
ALTER TABLE runs_run DROP COLUMN owner_id;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0006_partition_runs_by_day"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
            state_operations=[
                migrations.AddField(
                    model_name="run",
                    name="owner_id",
                    field=models.BigIntegerField(blank=True, editable=False, null=True),
                ),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=models.Q(
                            ("state__in", ["pending", "retrying"]), ("target_kind", "webhook")
                        ),
                        fields=["owner_id", "available_at"],
                        name="run_claim_owner_idx",
                    ),
                ),
            ],
        ),
    ]

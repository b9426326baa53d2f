# Runs and attempts become range-partitioned by scheduled_at, one partition a
# UTC day, plus a default partition each (runs/partitions.py), so retention
# drops a whole day at a time instead of deleting rows one by one.
#
# The existing tables are converted in place, in one transaction: renamed
# aside, the partitioned tables made under the old names, the rows copied in
# (an attempt takes its run's scheduled_at), the indexes built once the rows
# are in, and the old tables dropped. Days that have rows within the
# retention window, and today plus a week ahead, get their partitions; older
# rows land in the default partition and are pruned row by row. The copy
# holds an exclusive lock on both tables: on a large install, stop the
# dispatchers and workers while it runs.
#
# What changes in the database, with Django's view kept where it still holds:
# - runs_run's primary key is (id, scheduled_at) (a partitioned table's keys
#   must include the partition key); Django still treats id as the pk, which
#   holds because the run id is the fire's uuid5 (runs/identity.py).
# - runs_attempt gets scheduled_at (its run's), its key becomes
#   (id, scheduled_at), and (run, number) unique becomes (run, number,
#   scheduled_at): the same rule, as an attempt's scheduled_at is its run's.
#   Its id keeps counting from a plain sequence (identity columns are not
#   allowed on a partitioned table before PostgreSQL 17).
# - The foreign key from attempts to runs is dropped in the database (one into
#   a partitioned table would have to be composite, and would make dropping a
#   day's partitions check every attempt); the ORM relation stays. Attempts
#   are only written by statements that read their run in the same statement.
# - The partial unique index run_one_running_per_exclusive_job cannot exist on
#   a partitioned table (a unique index must include scheduled_at, and the
#   guard is about any two runs of a job). A table with one row per job that
#   has an exclusive run running, kept by a trigger, holds the same rule in
#   its primary key, under the same name (step 6).

from django.conf import settings
from django.db import migrations, models

RETENTION_DAYS = int(getattr(settings, "PUNCTUAL_RUN_RETENTION_DAYS", 30))
DAYS_AHEAD = 7

CONVERT = f"""
-- 1. Set the old tables aside, freeing every name the new ones take.
ALTER TABLE runs_attempt RENAME TO runs_attempt_old;
ALTER TABLE runs_run RENAME TO runs_run_old;
ALTER TABLE runs_attempt_old ALTER COLUMN id DROP IDENTITY IF EXISTS;
DO $$
DECLARE ix record;
BEGIN
    FOR ix IN
        SELECT conname, conrelid::regclass AS tbl FROM pg_constraint
        WHERE conrelid IN ('runs_run_old'::regclass, 'runs_attempt_old'::regclass)
          AND contype IN ('f', 'u', 'p')
        ORDER BY contype = 'p'
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', ix.tbl, ix.conname);
    END LOOP;
    FOR ix IN
        SELECT indexrelid::regclass AS name FROM pg_index
        WHERE indrelid IN ('runs_run_old'::regclass, 'runs_attempt_old'::regclass)
    LOOP
        EXECUTE format('DROP INDEX %s', ix.name);
    END LOOP;
END $$;

-- 2. The partitioned tables, with the old columns (and their checks).
CREATE TABLE runs_run (LIKE runs_run_old INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (scheduled_at);
CREATE SEQUENCE runs_attempt_id_seq;
CREATE TABLE runs_attempt (
    LIKE runs_attempt_old INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    scheduled_at timestamp with time zone NOT NULL
) PARTITION BY RANGE (scheduled_at);
ALTER TABLE runs_attempt ALTER COLUMN id SET DEFAULT nextval('runs_attempt_id_seq');
ALTER SEQUENCE runs_attempt_id_seq OWNED BY runs_attempt.id;

-- 3. The partitions: every day with rows in the retention window, and today
-- plus {DAYS_AHEAD} days ahead; the default partitions take the rest.
DO $$
DECLARE
    day date;
    part text;
BEGIN
    FOR day IN
        SELECT d::date FROM generate_series(
            (now() AT TIME ZONE 'UTC')::date::timestamp,
            (now() AT TIME ZONE 'UTC')::date::timestamp + interval '{DAYS_AHEAD} days',
            interval '1 day') AS d
        UNION
        SELECT DISTINCT (scheduled_at AT TIME ZONE 'UTC')::date FROM runs_run_old
        WHERE scheduled_at >= ((now() AT TIME ZONE 'UTC')::date - {RETENTION_DAYS + 1})::timestamp
                              AT TIME ZONE 'UTC'
          AND scheduled_at < ((now() AT TIME ZONE 'UTC')::date + {DAYS_AHEAD + 1})::timestamp
                             AT TIME ZONE 'UTC'
    LOOP
        FOREACH part IN ARRAY ARRAY['runs_run', 'runs_attempt'] LOOP
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                part || '_p' || to_char(day, 'YYYYMMDD'), part,
                day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
        END LOOP;
    END LOOP;
END $$;
CREATE TABLE runs_run_default PARTITION OF runs_run DEFAULT;
CREATE TABLE runs_attempt_default PARTITION OF runs_attempt DEFAULT;

-- 4. The rows.
INSERT INTO runs_run SELECT * FROM runs_run_old;
INSERT INTO runs_attempt SELECT a.*, r.scheduled_at
    FROM runs_attempt_old AS a JOIN runs_run_old AS r ON r.id = a.run_id;
SELECT setval('runs_attempt_id_seq', coalesce(max(id), 0) + 1, false) FROM runs_attempt;
DROP TABLE runs_attempt_old;
DROP TABLE runs_run_old;

-- 5. Keys and indexes, on every partition, under the names Django knows.
ALTER TABLE runs_run ADD CONSTRAINT runs_run_pkey PRIMARY KEY (id, scheduled_at);
ALTER TABLE runs_run ADD CONSTRAINT run_one_per_fire UNIQUE (job_id, scheduled_at);
CREATE INDEX run_claim_webhook_idx ON runs_run (available_at)
    WHERE state IN ('pending', 'retrying') AND target_kind = 'webhook';
CREATE INDEX run_claim_pull_idx ON runs_run (job_id, available_at)
    WHERE state IN ('pending', 'retrying') AND target_kind = 'pull';
CREATE INDEX run_active_idx ON runs_run (job_id, scheduled_at)
    WHERE state IN ('pending', 'running', 'retrying');
CREATE INDEX run_scheduled_at_idx ON runs_run (scheduled_at);
ALTER TABLE runs_attempt ADD CONSTRAINT runs_attempt_pkey PRIMARY KEY (id, scheduled_at);
ALTER TABLE runs_attempt ADD CONSTRAINT attempt_unique_number
    UNIQUE (run_id, number, scheduled_at);

-- 6. At most one running run per job under skip/queue (docs/design/choices.md
-- "Runs partitioned by day"): the rule of the former partial unique index, kept by a small
-- table with one row per job that has an exclusive run running, maintained
-- by a trigger on every change that starts or ends one. Its primary key is
-- the guard: a second exclusive run of a job that becomes running violates
-- it (unique_violation, under the former index's name), and two
-- transactions that try at once wait on each other as they did on the index.
-- A probe of every partition per claimed run (what a check in the trigger
-- would need) costs a partition count's worth of index scans; an insert
-- into this table costs one.
CREATE TABLE runs_exclusive_running (
    job_id uuid NOT NULL,
    run_id uuid NOT NULL,
    CONSTRAINT run_one_running_per_exclusive_job PRIMARY KEY (job_id)
);
INSERT INTO runs_exclusive_running (job_id, run_id)
    SELECT job_id, id FROM runs_run WHERE state = 'running' AND exclusive;
CREATE FUNCTION run_one_running_per_exclusive_job() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.state = 'running' AND OLD.exclusive THEN
        DELETE FROM runs_exclusive_running WHERE job_id = OLD.job_id AND run_id = OLD.id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'running' AND NEW.exclusive THEN
        INSERT INTO runs_exclusive_running (job_id, run_id) VALUES (NEW.job_id, NEW.id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER run_one_running_per_exclusive_job_ins
    AFTER INSERT ON runs_run FOR EACH ROW
    WHEN (NEW.state = 'running' AND NEW.exclusive)
    EXECUTE FUNCTION run_one_running_per_exclusive_job();
CREATE TRIGGER run_one_running_per_exclusive_job_upd
    AFTER UPDATE ON runs_run FOR EACH ROW
    WHEN ((OLD.state = 'running' AND OLD.exclusive) IS DISTINCT FROM
          (NEW.state = 'running' AND NEW.exclusive)
          OR (NEW.state = 'running' AND NEW.exclusive
              AND (OLD.job_id <> NEW.job_id OR OLD.id <> NEW.id)))
    EXECUTE FUNCTION run_one_running_per_exclusive_job();
CREATE TRIGGER run_one_running_per_exclusive_job_del
    AFTER DELETE ON runs_run FOR EACH ROW
    WHEN (OLD.state = 'running' AND OLD.exclusive)
    EXECUTE FUNCTION run_one_running_per_exclusive_job();
-- Emptying the runs (the tests' flush, the bench's reset) empties it too.
CREATE FUNCTION run_exclusive_running_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE runs_exclusive_running;
    RETURN NULL;
END $$;
CREATE TRIGGER run_one_running_per_exclusive_job_truncate
    AFTER TRUNCATE ON runs_run FOR EACH STATEMENT
    EXECUTE FUNCTION run_exclusive_running_truncate();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0005_restore_run_one_running_per_exclusive_job"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(CONVERT)],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="run", name="run_one_running_per_exclusive_job"
                ),
                migrations.RemoveConstraint(model_name="attempt", name="attempt_unique_number"),
                migrations.AlterField(
                    model_name="attempt",
                    name="run",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="attempts",
                        to="runs.run",
                    ),
                ),
                migrations.AddField(
                    model_name="attempt",
                    name="scheduled_at",
                    field=models.DateTimeField(),
                    preserve_default=False,
                ),
                migrations.AddConstraint(
                    model_name="attempt",
                    constraint=models.UniqueConstraint(
                        fields=("run", "number", "scheduled_at"), name="attempt_unique_number"
                    ),
                ),
            ],
        ),
    ]

"""Each owner's live jobs, counted by triggers on jobs_job, so that the
owner's jobs limit (jobs/quotas.py ``new_jobs_refusal``) reads one row
instead of counting every live job of the owner on each create: that count
grew with the owner's jobs, to several milliseconds per create at 20,000.

``jobs_live_jobs`` has one row per owner who ever had a live job: ``live``
is the number of their jobs whose ``deleted_at`` is NULL. Every way a row of
jobs_job changes that number keeps it exact, in the same transaction:

- an INSERT statement (one trigger per statement, over its new rows: a bulk
  create of 1,000 jobs is one upsert);
- an UPDATE that sets ``deleted_at`` or moves a job to another owner (per
  row, only when one of the two changes: the dispatcher's updates of
  ``next_fire_at`` never fire it);
- a DELETE statement (an owner deleted with their jobs);
- a TRUNCATE (the tests' flush, the bench's reset) empties it.

A count is changed only under the owner's row lock on it, so concurrent
creates and deletes of one owner's jobs add up.
"""

from django.db import migrations

CREATE = """
CREATE TABLE jobs_live_jobs (
    owner_id integer PRIMARY KEY,
    live bigint NOT NULL CHECK (live >= 0)
);
INSERT INTO jobs_live_jobs (owner_id, live)
    SELECT owner_id, count(*) FROM jobs_job WHERE deleted_at IS NULL GROUP BY owner_id;

-- An increment may be an owner's first live job; a decrement never is (and
-- an INSERT of a negative count would fail the CHECK before its conflict).
CREATE FUNCTION jobs_live_jobs_add(owner integer, n bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF n >= 0 THEN
        INSERT INTO jobs_live_jobs AS c (owner_id, live) VALUES (owner, n)
        ON CONFLICT (owner_id) DO UPDATE SET live = c.live + EXCLUDED.live;
    ELSE
        UPDATE jobs_live_jobs SET live = live + n WHERE owner_id = owner;
    END IF;
END $$;

CREATE FUNCTION jobs_live_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobs_live_jobs_add(owner_id, count(*))
    FROM inserted WHERE deleted_at IS NULL GROUP BY owner_id;
    RETURN NULL;
END $$;
CREATE TRIGGER job_live_count_insert
    AFTER INSERT ON jobs_job REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_live_jobs_inserted();

CREATE FUNCTION jobs_live_jobs_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.deleted_at IS NULL THEN
        PERFORM jobs_live_jobs_add(OLD.owner_id, -1);
    END IF;
    IF NEW.deleted_at IS NULL THEN
        PERFORM jobs_live_jobs_add(NEW.owner_id, 1);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER job_live_count_update
    AFTER UPDATE OF deleted_at, owner_id ON jobs_job FOR EACH ROW
    WHEN ((OLD.deleted_at IS NULL) IS DISTINCT FROM (NEW.deleted_at IS NULL)
          OR OLD.owner_id IS DISTINCT FROM NEW.owner_id)
    EXECUTE FUNCTION jobs_live_jobs_changed();

CREATE FUNCTION jobs_live_jobs_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobs_live_jobs_add(owner_id, -count(*))
    FROM deleted WHERE deleted_at IS NULL GROUP BY owner_id;
    RETURN NULL;
END $$;
CREATE TRIGGER job_live_count_delete
    AFTER DELETE ON jobs_job REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_live_jobs_deleted();

CREATE FUNCTION jobs_live_jobs_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE jobs_live_jobs;
    RETURN NULL;
END $$;
CREATE TRIGGER job_live_count_truncate
    AFTER TRUNCATE ON jobs_job FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_live_jobs_truncate();
"""

DROP = """
DROP TRIGGER job_live_count_insert ON jobs_job;
DROP TRIGGER job_live_count_update ON jobs_job;
DROP TRIGGER job_live_count_delete ON jobs_job;
DROP TRIGGER job_live_count_truncate ON jobs_job;
DROP FUNCTION jobs_live_jobs_inserted(), jobs_live_jobs_changed(), jobs_live_jobs_deleted(),
    jobs_live_jobs_truncate(), jobs_live_jobs_add(integer, bigint);
DROP TABLE jobs_live_jobs;
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0010_job_paused_by_system_or_owner")]

    operations = [migrations.RunSQL(CREATE, reverse_sql=DROP)]

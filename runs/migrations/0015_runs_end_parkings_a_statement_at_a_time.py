"""The end of a parking, a statement at a time (docs/concepts/misfire-and-overlap.md
"Parked while its run is active").

Migration 0014 ended a parking from a row trigger: for each run of an
exclusive job leaving the active states, ``jobs_unpark`` locked the job, then
updated the skipped run and the job, each a statement of its own. A
completion of 200 runs of parked jobs ran 600 single-row statements, and
each statement on the partitioned ``runs_run`` opened every partition.
Measured under overload (docs/benchmarks.md "Overload": 80,000 jobs every
5 s, PostgreSQL 18), that trigger was 21.6 s of the 49.6 s of PostgreSQL's
CPU, about 270 µs per parking ended: more than the claim of a run.

Now the trigger ``run_unparks_jobs`` fires once per statement that updates
runs, reads the runs that statement moved out of the active states from its
transition tables, and ends all their jobs' parkings in one statement
(``jobs_unpark_all``): the jobs locked in id order (two completions of shared
jobs lock them in the same order), then one update of their skipped runs and
one of the jobs. What a parking's end writes is unchanged: the fires declined
are the first one and each one an interval later before ``upto`` (at least
the first, none past ``end_at``), counted on the skipped run; the job's next
fire is the first from ``upto`` on (NULL past ``end_at``). ``upto`` is the
run's ``finished_at`` (now() for a run without one); two runs of one job
ending in one statement end its parking at the earlier.

A trigger with transition tables cannot name its columns (``UPDATE OF
state``), so every update of runs fires it: a claim or a heartbeat pays for
one pass over its new rows, which finds no run ended. Its own update of the
skipped runs fires it again, and that finds none either.

``jobs_unpark(job, upto)``, which the owner verbs call (runs/job_verbs.py
settle_due_fires), is now ``jobs_unpark_all`` of one job.
"""

from importlib import import_module

from django.db import migrations

PARKED_JOBS = import_module("runs.migrations.0014_parked_jobs")

ACTIVE = "('pending', 'running', 'retrying')"

UNPARK_ALL = f"""
CREATE FUNCTION jobs_unpark_all(jobs uuid[], uptos timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- Each table is also asked for ``= ANY(jobs)``, which every scan can take
    -- as its index condition whatever the join: PL/pgSQL keeps the plan it
    -- made first in a session, and one made while the day's partition was
    -- nearly empty (a new day, or after a TRUNCATE) joined the skipped runs
    -- with a scan of the whole of run_fire_range_idx per job, the join's
    -- keys a filter. Under overload that was 23,626 index entries read per
    -- job, a completion of 261 runs took 3.6 s, and the workers starved
    -- (auto_explain, bench e2e at 80,000 jobs on 18 and 15).
    WITH ended AS (
        SELECT u.job_id, min(u.upto) AS upto
        FROM unnest(jobs, uptos) AS u(job_id, upto)
        GROUP BY u.job_id
    ), parked AS (
        SELECT j.id, j.parked_since, j.interval_seconds, j.end_at, e.upto
        FROM jobs_job AS j JOIN ended AS e ON e.job_id = j.id
        WHERE j.id = ANY(jobs) AND j.parked_since IS NOT NULL
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ), declined AS (
        -- Only interval jobs are parked, and an edit unparks before it
        -- changes the schedule; should one be found without an interval, the
        -- planned path takes it from upto (a cron's fires are found from any
        -- instant).
        SELECT p.id, p.parked_since, p.interval_seconds, p.upto,
               CASE WHEN p.interval_seconds IS NULL THEN 1
                    WHEN p.end_at IS NULL THEN c.until_upto
                    ELSE least(c.until_upto, greatest(1, floor(
                        extract(epoch FROM p.end_at - p.parked_since) / p.interval_seconds) + 1))
               END::bigint AS fires,
               p.end_at
        FROM parked AS p, LATERAL (
            SELECT greatest(1, ceil(
                extract(epoch FROM p.upto - p.parked_since) / p.interval_seconds)) AS until_upto
        ) AS c
    ), counted AS (
        SELECT d.id, d.parked_since, d.fires,
               CASE WHEN d.interval_seconds IS NULL THEN d.upto
                    WHEN d.end_at IS NULL OR n.at <= d.end_at THEN n.at
               END AS nxt
        FROM declined AS d, LATERAL (
            SELECT d.parked_since + make_interval(secs => d.fires * d.interval_seconds) AS at
        ) AS n
    ), skipped AS (
        UPDATE runs_run AS r SET fires = c.fires
        FROM counted AS c
        WHERE r.job_id = c.id AND r.scheduled_at = c.parked_since AND r.fires IS NULL
          AND r.job_id = ANY(jobs)
    )
    UPDATE jobs_job AS j SET next_fire_at = c.nxt, parked_since = NULL
    FROM counted AS c
    WHERE j.id = c.id AND j.id = ANY(jobs);
END
$$;

DROP TRIGGER run_unparks_job ON runs_run;
DROP FUNCTION runs_unpark_job();
DROP FUNCTION jobs_unpark(uuid, timestamptz);

CREATE FUNCTION jobs_unpark(job uuid, upto timestamptz)
RETURNS void LANGUAGE sql AS $$
    SELECT jobs_unpark_all(ARRAY[job], ARRAY[upto]);
$$;

CREATE FUNCTION runs_unpark_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    jobs uuid[];
    uptos timestamptz[];
BEGIN
    -- A claim or a heartbeat ends no run: one pass over its new rows.
    IF NOT EXISTS (
        SELECT 1 FROM runs_after WHERE exclusive AND state NOT IN {ACTIVE}
    ) THEN
        RETURN NULL;
    END IF;
    -- The runs that were active before the statement and are not after it:
    -- a run's two rows (before, after) grouped by its key, not joined. The
    -- planner has no row count for a transition table read inside a
    -- data-modifying CTE (a completion's) and planned the join as a nested
    -- loop, 200 x 200 rows: 6 ms a completion (auto_explain, under overload).
    SELECT array_agg(e.job_id), array_agg(e.upto) INTO jobs, uptos
    FROM (
        SELECT r.job_id, max(r.upto) AS upto
        FROM (
            SELECT id, scheduled_at, job_id, coalesce(finished_at, now()) AS upto
            FROM runs_after WHERE exclusive AND state NOT IN {ACTIVE}
            UNION ALL
            SELECT id, scheduled_at, job_id, NULL FROM runs_before WHERE state IN {ACTIVE}
        ) AS r
        GROUP BY r.id, r.scheduled_at, r.job_id
        HAVING count(*) = 2
    ) AS e;
    IF jobs IS NOT NULL THEN
        PERFORM jobs_unpark_all(jobs, uptos);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER run_unparks_jobs
    AFTER UPDATE ON runs_run
    REFERENCING OLD TABLE AS runs_before NEW TABLE AS runs_after
    FOR EACH STATEMENT EXECUTE FUNCTION runs_unpark_jobs();
"""

BACK = """
DROP TRIGGER run_unparks_jobs ON runs_run;
DROP FUNCTION runs_unpark_jobs();
DROP FUNCTION jobs_unpark(uuid, timestamptz);
DROP FUNCTION jobs_unpark_all(uuid[], timestamptz[]);
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0014_parked_jobs")]

    # Reversing recreates 0014's function and row trigger, from 0014 itself.
    operations = [migrations.RunSQL(UNPARK_ALL, BACK + PARKED_JOBS.UNPARK)]

"""Parked jobs (docs/concepts/misfire-and-overlap.md "Parked while its run is
active").

An interval job under overlap ``skip`` whose fire comes due while its run is
still active is parked by the dispatcher's fast path (dispatch/queries.py
DISPATCH_SIMPLE_INTERVALS): one ``skipped`` run for that fire, with
``fires`` NULL (it stands for every fire from there on), the job's
``next_fire_at`` NULL and its ``parked_since`` that fire. The dispatcher
holds the job's active runs under their row lock until it commits (SKIP
LOCKED: it never waits for one), so a run cannot end unseen in between: its
end waits for the parking's commit, and then finds the job parked. Until one
of its runs ends, no fire of the job costs a row or a tick: under overload,
where nearly every job has a run waiting, the dispatcher's work follows the
runs delivered, not the fires offered.

``jobs_unpark(job, upto)`` ends a parking: the fires declined are the first
one and each one an interval later before ``upto`` (at least the first, none
past ``end_at``); their count goes on the skipped run, and the job's next
fire is the first one from ``upto`` on (NULL past ``end_at``: the job is
finished). A job that is not parked is left alone (one probe of its key).
The owner verbs call it too (runs/job_verbs.py settle_due_fires).

The trigger ``run_unparks_job`` calls it when a run of an exclusive job
(overlap skip or queue) leaves the active states, in that transaction,
whatever ends it: a completion, a lease that expired on the last attempt, a
pause's or delete's cancel, an owner's cancel. Any run of the job ending
unparks it (a manual run that ends while the scheduled one still waits
too): its next fire is then declined and parks it again, every fire still
counted. It fires only on ``UPDATE OF state``, so a claim or a heartbeat
pays for its ``WHEN`` test alone.

Both columns are catalogue changes on the partitioned table (a constant
default, NULL), with no rewrite. The partial index holds only the rows that
stand for more than one fire.
"""

from django.db import migrations, models

UNPARK = """
CREATE FUNCTION jobs_unpark(job uuid, upto timestamptz)
RETURNS void LANGUAGE plpgsql
-- Planned once per session: a custom plan of its runs_run UPDATE (the
-- choice PL/pgSQL's plan cache makes for a partitioned table, whose generic
-- plan looks dearer) would be planned on every completion; the generic one
-- finds the day's partition at run time.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    j record;
    declined bigint;
    nxt timestamptz;
BEGIN
    SELECT id, parked_since, interval_seconds, end_at INTO j
    FROM jobs_job
    WHERE id = job AND parked_since IS NOT NULL
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF j.interval_seconds IS NULL THEN
        -- Only interval jobs are parked, and an edit unparks before it
        -- changes the schedule; should one be found anyway, the planned path
        -- takes it from upto (a cron's fires are found from any instant).
        declined := 1;
        nxt := upto;
    ELSE
        declined := greatest(
            1, ceil(extract(epoch FROM upto - j.parked_since) / j.interval_seconds));
        IF j.end_at IS NOT NULL THEN
            declined := least(declined, greatest(1,
                floor(extract(epoch FROM j.end_at - j.parked_since) / j.interval_seconds) + 1));
        END IF;
        nxt := j.parked_since + make_interval(secs => declined * j.interval_seconds);
        IF j.end_at IS NOT NULL AND nxt > j.end_at THEN
            nxt := NULL;
        END IF;
    END IF;
    UPDATE runs_run SET fires = declined
    WHERE job_id = job AND scheduled_at = j.parked_since AND fires IS NULL;
    UPDATE jobs_job SET next_fire_at = nxt, parked_since = NULL WHERE id = job;
END
$$;

CREATE FUNCTION runs_unpark_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobs_unpark(NEW.job_id, coalesce(NEW.finished_at, now()));
    RETURN NULL;
END
$$;

CREATE TRIGGER run_unparks_job
    AFTER UPDATE OF state ON runs_run FOR EACH ROW
    WHEN (OLD.exclusive
          AND OLD.state IN ('pending', 'running', 'retrying')
          AND NEW.state NOT IN ('pending', 'running', 'retrying'))
    EXECUTE FUNCTION runs_unpark_job();
"""

DROP = """
DROP TRIGGER run_unparks_job ON runs_run;
DROP FUNCTION runs_unpark_job();
DROP FUNCTION jobs_unpark(uuid, timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0017_job_parked_since"),
        ("runs", "0013_the_takeover_index_asks_for_an_attempt_left"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="fires",
            field=models.PositiveIntegerField(db_default=1, default=1, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["job", "scheduled_at"],
                condition=~models.Q(fires=1),
                name="run_fire_range_idx",
            ),
        ),
        migrations.RunSQL(UNPARK, DROP),
    ]

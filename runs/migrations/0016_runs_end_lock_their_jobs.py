"""The end of an exclusive run locks its job, parked or not (docs/concepts/misfire-and-overlap.md
"Parked while its run is active").

Until now the end of a parking (``jobs_unpark_all``, migration 0015) locked
only the jobs that were parked as its statement began: a job the dispatcher
was parking at that moment, not yet committed, was not parked in that
snapshot and was not waited for. So the dispatcher's fast path had to hold
each active run it parked a job behind under its row lock
(``HOLD_ACTIVE_RUNS``, FOR NO KEY UPDATE SKIP LOCKED), a statement of its
own each tick: under overload (``bench e2e --jobs 80000`` on PostgreSQL 15)
it read every active run of the tick's jobs again after the tick's own
overlap probe, up to 55 ms a tick of 1,000 jobs, and its locks made the
workers' completions wait for the tick.

Now every run of an exclusive job that leaves the active states locks its
job (FOR NO KEY UPDATE, in id order, as before), whether the job is parked
or not, in a statement of its own; the parking's end then reads the jobs in
the next statement, which sees what committed before the lock was granted.
The dispatcher holds each job it ticks under the same lock from the
tick's first statement to its commit, so the two are ordered by the job's
row: either the run's end holds the job first (the tick skips the job, SKIP
LOCKED, and takes it next tick, when the run has ended), or the tick holds
it first and the run's end waits for the tick's commit, then finds the job
parked and unparks it. The fast path no longer locks runs.
"""

from importlib import import_module

from django.db import migrations

PREVIOUS = import_module("runs.migrations.0015_runs_end_parkings_a_statement_at_a_time")

_START = PREVIOUS.UNPARK_ALL.index("CREATE FUNCTION jobs_unpark_all")
_END = PREVIOUS.UNPARK_ALL.index("$$;", _START) + len("$$;")
LOCK_PARKED_ONLY = PREVIOUS.UNPARK_ALL[_START:_END].replace(
    "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1
)

# A statement of its own before the parking's end: a PL/pgSQL statement
# reads with a snapshot taken as it starts, so the parking's end, once the
# lock is granted, sees what a tick that held the job committed (the
# skipped row of its parking). In one statement, the jobs' rows are read
# again under their locks but a row inserted meanwhile is not.
FIRST_STATEMENT = "BEGIN\n"
LOCK_FIRST = """BEGIN
    -- Every job of the ended runs, parked or not (migration 0016): the
    -- dispatcher's tick holds its jobs under the same lock, so the end of a
    -- run and the parking of its job are ordered by the job's row.
    PERFORM 1 FROM jobs_job AS j WHERE j.id = ANY(jobs) ORDER BY j.id FOR NO KEY UPDATE;
"""

# The parked jobs among them are then read without locking them again.
PARKED_LOCKED = """        WHERE j.id = ANY(jobs) AND j.parked_since IS NOT NULL
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
"""
PARKED_HELD = """        WHERE j.id = ANY(jobs) AND j.parked_since IS NOT NULL
"""

assert LOCK_PARKED_ONLY.count(FIRST_STATEMENT) == 1
assert LOCK_PARKED_ONLY.count(PARKED_LOCKED) == 1
LOCK_EVERY_JOB = LOCK_PARKED_ONLY.replace(FIRST_STATEMENT, LOCK_FIRST).replace(
    PARKED_LOCKED, PARKED_HELD
)


class Migration(migrations.Migration):
    dependencies = [("runs", "0015_runs_end_parkings_a_statement_at_a_time")]

    operations = [migrations.RunSQL(LOCK_EVERY_JOB, LOCK_PARKED_ONLY)]

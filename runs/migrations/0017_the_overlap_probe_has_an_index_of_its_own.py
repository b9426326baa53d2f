# The claims' overlap probe (runs/leases.py ITS_TURN: "is another run of this
# job running?") gets an index of its own: one job's running runs.
#
# It read run_active_idx, which holds every waiting and running run by
# (job_id, scheduled_at). A partition's job_id is given n_distinct = -0.01
# (migration 0010: a day's runs of one job, about 100), so the planner
# expected each probe to read 100 entries of that index and priced it above
# reading the whole partition while the partition was small. The probe is an
# EXISTS, of which the planner wants the first row only, and PostgreSQL 17
# chose the partition's sequential scan for it: beside 2,000 waiting runs a
# claim of 200 read the day's 46 pages for each run it considered: 77 buffers
# per claimed run, past the bound of 60 that 15, 16 and 18 kept
# (tests/integration/test_hot_plans.py "a claim reads a bounded number of
# buffers per run", run on each server by CI, docs/development.md); about 33
# with this index, on 17 and 18.
#
# This index holds the running runs only, so the planner prices a probe of it
# at one page whatever the partition holds, on every version. A claim writes
# one entry more per run it takes (the run becomes running); a run leaving
# running writes none. The predicate is the bare state = 'running' that
# migration 0013 took away from the takeover index: that index led with
# target_kind, so a probe through it walked every running run; this one leads
# with job_id, so a probe reads one job's running runs.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0016_runs_end_lock_their_jobs"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["job"],
                condition=models.Q(state="running"),
                name="run_running_job_idx",
            ),
        ),
    ]

# The expired-lease claim's index (runs/leases.py CLAIM_EXPIRED) holds only
# running runs with an attempt left: run_running_idx becomes run_takeover_idx.
#
# With the bare predicate state = 'running', the claims' overlap probe
# (runs/leases.py ITS_TURN, "is another run of this job running?") could use
# it too, and did whenever the statistics were older than the runs in flight
# (they price the index at its size when last analyzed): each probe then read
# every running run instead of one job's, about 1,000 buffers per claimed run
# beside 1,000 runs in flight, and a loaded install's claims grew with its
# deliveries in flight. The probe does not ask "attempt < max_attempts", so it
# can no longer use this index and takes one job's entries of run_active_idx.
# tests/integration/test_hot_plans.py: "beside runs in flight".
#
# run_exhausted_idx is its counterpart for the dispatcher's housekeeping
# (runs/outcomes.py FAIL_EXHAUSTED): running runs on their last attempt. Without
# it, that statement walked every active run's entry in run_active_idx at each
# housekeeping round, a backlog's worth.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0012_claims_walk_an_index_and_retries_lower_the_floor"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="run", name="run_running_idx"),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["target_kind", "scheduled_at"],
                condition=models.Q(state="running", attempt__lt=models.F("max_attempts")),
                name="run_takeover_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["scheduled_at"],
                condition=models.Q(state="running", attempt__gte=models.F("max_attempts")),
                name="run_exhausted_idx",
            ),
        ),
    ]

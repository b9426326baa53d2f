"""``manage.py prune_runs`` and runs.retention: batches of one short transaction
each; recent runs and live runs stay."""

from __future__ import annotations

import datetime as dt
import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.db import db_now
from dispatch.models import LagSample, ProcessHeartbeat
from runs.models import Attempt, Run
from tests.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)

DAY = dt.timedelta(days=1)


def add_runs(job, n: int, *, age: dt.timedelta, state: str = "succeeded") -> list[Run]:
    now = db_now()
    runs = [
        Run(
            job=job,
            scheduled_at=now - age - dt.timedelta(seconds=k),
            state=state,
            attempt=1,
            finished_at=now - age,
        )
        for k in range(n)
    ]
    Run.objects.bulk_create(runs)
    return runs


def prune(*args: str) -> str:
    out = io.StringIO()
    call_command("prune_runs", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def commits(monkeypatch) -> list[int]:
    """Counts real commits: every outermost transaction.atomic() ends in one."""
    seen: list[int] = []
    real = connection.commit

    def commit() -> None:
        real()
        seen.append(1)

    monkeypatch.setattr(connection, "commit", commit)
    return seen


def test_prune_deletes_old_finished_runs_in_batches_and_keeps_the_rest(owner, commits):
    job = make_job(owner)
    old = add_runs(job, 2500, age=40 * DAY)
    add_runs(job, 5, age=40 * DAY, state="failed")
    add_runs(job, 5, age=40 * DAY, state="missed")
    recent = add_runs(job, 7, age=5 * DAY)
    live = [
        *add_runs(job, 2, age=60 * DAY, state="pending"),
        *add_runs(job, 1, age=61 * DAY, state="running"),
        *add_runs(job, 1, age=62 * DAY, state="retrying"),
    ]
    Attempt.objects.create(run=old[0], number=1, outcome="succeeded")
    Attempt.objects.create(run=recent[0], number=1, outcome="succeeded")
    commits.clear()

    output = prune("--older-than-days", "30", "--batch-size", "1000", "-v", "2")

    assert re.search(r"^deleted 2510 runs scheduled before .* in 3 batches;", output, re.M)
    assert output.count("batch ") == 3
    # One commit per batch (the last, short batch ends the loop), plus the
    # fleet pruning and the demo-delivery cleanup: never one long transaction.
    assert len(commits) >= 3
    assert Run.objects.filter(state__in=["pending", "running", "retrying"]).count() == 4
    assert set(Run.objects.values_list("pk", flat=True)) == {r.pk for r in recent + live}
    assert list(Attempt.objects.values_list("run_id", flat=True)) == [recent[0].pk]


def test_the_default_retention_comes_from_settings(owner, settings):
    settings.PUNCTUAL_RUN_RETENTION_DAYS = 10
    job = make_job(owner)
    add_runs(job, 3, age=15 * DAY)
    kept = add_runs(job, 2, age=5 * DAY)
    assert "deleted 3 runs" in prune()
    assert set(Run.objects.values_list("pk", flat=True)) == {r.pk for r in kept}


def test_nothing_to_prune_says_so(owner):
    add_runs(make_job(owner), 2, age=DAY)
    assert prune().startswith("deleted 0 runs scheduled before ")
    assert Run.objects.count() == 2


def test_dead_processes_and_old_lag_samples_are_forgotten_too():
    now = db_now()
    for name, seen in (("gone", now - 2 * DAY), ("alive", now)):
        ProcessHeartbeat.objects.create(
            name=name, kind="worker", host="h", pid=1, started_at=seen, last_seen=seen
        )
    LagSample.objects.create(at=now - 3 * DAY, lag_seconds=1.0)
    LagSample.objects.create(at=now, lag_seconds=2.0)
    assert "forgot 2 stale fleet rows and lag samples" in prune()
    assert list(ProcessHeartbeat.objects.values_list("name", flat=True)) == ["alive"]
    assert list(LagSample.objects.values_list("lag_seconds", flat=True)) == [2.0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than-days", "abc"], "invalid int value: 'abc'"),
        (["--older-than-days", "-1"], "--older-than-days must be between 0 and 36500, got -1"),
        (["--older-than-days", "99999999"], "--older-than-days must be between 0 and 36500"),
        (["--batch-size", "0"], "--batch-size must be between 1 and 100000"),
        (["--batch-size", "x"], "invalid int value: 'x'"),
        (["--unknown"], "unrecognized arguments: --unknown"),
    ],
)
def test_garbage_arguments_are_a_clear_error(args, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        prune(*args)


def test_prune_200k_old_runs_in_short_batches(owner, commits):
    job = make_job(owner)
    with connection.cursor() as cur:
        # 200,000 finished runs 31 to 33 days old, with an attempt for 20,000
        # of them; generate_series makes them in a couple of seconds.
        cur.execute(
            """
            INSERT INTO runs_run (id, job_id, scheduled_at, kind, state, reason, attempt,
                max_attempts, lease_owner, created_at, finished_at, last_error,
                target_kind, exclusive)
            SELECT gen_random_uuid(), %s, now() - interval '31 days' - make_interval(secs => g),
                   'scheduled', (ARRAY['succeeded', 'failed', 'missed', 'skipped',
                   'cancelled'])[1 + g %% 5], '', 1, 3, '', now(), now(), '', 'webhook', true
            FROM generate_series(1, 200000) AS g
            """,
            [job.pk],
        )
        cur.execute(
            """
            INSERT INTO runs_attempt (run_id, scheduled_at, number, worker, outcome, error)
            SELECT id, scheduled_at, 1, 'w', 'succeeded', '' FROM runs_run
            WHERE state = 'succeeded' LIMIT 20000
            """
        )
    recent = add_runs(job, 50, age=29 * DAY)
    live = add_runs(job, 10, age=90 * DAY, state="pending") + add_runs(
        job, 5, age=90 * DAY, state="retrying"
    )
    commits.clear()

    with CaptureQueriesContext(connection) as queries:
        output = prune("--older-than-days", "30", "-v", "2")

    assert re.search(r"^deleted 200000 runs .* in 200 batches;", output, re.M)
    batch_lines = re.findall(r"^batch (\d+): deleted (\d+) runs$", output, re.M)
    assert len(batch_lines) == 200
    assert all(int(n) == 1000 for _, n in batch_lines)
    # Every batch committed on its own: 200 commits, not one at the end.
    assert len(commits) >= 200
    run_deletes = [q for q in queries if q["sql"].startswith("DELETE FROM runs_run ")]
    assert len(run_deletes) == 200
    assert Run.objects.count() == len(recent) + len(live)
    assert set(Run.objects.values_list("pk", flat=True)) == {r.pk for r in recent + live}
    assert not Attempt.objects.exists()

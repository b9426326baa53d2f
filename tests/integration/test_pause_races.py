"""A pause or delete racing a worker, on two live connections: no attempt
starts after the pause commits, and a completion leaves no waiting run of a
stopped job (docs/concepts/pause-and-resume.md "Pause and delete")."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, transaction

from core.db import db_now
from jobs.models import Job
from runs import job_verbs, leases, outcomes
from runs.models import Run
from tests.factories import make_job
from tests.integration.races import start, wait_until_blocked_or_done

# Committed data: each connection sees only what the other committed.
pytestmark = pytest.mark.django_db(transaction=True)

STOP_VERBS = {"pause": "paused", "soft_delete": "deleted"}


def stop_and_hold(verb: str, job_id, stopped: threading.Event, commit: threading.Event):
    """The owner's pause or delete, on its own connection: the verb has locked
    the job row, stopped the job and cancelled its waiting runs, and its
    transaction stays open until ``commit`` is set."""

    def body():
        with transaction.atomic():
            getattr(job_verbs, verb)(Job.objects.get(pk=job_id))
            stopped.set()
            assert commit.wait(30), "the test never let the pause commit"

    return body


@pytest.mark.parametrize("verb", list(STOP_VERBS))
def test_a_retry_written_while_a_pause_commits_is_cancelled(owner, verb):
    job = make_job(owner, timeout_seconds=60)
    run = job_verbs.trigger(job)
    [claimed] = leases.claim("w1", limit=1, lease_seconds=30)
    stopped, commit = threading.Event(), threading.Event()
    pause = start(stop_and_hold(verb, job.pk, stopped, commit))
    assert stopped.wait(30)

    # The delivery failed and would retry. The completion's snapshot is taken
    # while the pause is still open: it must not decide on the job it sees.
    retry = outcomes.Result(
        run_id=run.pk,
        job_id=job.pk,
        attempt=claimed.attempt,
        state="retrying",
        retry_in=0,
        status_code=500,
        attempt_outcome="failed",
    )
    completion = start(lambda: outcomes.complete("w1", [retry]))
    try:
        wait_until_blocked_or_done(completion, "the completion")
    finally:
        commit.set()
    pause.result()
    assert completion.result().applied == [run.pk]

    run.refresh_from_db()
    assert (run.state, run.reason, run.available_at) == ("cancelled", STOP_VERBS[verb], None)
    assert list(run.attempts.values_list("number", "outcome")) == [(1, "failed")]
    assert leases.claim("w2", limit=10, lease_seconds=30) == []


@pytest.mark.parametrize("verb", list(STOP_VERBS))
def test_no_claim_starts_an_attempt_after_a_pause_commits(owner, verb):
    job = make_job(owner)
    stopped, commit = threading.Event(), threading.Event()
    pause = start(stop_and_hold(verb, job.pk, stopped, commit))
    assert stopped.wait(30)
    # A retry committed after the pause cancelled the job's waiting runs (a
    # completion that raced an automatic pause, a worker releasing its runs).
    now = db_now()
    run = Run.objects.create(
        job=job,
        scheduled_at=now - dt.timedelta(seconds=1),
        available_at=now - dt.timedelta(seconds=1),
        state="retrying",
        attempt=1,
        max_attempts=3,
        exclusive=True,
    )

    def pause_commits_before_the_claim(execute, sql, params, many, context):
        # The claim of waiting runs has run, with a snapshot from before the
        # pause commits; the pause commits now, then the claim commits.
        answer = execute(sql, params, many, context)
        if "FROM c, jobs_job" in sql and "('pending', 'retrying')" in sql:
            commit.set()
            pause.result()
        return answer

    try:
        with connection.execute_wrapper(pause_commits_before_the_claim):
            claimed = leases.claim("w1", limit=10, lease_seconds=30)
    finally:
        commit.set()
    pause.result()

    assert claimed == []
    run.refresh_from_db()
    assert (run.state, run.attempt) == ("retrying", 1)
    assert outcomes.cancel_stopped() == 1
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", STOP_VERBS[verb])


def test_a_claim_in_progress_does_not_make_a_due_job_wait_a_tick(owner):
    """A worker's claim holds the job row FOR KEY SHARE until it commits; the
    dispatcher's lock (FOR NO KEY UPDATE SKIP LOCKED) does not conflict with
    it, so the job's next fire is dispatched on time rather than skipped."""
    import threading

    from django.db import connection as this
    from django.db import transaction as tx

    from core.db import db_now
    from dispatch.dispatcher import Dispatcher
    from runs.models import Run
    from tests.factories import make_job, rewrite_job
    from tests.integration import races

    job = make_job(owner, interval_seconds=60, overlap_policy="allow")
    now = db_now()
    fire = now - dt.timedelta(seconds=1)
    rewrite_job(job, created_at=fire - dt.timedelta(seconds=60), start_at=None, next_fire_at=fire)
    held, release = threading.Event(), threading.Event()

    def claim_holds_the_row():
        with tx.atomic():
            with this.cursor() as cur:
                cur.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR KEY SHARE", [job.pk])
            held.set()
            release.wait(30)

    other = races.start(claim_holds_the_row)
    assert held.wait(30)
    try:
        result = Dispatcher().tick()
    finally:
        release.set()
        other.result()
    assert result.jobs == 1
    assert Run.objects.filter(job=job).count() == 1


def test_a_trigger_that_waited_for_a_pause_s_lock_starts_at_once(owner):
    """The admin's trigger (the verb takes the job's row lock itself) waits
    while an API pause holds the row; the pause reads its time after the
    trigger began. The trigger reads its own time once it has the lock, so its
    run is made during the pause, and starts at once
    (docs/concepts/pause-and-resume.md "Run it now, while paused")."""
    job = make_job(owner)
    locked, go = threading.Event(), threading.Event()

    def api_pause():
        with transaction.atomic():
            row = Job.objects.select_for_update().get(pk=job.pk)  # as get_job(lock=True)
            locked.set()
            assert go.wait(30), "the test never let the pause go on"
            job_verbs.pause(row)

    pause = start(api_pause)
    assert locked.wait(30)
    trigger = start(lambda: job_verbs.trigger(Job.objects.get(pk=job.pk)))
    try:
        wait_until_blocked_or_done(trigger, "the trigger")
    finally:
        go.set()
    pause.result()
    run = trigger.result()

    assert run.scheduled_at >= Job.objects.get(pk=job.pk).paused_at
    assert [c.run_id for c in leases.claim("w1", limit=10, lease_seconds=30)] == [run.pk]

"""Receiver faults (docs/concepts/runs-and-retries.md "Retries"; docs/security.md): a hang,
a connection reset, a slow drip, a huge body, malformed HTTP and a redirect to loopback.

Each job has one scheduled fire, dispatched by a real dispatcher and delivered
by a real worker with ``timeout_seconds=2`` and ``max_attempts=2``. Each ends
in its documented state, within its deadlines, and nothing is left running.
"""

from __future__ import annotations

import datetime as dt

import pytest

from core.db import db_now
from runs.leases import DEADLINE_GRACE_SECONDS
from runs.models import Run
from tests.factories import make_job
from tests.processes.conftest import wait_until
from tests.processes.faults.conftest import assert_audit_clean, drain

pytestmark = [pytest.mark.django_db(transaction=True)]

# path -> (state, attempts, outcome of each attempt, words in the last error)
EXPECTED = {
    "ok": ("succeeded", 1, ["succeeded"], ""),
    # Never answers: each attempt times out at timeout_seconds, then retried once.
    "hang": ("failed", 2, ["failed", "failed"], "timed out"),
    # Closes the connection without answering: retryable, then exhausted.
    "reset": ("failed", 2, ["failed", "failed"], "disconnected"),
    # 200, then a byte every 0.5 s: the deadline covers the body too.
    "trickle": ("failed", 2, ["failed", "failed"], "timed out"),
    # 200 with 10 MB: only 64 KiB is read, and it is a success.
    "big": ("succeeded", 1, ["succeeded"], ""),
    # Bytes that are not HTTP: a protocol error, retryable.
    "malformed": ("failed", 2, ["failed", "failed"], "bad status line"),
    # 302 to /ok on loopback: never followed, a permanent failure at once.
    "redirect": ("failed", 1, ["permanent"], "not followed"),
}


def test_receiver_faults_end_in_their_documented_states(owner, processes, receiver, since):
    first_fire = db_now() + dt.timedelta(seconds=3)
    jobs = {
        path: make_job(
            owner,
            name=path,
            url=receiver.url(path),
            interval_seconds=3600,
            start_at=first_fire,
            timeout_seconds=2,
            max_attempts=2,
            retry_backoff_seconds=1,
        )
        for path in EXPECTED
    }
    processes.manage("dispatch")
    processes.manage("work", "--lease-seconds", "10")
    wait_until(
        lambda: Run.objects.filter(job__in=jobs.values()).count() == len(jobs),
        timeout=60,
        message="one fire of every job",
    )
    drain(jobs.values(), timeout=60, message="every fault to end")

    for path, (state, attempts, outcomes, error) in EXPECTED.items():
        run = Run.objects.get(job=jobs[path])
        assert (run.state, run.attempt) == (state, attempts), path
        assert run.scheduled_at == first_fire and run.kind == "scheduled"
        assert [a.outcome for a in run.attempts.order_by("number")] == outcomes, path
        assert error in run.last_error.lower(), (path, run.last_error)
        for a in run.attempts.all():
            # No attempt outlived its deadline, timeout_seconds (2 s) + grace: the
            # timeout cut it ("timed out" above), however late a busy machine ran
            # the timer.
            assert a.duration_ms is not None, path
            assert a.duration_ms < (2 + DEADLINE_GRACE_SECONDS) * 1000, (path, a.duration_ms)
    assert Run.objects.get(job=jobs["trickle"]).last_status_code == 200
    assert Run.objects.get(job=jobs["redirect"]).last_status_code == 302
    assert Run.objects.get(job=jobs["big"]).attempts.get().status_code == 200
    # The redirect was not followed: /ok got the ok job's delivery only.
    assert [e["job_id"] for e in receiver.entries() if e["path"] == "/ok"] == [str(jobs["ok"].pk)]
    assert_audit_clean(since, receiver=receiver, jobs=jobs.values())

"""Idle ``manage.py work`` processes wake up on NOTIFY (docs/operating/processes.md
"Wake-ups"):
with the safety poll set to an hour, only the notification can make a
worker claim a new run, and a worker whose LISTEN connection dies falls back
to polling and listens again."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

from dispatch.models import ProcessHeartbeat
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job
from tests.processes.conftest import process_env, wait_until

pytestmark = [pytest.mark.pooler, pytest.mark.django_db(transaction=True)]

AN_HOUR = "3600"


def listen_pid(name: str) -> int | None:
    """The backend of worker ``name``'s LISTEN connection, once LISTEN is done.
    Only this test's database: the tier runs in parallel (xdist), each worker
    with a database of its own on the one server."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT pid FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = %s
              AND state = 'idle' AND query ILIKE 'LISTEN %%'
            """,
            [f"punctual-listen {name}"],
        )
        row = cur.fetchone()
    return row[0] if row else None


def backend_alive(pid: int) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid])
        return cur.fetchone() is not None


def succeeded(run_id) -> bool:
    return Run.objects.get(pk=run_id).state == "succeeded"


def deliver_one(job) -> None:
    run = job_verbs.trigger(job)
    # Far below the safety poll: only a wake-up can start it in time.
    wait_until(lambda: succeeded(run.pk), timeout=120, message="the run to be delivered")


def test_a_listening_worker_starts_each_new_run_without_waiting_for_the_poll(
    owner, processes, receiver
):
    job = make_job(owner, url=receiver.url("ok"))
    processes.manage("work", "--name", "listener", env=process_env(PUNCTUAL_POLL_SECONDS=AN_HOUR))
    wait_until(lambda: listen_pid("listener"), timeout=60, message="the worker to LISTEN")
    # One after another: each is triggered while the worker waits on its
    # hour-long poll, after the claim that followed the previous delivery.
    for _ in range(3):
        deliver_one(job)


def test_a_worker_whose_listen_connection_is_killed_polls_then_listens_again(
    owner, processes, receiver
):
    job = make_job(owner, url=receiver.url("ok"))
    worker = processes.manage(
        "work", "--name", "cut-off", env=process_env(PUNCTUAL_POLL_SECONDS=AN_HOUR)
    )
    first = wait_until(lambda: listen_pid("cut-off"), timeout=60, message="the worker to LISTEN")
    with connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", [first])
    wait_until(lambda: not backend_alive(first), timeout=60, message="the backend to exit")
    # Claimed while it has no LISTEN connection, or just after its reconnect.
    deliver_one(job)
    again = wait_until(
        lambda: (pid := listen_pid("cut-off")) not in (None, first) and pid,
        timeout=60,
        message="a new LISTEN connection",
    )
    assert again != first
    deliver_one(job)  # and the new connection hears the next one
    assert worker.poll() is None
    log = Path(worker.log_path).read_text()
    assert "wake-up connection lost" in log


def test_with_listen_off_a_worker_polls(owner, processes, receiver):
    job = make_job(owner, url=receiver.url("ok"))
    processes.manage(
        "work",
        "--name",
        "poller",
        env=process_env(PUNCTUAL_LISTEN="false", PUNCTUAL_POLL_SECONDS=AN_HOUR),
    )
    wait_until(
        ProcessHeartbeat.objects.filter(name="poller").exists,
        timeout=60,
        message="the worker to start",
    )
    deliver_one(job)
    deliver_one(job)
    assert listen_pid("poller") is None


def test_a_listening_worker_claims_its_own_retry_when_the_backoff_ends(owner, processes, receiver):
    job = make_job(owner, url=receiver.url("flaky/1"), retry_backoff_seconds=1)
    processes.manage("work", "--name", "retrier", env=process_env(PUNCTUAL_POLL_SECONDS=AN_HOUR))
    wait_until(lambda: listen_pid("retrier"), timeout=60, message="the worker to LISTEN")
    deliver_one(job)  # a 500, then the retry after its backoff: a timer, not a NOTIFY
    assert Run.objects.get(job=job).attempt == 2


def test_a_listening_worker_starts_a_queued_run_when_the_one_ahead_ends(owner, processes, receiver):
    job = make_job(owner, url=receiver.url("held"), overlap_policy="queue")
    processes.manage("work", "--name", "queuer", env=process_env(PUNCTUAL_POLL_SECONDS=AN_HOUR))
    wait_until(lambda: listen_pid("queuer"), timeout=60, message="the worker to LISTEN")
    first = job_verbs.trigger(job, idempotency_key="first")
    wait_until(receiver.entries, timeout=60, message="the first delivery, held")
    second = job_verbs.trigger(job, idempotency_key="second")  # waits for the first
    receiver.release()
    wait_until(
        lambda: succeeded(first.pk) and succeeded(second.pk),
        timeout=120,
        message="both runs, one after the other",
    )

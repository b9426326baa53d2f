"""A PostgreSQL restart while runs are in flight (docs/design/guarantees.md).

Two dispatchers and two workers are busy (fast deliveries and one-second ones
in flight) when the session's embedded PostgreSQL is stopped at once (as in a
crash), which drops every connection, and started again; then it is stopped
for longer than the workers' leases and started again, so that leases expire during the outage and
finished deliveries cannot be written. Each process must notice, reconnect by
itself and carry on: no process exits, no run stays stuck, no fire is doubled.

This test restarts the server every other test of the session uses too, so
the faults conftest moves it to the very end of the session; it leaves the
server up. It never restarts a server named by DATABASE_URL.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.db import OperationalError, connection, connections

from core.db import db_now
from runs.models import Run
from scheduler_site import localdb
from tests.factories import make_job
from tests.processes.conftest import wait_until
from tests.processes.faults.conftest import assert_audit_clean, drain, stop_all

pytestmark = [pytest.mark.django_db(transaction=True)]

LEASE = 3


def database_answers() -> bool:
    try:
        connection.ensure_connection()
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        return True
    except OperationalError:
        connections.close_all()
        return False


def restart(data_dir: Path, down_for: float = 0.0) -> None:
    """Stop the session's server at once (as a crash would), stay down
    ``down_for`` seconds, and start it again; this test process's own
    connection dies with it."""
    try:
        localdb.restart(data_dir, down_for=down_for, settings=localdb.TEST_SETTINGS)
    finally:
        localdb.start(data_dir, settings=localdb.TEST_SETTINGS)  # no-op when it runs
        connections.close_all()
        wait_until(database_answers, timeout=60, interval=0.2, message="PostgreSQL to answer")


@pytest.mark.direct_connection(
    "it restarts the server under the processes and expects each to see the outage; through"
    " PgBouncer a client connection outlives the restart and an idle process never notices it"
)
def test_processes_reconnect_after_a_postgres_restart_and_nothing_is_lost_or_doubled(
    private_server, owner, processes, receiver, since
):
    common = dict(interval_seconds=1, overlap_policy="allow", max_attempts=5)
    common.update(retry_backoff_seconds=1, timeout_seconds=10)
    jobs = [make_job(owner, url=receiver.url("ok"), **common) for _ in range(40)]
    jobs += [make_job(owner, url=receiver.url("slow/1"), **common) for _ in range(10)]
    dispatchers = [processes.manage("dispatch", name=f"dispatch{k}") for k in range(2)]
    workers = [
        processes.manage("work", "--lease-seconds", str(LEASE), name=f"work{k}") for k in (0, 1)
    ]
    wait_until(
        lambda: (
            Run.objects.filter(job__in=jobs, state="succeeded").count() >= 100
            and receiver.stats()["in_flight"] >= 5
        ),
        timeout=60,
        message="deliveries flowing, some in flight",
    )

    for down_for in (0, LEASE + 2):
        t0 = time.monotonic()
        restart(private_server, down_for)
        print(f"PostgreSQL {down_for=} s: answering again after {time.monotonic() - t0:.1f} s")
        back = db_now()
        # Every process reconnects by itself: fresh fires are made and delivered.
        wait_until(
            lambda b=back: (
                Run.objects.filter(job__in=jobs, scheduled_at__gt=b, state="succeeded").count()
                >= 3 * len(jobs)
            ),
            timeout=60,
            interval=0.2,
            message="fires after the restart to be dispatched and delivered",
        )
        assert [p.poll() for p in dispatchers + workers] == [None] * 4, "a process died"
    for proc in dispatchers + workers:
        log = Path(proc.log_path).read_text()
        assert "database unavailable" in log, f"{proc.log_path} never saw the outage"

    stop_all(processes, dispatchers)
    assert [p.returncode for p in dispatchers] == [0, 0]
    drain(jobs, timeout=60)
    stop_all(processes, workers)
    assert [p.returncode for p in workers] == [0, 0]

    runs = Run.objects.filter(job__in=jobs)
    assert set(runs.values_list("state", flat=True)) == {"succeeded"}
    assert_audit_clean(since, receiver=receiver, jobs=jobs)

"""SIGTERM under load: no run is lost (docs/operating/processes.md "Processes and
commands": SIGTERM makes dispatch finish its tick, and work stop claiming new work and
finish the deliveries already in flight).

Sixty jobs fire every second into a receiver that takes 1.5 s to answer, so a
worker always has about ninety deliveries in flight. One worker after another
gets SIGTERM in the middle of that, and so does the dispatcher. Each worker
must finish what it holds within its lease and exit 0; nothing is taken over
after a lease expiry, nothing is delivered twice, and every fire succeeds.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from runs.models import Attempt, Run
from tests.factories import make_job
from tests.processes.conftest import wait_until
from tests.processes.faults.conftest import assert_audit_clean, drain

pytestmark = [pytest.mark.django_db(transaction=True)]

LEASE = 10


def test_sigterm_under_load_finishes_in_flight_deliveries_and_loses_no_run(
    owner, processes, receiver, since
):
    jobs = [
        make_job(
            owner,
            # 3 s each: at 60 fires a second about 180 are in flight, so 60
            # at once needs only 20 starts a second, even from a busy machine.
            url=receiver.url("slow/3"),
            interval_seconds=1,
            overlap_policy="allow",
            timeout_seconds=10,
        )
        for _ in range(60)
    ]
    dispatcher = processes.manage("dispatch", name="dispatch-first")

    def work(name: str):
        return processes.manage(
            "work", "--lease-seconds", str(LEASE), "--concurrency", "300", "--name", name
        )

    def terminate_under_load(proc, name: str) -> float:
        # Both at one moment: the receiver holds 60 and the database says this
        # worker holds 60 (read apart, deliveries may finish in between).
        wait_until(
            lambda: (
                receiver.stats()["in_flight"] >= 60
                and Run.objects.filter(lease_owner=name, state="running").count() >= 60
            ),
            timeout=60,
            message=f"{name} to have 60 deliveries in flight",
        )
        t0 = time.monotonic()
        assert processes.stop(proc, signal.SIGTERM, timeout=30) == 0
        took = time.monotonic() - t0
        assert not Run.objects.filter(lease_owner=name, state="running").exists()
        return took

    took = [terminate_under_load(work("first"), "first")]
    second = work("second")
    # The dispatcher too, with the second worker busy.
    wait_until(lambda: receiver.stats()["in_flight"] >= 60, timeout=60, message="load")
    assert processes.stop(dispatcher, signal.SIGTERM) == 0
    dispatcher = processes.manage("dispatch", name="dispatch-second")
    # Its SIGTERM below tests a tick's finish, not a start-up cut short: the
    # handlers are in place once it logs that it started.
    wait_until(
        lambda: "dispatcher started" in Path(dispatcher.log_path).read_text(),
        timeout=60,
        message="the second dispatcher to start",
    )
    took.append(terminate_under_load(second, "second"))
    last = work("last")
    assert processes.stop(dispatcher, signal.SIGTERM) == 0
    drain(jobs, timeout=60)
    assert processes.stop(last, signal.SIGTERM) == 0

    print(f"SIGTERM to exit, under load: {[f'{t:.1f} s' for t in took]}")
    assert all(t <= LEASE + 1 for t in took)
    runs = Run.objects.filter(job__in=jobs)
    assert set(runs.values_list("state", flat=True)) == {"succeeded"}
    assert set(runs.values_list("attempt", flat=True)) == {1}
    assert not Attempt.objects.filter(run__job__in=jobs, outcome="lease_expired").exists()
    starts = [e["webhook_id"] for e in receiver.entries()]
    assert len(starts) == len(set(starts)) == runs.count()  # each fire delivered once
    assert_audit_clean(since, receiver=receiver, jobs=jobs)

"""Application clock skew (docs/design/guarantees.md "Database time").

Two dispatchers and two workers run with their wall clocks 5 minutes off, one
pair ahead and one pair behind (libfaketime, LD_PRELOAD), sharing one queue.
A dispatcher that trusted its own clock would fire 5 minutes early, or mark
every fire missed; a worker that did would think every lease of the other
worker expired and take the run over. Because every "is it due?" and "has the
lease expired?" decision reads the database's ``now()``, none of that happens:
no fire is early, none is missed or doubled, no lease is taken over.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time

import pytest

from core.db import db_now
from jobs.models import Job
from runs.models import Attempt, Run
from tests.factories import make_job
from tests.processes.conftest import wait_until
from tests.processes.faults.conftest import (
    assert_audit_clean,
    drain,
    faketime_env,
    libfaketime_missing,
    registered,
    stop_all,
)

pytestmark = [pytest.mark.django_db(transaction=True)]

SKEW = 300  # seconds, both ways
LEASE = 60  # seconds; an attempt's deadline is 2 * LEASE + 5 s, still under SKEW
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ ")


@pytest.fixture
def faketime():
    missing = libfaketime_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)


def test_skewed_application_clocks_neither_double_fire_nor_steal_leases(
    faketime, owner, processes, receiver, since
):
    common = dict(interval_seconds=1, overlap_policy="allow", timeout_seconds=LEASE * 2)
    jobs = [make_job(owner, url=receiver.url("ok"), **common) for _ in range(30)]
    # Deliveries that hold their lease for a while, for the other worker to covet.
    jobs += [make_job(owner, url=receiver.url("slow/1"), **common) for _ in range(10)]
    # Leases (and attempt deadlines) far shorter than the skew, so a worker
    # that trusted its own clock would take over every lease of the other one;
    # long enough that a worker starved of CPU on a busy machine does not
    # honestly lose one (10 s was not: both workers lost leases under load).
    wall = {}
    procs = []
    for sign in ("+", "-"):
        env = faketime_env(f"{sign}{SKEW // 60}m")
        wall[sign] = time.time()
        for command, *args in (("dispatch",), ("work", "--lease-seconds", str(LEASE))):
            name = f"{command}{sign}"
            procs.append(processes.manage(command, *args, "--name", name, env=env, name=name))
    # All four up before the window starts: both workers must get deliveries,
    # however long a busy machine takes to start one of them.
    for name in ("dispatch+", "work+", "dispatch-", "work-"):
        wait_until(lambda n=name: registered(n), timeout=60, message=f"{name} to start")
    started = db_now()
    wait_until(
        lambda: db_now() - started >= dt.timedelta(seconds=8),
        timeout=60,
        interval=0.5,
        message="8 s of skewed dispatching and delivering",
    )
    stop_all(processes, procs[0::2])  # the dispatchers
    runs = Run.objects.filter(job__in=jobs)
    # No early fire: each run was created (database time) at or after its fire,
    # and no job was advanced past the database's now.
    assert not [r for r in runs if r.created_at < r.scheduled_at]
    next_fires = Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list(
        "next_fire_at", flat=True
    )
    assert max(next_fires) <= db_now() + dt.timedelta(seconds=1)
    drain(jobs, timeout=60)
    stop_all(processes, procs[1::2])  # the workers

    assert set(runs.values_list("state", flat=True)) == {"succeeded"}  # none missed
    # No stolen lease: nothing expired, nothing was attempted or delivered twice.
    assert not Attempt.objects.filter(run__job__in=jobs, outcome="lease_expired").exists()
    assert set(runs.values_list("attempt", flat=True)) == {1}
    starts = [e["webhook_id"] for e in receiver.entries()]
    assert len(starts) == len(set(starts)) == runs.count()
    assert_audit_clean(since, receiver=receiver, jobs=jobs)

    # The processes really ran on skewed clocks: their own log lines, and the
    # webhook-timestamp each worker signed, are 5 minutes off; both workers
    # delivered.
    for proc, sign in zip(procs[0::2], "+-", strict=True):
        with open(proc.log_path) as log:
            logged = LOG_TIME.match(log.readline())
        assert logged, proc.log_path
        seen = dt.datetime.strptime(logged[1], "%Y-%m-%d %H:%M:%S").timestamp()
        assert abs(seen - wall[sign] - (SKEW if sign == "+" else -SKEW)) < 60
    skews = {
        round((int(e["headers"]["webhook-timestamp"]) - e["t"]) / SKEW) for e in receiver.entries()
    }
    assert skews == {1, -1}, "both workers delivered, each 5 minutes off"

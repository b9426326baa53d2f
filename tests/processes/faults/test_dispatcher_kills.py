"""SIGKILL of dispatchers in the middle of a batch, without and with
``--shard`` (docs/design/guarantees.md; docs/operating/processes.md "Scaling").

150 jobs fire every second, dispatched in batches of 20 jobs per transaction.
Two dispatchers run at once; one of them at a time (chosen by
``random.Random(SEED)``) is killed with SIGKILL while pg_stat_activity shows
its batch transaction open (locking due jobs, counting active runs, or
inserting runs and advancing the jobs), then restarted. First two unsharded
dispatchers, then ``--shard 0/2`` and ``--shard 1/2``, where a killed shard's
jobs wait for its restart: late, within the misfire grace, never doubled.

A batch killed before its commit changes nothing; one killed just after has
committed its runs and advances together. Either way the auditor finds every
slot once, and none twice.
"""

from __future__ import annotations

import random
import signal

import pytest

from ops.audit import Rule
from runs.models import Run
from tests.factories import make_job
from tests.processes.conftest import process_env, wait_until
from tests.processes.faults.conftest import assert_audit_clean, in_transaction, named, stop_all

pytestmark = [pytest.mark.pooler, pytest.mark.django_db(transaction=True)]

SEED = 2
KILLS_PER_PHASE = 6
# dispatch/queries.py: LOCK_DUE_JOBS and LOCK_SIMPLE_INTERVALS, ACTIVE_COUNTS,
# INSERT_RUNS_AND_ADVANCE and DISPATCH_SIMPLE_INTERVALS
IN_BATCH = ("%FROM jobs_job%SKIP LOCKED%", "%GROUP BY job_id%", "%ins AS (%")


def test_sigkilled_dispatchers_mid_batch_neither_lose_nor_double_a_fire(owner, processes, since):
    rng = random.Random(SEED)
    jobs = [make_job(owner, interval_seconds=1, overlap_policy="allow") for _ in range(150)]
    started = {"n": 0}

    def start(shard: str | None) -> tuple:
        name = f"dispatcher-{started['n']}"
        started["n"] += 1
        args = ["dispatch", "--batch-size", "20", "--name", name]
        if shard:
            args += ["--shard", shard]
        return name, processes.manage(*args, env=named(process_env(), name), name=name)

    caught = 0
    for shards in ([None, None], ["0/2", "1/2"]):
        running = [start(shard) for shard in shards]
        for _ in range(KILLS_PER_PHASE):
            k = rng.randrange(len(running))
            name, proc = running[k]
            wait_until(
                lambda n=name: in_transaction(n, *IN_BATCH),
                timeout=60,
                interval=0.002,
                message=f"{name} in the middle of a batch",
            )
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            caught += 1
            running[k] = start(shards[k])
        stop_all(processes, [proc for _, proc in running], signal.SIGKILL)

    assert caught == 2 * KILLS_PER_PHASE
    runs = Run.objects.filter(job__in=jobs)
    # Every restart came back within the misfire grace: late fires, none missed.
    assert set(runs.values_list("state", flat=True)) == {"pending"}
    # The scenario starts dispatchers only: its runs wait for a worker that
    # never comes, and the auditor's ``no worker`` says so.
    report = assert_audit_clean(since, jobs=jobs, by_design=frozenset({Rule.NO_WORKER}))
    # Every job kept firing through the kills (the phases last a few seconds).
    assert report.counts["slots"] >= 150 * 3

"""A dispatcher outage longer than the misfire grace (docs/concepts/misfire-and-overlap.md
"Misfires", "Catch-up").

Jobs fire every second with a 2 s grace. The only dispatcher is SIGKILLed,
stays down for 8 s, and comes back. Its first tick (one transaction, at the
database time ``T``) must decide every fire of the outage exactly:

- a fire older than the grace at ``T`` is a misfire. Under ``skip`` it is
  recorded ``missed`` ("past grace") and never delivered. Under ``catch_up``
  the newest ``max_catchup`` misfires run as ``catch_up`` runs, and the older
  ones are ``missed`` ("over catch-up cap");
- a fire within the grace runs, late, as an ordinary scheduled run.

Catch-up never bursts: the receiver gets exactly ``max_catchup`` catch-up
deliveries per job, whatever the outage's length.
"""

from __future__ import annotations

import datetime as dt
import signal
from collections import Counter

import pytest

from core.db import db_now
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job
from tests.processes.conftest import wait_until
from tests.processes.faults.conftest import assert_audit_clean, drain, registered

pytestmark = [pytest.mark.django_db(transaction=True)]

GRACE = dt.timedelta(seconds=2)
OUTAGE = dt.timedelta(seconds=8)
S = dt.timedelta(seconds=1)


def test_outage_past_grace_follows_each_misfire_policy_exactly(owner, processes, receiver, since):
    common = dict(
        interval_seconds=1,
        misfire_grace_seconds=2,
        overlap_policy="allow",
        url=receiver.url("ok"),
    )
    policies = [("skip", None)] * 2 + [("catch_up", 3)] * 2 + [("catch_up", 1), ("catch_up", 5)]
    processes.manage("work", "--lease-seconds", "5")
    # Up before the jobs exist: a start-up slower than the 2 s grace (a busy
    # machine) would otherwise make misfires, and catch-ups, before the outage.
    dispatcher = processes.manage("dispatch", "--name", "before", name="before")
    wait_until(lambda: registered("before"), timeout=60, message="the dispatcher to start")
    jobs = [
        make_job(owner, misfire_policy=p, max_catchup=cap or 3, **common) for p, cap in policies
    ]
    wait_until(
        lambda: all(Run.objects.filter(job=j).count() >= 2 for j in jobs),
        timeout=60,
        message="two fires of every job before the outage",
    )
    dispatcher.send_signal(signal.SIGKILL)
    dispatcher.wait(timeout=10)
    down = db_now()
    wait_until(
        lambda: db_now() - down >= OUTAGE,
        timeout=60,
        interval=0.2,
        message="an outage longer than the grace",
    )
    dispatcher = processes.manage("dispatch", name="after")
    wait_until(
        lambda: Run.objects.filter(job__in=jobs, created_at__gt=down).exists(),
        timeout=60,
        message="the recovery tick",
    )
    recovered_at = (
        Run.objects.filter(job__in=jobs, created_at__gt=down).order_by("created_at").first()
    ).created_at
    assert processes.stop(dispatcher) == 0
    drain(jobs, timeout=60)
    # The receiver flushes its log every 0.1 s: wait until every delivery the
    # database says succeeded is in it before counting them.
    delivered = Run.objects.filter(job__in=jobs, state="succeeded").count()
    wait_until(
        lambda: len({e["webhook_id"] for e in receiver.entries()}) >= delivered,
        timeout=30,
        message="the receiver's log to hold every delivery",
    )

    # Of the fires the recovery decided (a busy machine may have made others late).
    recovery_ids = {
        str(pk)
        for pk in Run.objects.filter(job__in=jobs, created_at=recovered_at).values_list(
            "pk", flat=True
        )
    }
    catch_up_deliveries = Counter(
        job_id
        for job_id, _ in {
            (e["job_id"], e["webhook_id"])
            for e in receiver.entries()
            if '"kind":"catch_up"' in e["body"] and e["webhook_id"] in recovery_ids
        }
    )
    for job, (policy, cap) in zip(jobs, policies, strict=True):
        last_before = (
            Run.objects.filter(job=job, created_at__lte=down).order_by("-scheduled_at").first()
        )
        recovery = list(
            Run.objects.filter(job=job, created_at=recovered_at).order_by("scheduled_at")
        )
        # 1. The recovery tick covered every fire since the outage began, up to T.
        fires = [r.scheduled_at for r in recovery]
        expected = []
        fire = last_before.scheduled_at + S
        while fire <= recovered_at:
            expected.append(fire)
            fire += S
        assert fires == expected, job.misfire_policy
        misfires = [f for f in fires if recovered_at - f > GRACE]
        assert len(misfires) >= 5

        # 2. Each fire got exactly the outcome its policy gives it.
        outcome = [(r.kind, r.state, r.reason) for r in recovery]
        on_time = [("scheduled", "succeeded", "")] * (len(fires) - len(misfires))
        if policy == "skip":
            assert outcome == [("scheduled", "missed", "past grace")] * len(misfires) + on_time
            assert catch_up_deliveries[str(job.pk)] == 0
        else:
            older = len(misfires) - cap
            assert outcome == (
                [("scheduled", "missed", "over catch-up cap")] * older
                + [("catch_up", "succeeded", "")] * cap
                + on_time
            )
            # 3. Never a burst past the cap, at the receiver.
            assert catch_up_deliveries[str(job.pk)] == cap
        assert all(r.attempt == 0 for r in recovery if r.state == "missed")

    # The scenario is over and its dispatcher stopped. Paused, the jobs owe
    # nothing more: with their 2 s grace, the fires due since the stop would
    # be the auditor's "no dispatcher" a few seconds after it, however long
    # the drain above took.
    for job in jobs:
        job_verbs.pause(job, note="scenario over")
    assert_audit_clean(since, receiver=receiver, jobs=jobs)

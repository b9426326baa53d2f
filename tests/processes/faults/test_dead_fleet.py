"""A fleet that dies whole (docs/operating/auditor.md "What it needs").

A 1 s job is dispatched and delivered by a real dispatcher and worker. The
worker is SIGKILLed, so runs pile up waiting; then the dispatcher, so the
job's fires go overdue. Once neither has beaten for longer than a live
process would (10 s), the real ``manage.py audit_fires`` must fail, naming
``no dispatcher`` and ``no worker`` with what is owed and since when: the
auditor used to judge lateness only while some process was alive, and
printed "OK" for the outage an operator most needs to see. When the fleet
comes back, the same history audits clean.
"""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys

import pytest

from core.db import db_now
from dispatch.models import ProcessHeartbeat
from ops.audit import ALIVE_WITHIN, audit
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job
from tests.processes.conftest import ROOT, process_env, wait_until
from tests.processes.faults.conftest import assert_audit_clean, drain, registered

pytestmark = [pytest.mark.django_db(transaction=True)]

TOLERANCE = dt.timedelta(seconds=5)


def audit_fires(since: dt.datetime) -> subprocess.CompletedProcess:
    """The operator's command, as a process of its own."""
    return subprocess.run(
        [
            sys.executable,
            "manage.py",
            "audit_fires",
            "--since",
            since.isoformat(),
            "--tolerance",
            str(TOLERANCE.total_seconds()),
        ],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def kill(processes, proc) -> dt.datetime:
    """SIGKILL ``proc``; the database's time once it is gone."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    return db_now()


def test_a_dead_fleet_fails_the_audit_until_it_is_back(owner, processes, receiver, since):
    job = make_job(
        owner,
        interval_seconds=1,
        misfire_grace_seconds=1,
        overlap_policy="allow",
        url=receiver.url("ok"),
    )
    worker = processes.manage("work", "--lease-seconds", "5", "--name", "w1")
    dispatcher = processes.manage("dispatch", "--name", "d1")
    wait_until(
        lambda: Run.objects.filter(job=job, state="succeeded").count() >= 3,
        timeout=60,
        message="three deliveries by the live fleet",
    )

    kill(processes, worker)
    waiting = Run.objects.filter(job=job, state="pending")
    wait_until(lambda: waiting.count() >= 2, timeout=60, message="runs waiting for a worker")
    dead = kill(processes, dispatcher)
    last_seen = max(ProcessHeartbeat.objects.values_list("last_seen", flat=True))
    wait_until(
        lambda: db_now() > max(dead, last_seen) + ALIVE_WITHIN + TOLERANCE,
        timeout=60,
        interval=0.5,
        message="the fleet's last beats to be older than a live process's",
    )

    failed = audit_fires(since)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    report = failed.stdout
    assert "0 dispatchers and 0 workers alive" in report, report
    verdict = report.splitlines()[-1]
    assert "no dispatcher 1" in verdict and "no worker 1" in verdict, report
    assert "no dispatcher is running (last seen " in report
    assert "1 active jobs overdue past their grace" in report
    assert f"{waiting.count()} claimable webhook runs waiting" in report, report

    # The fleet comes back: the backlog is delivered, the misfires recorded,
    # and once both have been up for the tolerance the history audits clean.
    processes.manage("work", "--lease-seconds", "5", "--name", "w2")
    processes.manage("dispatch", "--name", "d2")
    wait_until(lambda: registered("w2") and registered("d2"), timeout=60, message="the fleet back")
    wait_until(
        lambda: audit(since, job_ids=[job.pk], tolerance=TOLERANCE).ok,
        timeout=60,
        interval=0.5,
        message="the audit clean with the fleet back",
    )
    assert Run.objects.filter(job=job, state="missed", reason="past grace").exists()
    # With the receiver's log: the job paused and its last runs finished
    # first, so no delivery lands between the log's flush and the audit's
    # read of the runs (a run that succeeded in between would read as
    # "never delivered").
    job_verbs.pause(job, note="scenario over")
    drain([job], message="the paused job's last runs to finish")
    assert_audit_clean(since, receiver=receiver, jobs=[job], tolerance=TOLERANCE)

"""The pull worker of examples/pull_worker.py, as a user runs it: a separate
process against gunicorn, with a dispatcher making the scheduled runs.

It completes scheduled runs (its claims waiting on the server for them),
reports failures, keeps a run whose work lasts
well past its lease by heartbeating, and rides out a restart of the web
process (its connections refused meanwhile) by retrying with backoff.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from ops.bench import processes as bench
from runs import job_verbs
from runs.models import Attempt, Run
from tests.factories import make_job
from tests.integration.api.support import api_key
from tests.processes.conftest import ROOT, process_env, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

EXAMPLE = ROOT / "examples" / "pull_worker.py"
LEASE = 6  # seconds; the example heartbeats every third of it
LONG_WORK = 2.5 * LEASE  # the long job's work outlasts its lease twice over


def start_web(processes, name: str, port: int | None = None):
    """gunicorn as the Procfile runs it, once it answers; with its port."""
    tmp = processes.tmp_path / name
    tmp.mkdir()
    proc, port = bench.start_web(tmp, env=process_env(), port=port)
    processes.adopt(proc, tmp / "web.out")
    return proc, port


def start_worker(processes, base: str, token: str, name: str, *extra: str):
    return processes.start(
        str(EXAMPLE),
        "--url",
        base,
        "--token",
        token,
        "--worker",
        name,
        "--lease-seconds",
        str(LEASE),
        # Claims wait on the server (api/claim_waits.py) and are answered
        # when a run is due; the poll, a minute, would be far too slow for
        # the deadlines below.
        "--wait-seconds",
        "10",
        "--poll-seconds",
        "60",
        *extra,
        name=name,
    )


def state(run: Run) -> str:
    return Run.objects.get(pk=run.pk).state


def test_the_example_pull_worker_completes_runs_heartbeats_and_survives_a_web_restart(
    owner, processes
):
    token = api_key(owner)
    web, port = start_web(processes, "web-1")
    base = f"http://127.0.0.1:{port}"
    processes.manage("dispatch")

    scheduled = make_job(owner, name="every-2s", target_kind="pull", url="", interval_seconds=2)
    long = make_job(
        owner,
        name="long",
        target_kind="pull",
        url="",
        timeout_seconds=120,
        payload={"sleep_seconds": LONG_WORK},
    )
    failing = make_job(
        owner,
        name="failing",
        target_kind="pull",
        url="",
        payload={"fail": "no such warehouse", "retryable": False},
    )
    # One worker kept to the scheduled job (--job), one for everything, two at once.
    only = start_worker(processes, base, token, "only-scheduled", "--job", str(scheduled.pk))
    every = start_worker(processes, base, token, "any", "--concurrency", "2")

    long_run = job_verbs.trigger(long)
    failed_run = job_verbs.trigger(failing)
    wait_until(
        lambda: Run.objects.filter(job=scheduled, state="succeeded").count() >= 3,
        timeout=120,
        message="three scheduled runs completed by the example worker",
    )
    wait_until(lambda: state(failed_run) == "failed", timeout=60, message="the failing run")
    wait_until(lambda: state(long_run) == "succeeded", timeout=120, message="the long run")

    # The long run kept its first lease through heartbeats: one attempt, by the
    # worker that claimed it, though its work lasted over twice the lease
    # (and the other thread of that worker was claiming all along).
    long_run.refresh_from_db()
    assert long_run.finished_at - long_run.started_at > dt.timedelta(seconds=2 * LEASE)
    attempts = list(Attempt.objects.filter(run=long_run).values_list("number", "outcome", "worker"))
    assert attempts == [(1, "succeeded", f"pull:{owner.pk}:any")]
    assert (long_run.last_error, long_run.last_response) == ("", f"long: slept {LONG_WORK:g} s")

    failed_run.refresh_from_db()
    assert (failed_run.reason, failed_run.last_error) == ("permanent error", "no such warehouse")
    # --job: the restricted worker took runs of its job only.
    theirs = Attempt.objects.filter(worker=f"pull:{owner.pk}:only-scheduled")
    assert theirs.exists()
    assert set(theirs.values_list("run__job", flat=True)) == {scheduled.pk}

    # The web process goes away: the workers' calls are refused, and they back off.
    assert processes.stop(web) == 0
    during = job_verbs.trigger(failing, idempotency_key="during-the-outage")
    wait_until(
        lambda: "Connection refused" in Path(every.log_path).read_text(),
        timeout=60,
        message="the worker to see the web process gone",
    )
    start_web(processes, "web-2", port=port)
    wait_until(lambda: state(during) == "failed", timeout=120, message="the run after the restart")
    assert Run.objects.get(pk=during.pk).last_error == "no such warehouse"

    for worker in (only, every):
        assert processes.stop(worker) == 0
    assert not Run.objects.filter(state="running", lease_owner__startswith="pull:").exists()

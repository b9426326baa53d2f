"""Every Punctual process through PgBouncer in transaction pooling mode
(docs/operating/poolers.md): gunicorn serving the pull API, a dispatcher
and a worker, each connected to the pooler only, with the worker's LISTEN
connection straight to the server.

The pooler spreads each client's transactions over its server connections
(tests/pooler.py), so any state a process left in its session (a prepared
statement, a setting, a session lock, a LISTEN) is missing, or another
client's, in its next transaction: the scenario runs every hot statement
well past psycopg's preparing threshold and expects no error anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests

from accounts import tokens
from ops.bench import processes as bench
from runs import job_verbs
from runs.models import Attempt, Run
from tests.factories import make_job
from tests.processes.conftest import process_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

AN_HOUR = "3600"
PULL_RUNS = 12  # each complete's statements run 12 times: past psycopg's 5
TROUBLE = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback")


def named(env: dict[str, str], name: str) -> dict[str, str]:
    """``env`` whose database connection says ``name`` to the pooler."""
    return {**env, "DATABASE_URL": f"{env['DATABASE_URL']}?application_name={name}"}


def start_web(processes, env: dict[str, str]) -> str:
    """gunicorn as the Procfile runs it (the benchmarks' starter); its base
    URL once it answers."""
    proc, port = bench.start_web(processes.tmp_path, env=env)
    processes.adopt(proc, processes.tmp_path / "web.out")
    return f"http://127.0.0.1:{port}"


def pull_every_run(base: str, token: str, job) -> set[str]:
    """A pull worker over the API: claim all of ``job``'s runs, then
    heartbeat and complete each one; the ids it completed."""
    http = requests.Session()
    http.headers["Authorization"] = f"Token {token}"
    claimed = http.post(
        f"{base}/api/v1/runs/claim/",
        json={"worker": "pooled", "limit": 100, "job": str(job.pk)},
        timeout=30,
    )
    assert claimed.status_code == 200, claimed.text
    for run in claimed.json():
        body = {"attempt": run["attempt"]}
        beat = http.post(f"{base}/api/v1/runs/{run['id']}/heartbeat/", json=body, timeout=30)
        assert beat.status_code == 200, beat.text
        body["status"] = "succeeded"
        done = http.post(f"{base}/api/v1/runs/{run['id']}/complete/", json=body, timeout=30)
        assert done.status_code == 200, done.text
    return {run["id"] for run in claimed.json()}


def test_web_dispatcher_and_worker_work_through_pgbouncer_in_transaction_mode(
    owner, processes, receiver, pgbouncer, settings
):
    # Twelve manual runs of one job below: over the default triggers per minute.
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 100
    env = process_env(through=pgbouncer, PUNCTUAL_POLL_SECONDS=AN_HOUR)
    base = start_web(processes, named(env, "pooled-web"))
    dispatcher = processes.manage("dispatch", env=named(env, "pooled-dispatch"))
    worker = processes.manage("work", "--name", "pooled-work", env=named(env, "pooled-work"))

    # A manual run for the idle worker: with the safety poll at an hour, only
    # the NOTIFY heard on its direct LISTEN connection starts it.
    wait_until(
        lambda: "listening for wake-ups" in Path(worker.log_path).read_text(),
        timeout=120,
        message="the worker to listen",
    )
    manual = job_verbs.trigger(make_job(owner, url=receiver.url("ok")))
    wait_until(
        lambda: Run.objects.get(pk=manual.pk).state == "succeeded",
        timeout=60,
        message="the manual run, woken by NOTIFY",
    )

    # Scheduled webhook runs: the dispatcher's tick and the worker's claim,
    # heartbeat and completion, again and again.
    ticking = make_job(owner, interval_seconds=1, url=receiver.url("ok"), overlap_policy="allow")
    wait_until(
        lambda: Run.objects.filter(job=ticking, state="succeeded").count() >= 10,
        timeout=120,
        message="ten scheduled runs delivered through the pooler",
    )
    assert {"pooled-web", "pooled-dispatch", "pooled-work"} <= pgbouncer.client_names()

    # The pull API under gunicorn.
    pull = make_job(owner, target_kind="pull", url="", overlap_policy="allow")
    runs = [job_verbs.trigger(pull, idempotency_key=f"pull-{k}") for k in range(PULL_RUNS)]
    completed = pull_every_run(base, tokens.issue(owner)[1], pull)
    assert {str(run.pk) for run in runs} <= completed
    assert set(Run.objects.filter(pk__in=completed).values_list("state", flat=True)) == {
        "succeeded"
    }

    assert not Attempt.objects.filter(run__job=ticking).exclude(outcome="succeeded").exists()
    for proc in (dispatcher, worker):
        assert processes.stop(proc) == 0
    for proc in processes.procs:
        lines = Path(proc.log_path).read_text(errors="replace").splitlines()
        assert not [line for line in lines if TROUBLE.search(line)], proc.log_path


def test_a_worker_refuses_to_listen_through_a_transaction_pooler(processes, pgbouncer):
    """LISTEN through the pooler would hear nothing, and the worker would wait
    for the safety poll: without a direct URL for it, no process starts."""
    env = process_env(through=pgbouncer)
    del env["PUNCTUAL_LISTEN_DATABASE_URL"]
    worker = processes.manage("work", env=env)
    assert worker.wait(timeout=120) != 0
    assert "PUNCTUAL_LISTEN_DATABASE_URL" in Path(worker.log_path).read_text()

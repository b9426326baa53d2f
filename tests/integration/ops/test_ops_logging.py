"""Structured logs (core/logs.py): every line about a run carries
run_id, job_id and attempt, in the key=value and the JSON format alike."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from core.db import db_now
from core.logs import JsonFormatter, KeyValueFormatter
from dispatch.dispatcher import Dispatcher
from jobs.models import Job
from runs import outcomes
from runs.models import Run
from tests.factories import make_job
from tests.integration.ops.conftest import wait_until

ROOT = Path(__file__).resolve().parents[3]
RUN_FIELDS = ("run_id", "job_id", "attempt")


def record(msg: str = "delivery failed", exc_info=None, **extra) -> logging.LogRecord:
    rec = logging.getLogger("punctual.worker").makeRecord(
        "punctual.worker", logging.INFO, __file__, 1, msg, (), exc_info, extra=extra
    )
    return rec


def test_json_formatter_writes_one_object_with_the_run_fields():
    run_id, job_id = uuid.uuid4(), uuid.uuid4()
    line = JsonFormatter().format(
        record(run_id=str(run_id), job_id=str(job_id), attempt=2, error="HTTP 500")
    )
    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "delivery failed"
    assert data["level"] == "INFO"
    assert data["logger"] == "punctual.worker"
    assert data["time"]
    assert (data["run_id"], data["job_id"], data["attempt"]) == (str(run_id), str(job_id), 2)
    assert data["error"] == "HTTP 500"


def test_json_formatter_stringifies_what_json_cannot_hold_and_keeps_tracebacks():
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    data = json.loads(
        JsonFormatter().format(record(exc_info=exc_info, run_id=uuid.UUID(int=1), at=when))
    )
    assert data["run_id"] == "00000000-0000-0000-0000-000000000001"
    assert data["at"] == "2026-01-01 00:00:00+00:00"
    assert "ValueError: boom" in data["exc_info"]


def test_key_value_formatter_appends_the_fields():
    line = KeyValueFormatter().format(record(run_id="r1", job_id="j1", attempt=3))
    assert line.endswith("punctual.worker: delivery failed run_id=r1 job_id=j1 attempt=3")


def test_the_json_option_switches_the_real_logging_config():
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="scheduler_site.settings",
        SECRET_KEY="x",
        PUNCTUAL_LOG_JSON="true",
    )
    code = (
        "import django, logging; django.setup();"
        "logging.getLogger('punctual.worker').warning('lease lost',"
        " extra={'run_id': 'r', 'job_id': 'j', 'attempt': 1})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stderr.strip().splitlines()[-1])
    assert (data["message"], data["run_id"], data["job_id"], data["attempt"]) == (
        "lease lost",
        "r",
        "j",
        1,
    )


@pytest.mark.django_db(transaction=True)
def test_worker_and_lease_lines_about_a_run_carry_its_ids(owner, caplog, worker_thread):
    caplog.set_level(logging.INFO)
    job = make_job(owner, url="http://127.0.0.1:9/refused", max_attempts=1)
    Job.objects.filter(pk=job.pk).update(next_fire_at=db_now() - dt.timedelta(seconds=1))
    Dispatcher().tick()
    run = Run.objects.get(job=job)
    worker_thread()
    wait_until(lambda: Run.objects.get(pk=run.pk).state == "failed", message="the run to fail")
    # A stale completion of the same run, from a worker that lost the lease.
    outcomes.complete("zombie", [outcomes.Result(run.pk, job.pk, 1, "succeeded")])

    about_run = [
        r
        for r in caplog.records
        if r.getMessage() in ("delivery failed", "stale completion dropped: the lease was lost")
    ]
    assert {r.getMessage() for r in about_run} == {
        "delivery failed",
        "stale completion dropped: the lease was lost",
    }
    for r in about_run:
        data = json.loads(JsonFormatter().format(r))
        assert (data["run_id"], data["job_id"], data["attempt"]) == (str(run.pk), str(job.pk), 1)

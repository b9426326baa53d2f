"""A pull worker end to end over real HTTP, against a real gunicorn process on
the test database: claim, heartbeat, lose the lease by going quiet, watch the
run be claimed again with attempt + 1, and get a 409 for the stale complete.

PostgreSQL only: gunicorn and the test share the database server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings

from runs import job_verbs
from runs.models import Attempt, Run
from tests.database import subprocess_database_url
from tests.factories import make_job
from tests.integration.api.support import api_key
from tests.processes.conftest import free_port

pytestmark = [pytest.mark.processes]

BIN = Path(sys.executable).parent
# Generous: a cold gunicorn on a busy machine takes a while to answer its first request.
READY_WITHIN = 120.0
RECLAIM_WITHIN = 30.0


@pytest.fixture
def gunicorn(transactional_db, tmp_path):
    port = free_port()
    log = (tmp_path / "gunicorn.log").open("w")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "scheduler_site.settings",
        "DATABASE_URL": subprocess_database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
    }
    proc = subprocess.Popen(
        [str(BIN / "gunicorn"), "scheduler_site.wsgi", "--bind", f"127.0.0.1:{port}"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_WITHIN
        while True:
            assert proc.poll() is None, (tmp_path / "gunicorn.log").read_text()
            try:
                if requests.get(f"{base}/api/v1/schema/", timeout=10).status_code == 200:
                    break
            except requests.RequestException:
                pass  # not listening yet, or too busy to answer within the timeout
            assert time.monotonic() < deadline, "gunicorn did not answer in time"
            time.sleep(0.1)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_pull_worker_over_http_reclaims_an_expired_lease_and_fences_the_stale_worker(
    gunicorn, django_user_model
):
    owner = django_user_model.objects.create_user("puller", is_staff=True)
    token = api_key(owner)
    job = make_job(owner, target_kind="pull", url="", timeout_seconds=120, max_attempts=3)
    run = job_verbs.trigger(job)
    http = requests.Session()
    http.headers["Authorization"] = f"Token {token}"

    def post(path: str, body: dict) -> requests.Response:
        return http.post(f"{gunicorn}/api/v1/{path}", json=body, timeout=10)

    claim = post("runs/claim/", {"worker": "w1", "lease_seconds": 5, "job": str(job.pk)})
    assert claim.status_code == 200, claim.text
    [first] = claim.json()
    assert (first["id"], first["attempt"]) == (str(run.pk), 1)

    beat = post(f"runs/{run.pk}/heartbeat/", {"attempt": 1})
    assert beat.status_code == 200, beat.text
    assert beat.json()["lease_until"] >= first["lease_until"]

    # w1 goes quiet. Within about 5 s its lease expires and w2 takes the run.
    deadline = time.monotonic() + RECLAIM_WITHIN
    while True:
        again = post("runs/claim/", {"worker": "w2", "lease_seconds": 30})
        assert again.status_code == 200, again.text
        if again.json():
            break
        assert time.monotonic() < deadline, "the expired lease was never claimed again"
        time.sleep(0.2)
    [second] = again.json()
    assert (second["id"], second["attempt"]) == (str(run.pk), 2)

    stale = post(f"runs/{run.pk}/complete/", {"attempt": 1, "status": "succeeded"})
    assert stale.status_code == 409, stale.text
    assert post(f"runs/{run.pk}/heartbeat/", {"attempt": 1}).status_code == 409

    done = post(f"runs/{run.pk}/complete/", {"attempt": 2, "status": "succeeded"})
    assert done.status_code == 200, done.text
    assert (done.json()["state"], done.json()["attempt"]) == ("succeeded", 2)

    run.refresh_from_db()
    assert run.state == "succeeded"
    assert list(Attempt.objects.filter(run=run).values_list("number", "outcome", "worker")) == [
        (1, "lease_expired", f"pull:{owner.pk}:w1"),
        (2, "succeeded", f"pull:{owner.pk}:w2"),
    ]
    assert Run.objects.filter(job=job).count() == 1

"""/api/v1/health/ against real ``manage.py dispatch`` processes (docs/operating/health.md):
200 while one runs, 503 with a reason once no dispatcher has been seen for
30 s (at once after a clean stop), 200 again after a restart. Nothing in
production code is shortened for the test."""

from __future__ import annotations

import signal

import pytest

from core.db import db_now
from dispatch.fleet import ALIVE_WITHIN
from dispatch.models import ProcessHeartbeat
from tests.processes.conftest import wait_until

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True),
]

URL = "/api/v1/health/"
NO_DISPATCHER = "no dispatcher seen within 30 s"


def status_is(client, code: int):
    response = client.get(URL)
    return response.json() if response.status_code == code else None


def test_health_follows_the_dispatcher_stopping_and_restarting(client, processes):
    first = processes.manage("dispatch", name="dispatch-first")
    body = wait_until(lambda: status_is(client, 200), timeout=60, message="200 with a dispatcher")
    assert body == {
        "status": "ok",
        "database": "ok",
        "dispatchers": 1,
        "workers": 0,
        "dispatch_lag_seconds": 0.0,
        "backlog_seconds": 0.0,
    }

    assert processes.stop(first, signal.SIGTERM) == 0
    # A dispatcher that stops cleanly says goodbye: no 30 s wait for its row to
    # age out, the very next request after it exited answers 503.
    body = status_is(client, 503)
    assert body, "still 200 after the only dispatcher exited"
    assert body["status"] == "degraded"
    assert body["dispatchers"] == 0
    assert body["reasons"] == [NO_DISPATCHER]

    processes.manage("dispatch", name="dispatch-second")
    body = wait_until(lambda: status_is(client, 200), timeout=60, message="200 after a restart")
    assert body["dispatchers"] == 1


def test_a_killed_dispatcher_ages_out_after_30_seconds(client, processes):
    """SIGKILL leaves no goodbye: the heartbeat row stays, and health turns 503
    once it is 30 s old by the database clock. Each answer is checked against
    the row's age on that clock, read just before and just after the request,
    so a busy machine that polls late cannot fail (or pass) the test."""
    dispatcher = processes.manage("dispatch", "--name", "doomed", name="dispatch-killed")
    wait_until(lambda: status_is(client, 200), timeout=60, message="200 with a dispatcher")
    processes.stop(dispatcher, signal.SIGKILL)
    last_seen = ProcessHeartbeat.objects.get(name="doomed").last_seen  # final now

    def answer_by_age():
        before = db_now() - last_seen
        response = client.get(URL)
        after = db_now() - last_seen
        if response.status_code == 200:
            assert before <= ALIVE_WITHIN, f"still 200 when the beat was {before} old"
            return None
        assert response.status_code == 503, response.content
        assert after > ALIVE_WITHIN, f"503 when the beat was only {after} old"
        return response.json()

    assert answer_by_age() is None, "a killed dispatcher still counts until its row ages out"
    body = wait_until(
        answer_by_age, timeout=120, interval=0.2, message="503 after the heartbeat ages out"
    )
    assert body["reasons"] == [NO_DISPATCHER]

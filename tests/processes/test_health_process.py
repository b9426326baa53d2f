"""/api/v1/health/ against real ``manage.py dispatch`` processes (PRODUCT.md §4):
200 while one runs, 503 with a reason within 35 s of it stopping, 200 again
after a restart. Nothing in production code is shortened for the test."""

from __future__ import annotations

import signal
import time

import pytest

from tests.processes.conftest import wait_until

pytestmark = [
    pytest.mark.postgres,
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
    }

    assert processes.stop(first, signal.SIGTERM) == 0
    stopped = time.monotonic()
    body = wait_until(lambda: status_is(client, 503), timeout=35, message="503 after SIGTERM")
    assert time.monotonic() - stopped <= 35
    assert body["status"] == "degraded"
    assert body["dispatchers"] == 0
    assert body["reasons"] == [NO_DISPATCHER]

    processes.manage("dispatch", name="dispatch-second")
    body = wait_until(lambda: status_is(client, 200), timeout=60, message="200 after a restart")
    assert body["dispatchers"] == 1


def test_a_killed_dispatcher_ages_out_within_35_seconds(client, processes):
    """SIGKILL leaves no goodbye: the heartbeat row stays until it is 30 s old."""
    dispatcher = processes.manage("dispatch", name="dispatch-killed")
    wait_until(lambda: status_is(client, 200), timeout=60, message="200 with a dispatcher")
    processes.stop(dispatcher, signal.SIGKILL)
    killed = time.monotonic()
    assert status_is(client, 200), "a killed dispatcher still counts until its row ages out"
    body = wait_until(
        lambda: status_is(client, 503), timeout=40, message="503 after the heartbeat ages out"
    )
    assert time.monotonic() - killed <= 35
    assert body["reasons"] == [NO_DISPATCHER]

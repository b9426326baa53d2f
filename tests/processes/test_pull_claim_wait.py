"""Pull claims that wait (``wait_seconds``, api/claim_waits.py), over HTTP to
gunicorn, with a real dispatcher making the runs.

With the safety poll set to an hour, a waiting claim can answer a run before
its wait ends only if the NOTIFY of the dispatcher's tick woke it: without
it, the run would come back at the end of the 30 s wait (its last claim). The
figures (fire to claim, by the database's and by this process's clock) are
printed and kept as the test's properties; the assertion is the mechanism's,
not the machine's speed: each answer comes back seconds before any poll or
the end of the wait could have produced it.
"""

from __future__ import annotations

import statistics
import threading
import time

import pytest
import requests
from django.db import connection

from dispatch.models import ProcessHeartbeat
from ops.bench import processes as bench
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job
from tests.integration.api.support import api_key
from tests.processes.conftest import process_env, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

AN_HOUR = "3600"
CLAIM = "/api/v1/runs/claim/"
WAIT = 30


def start_web(processes, name: str, *, threads: int = 4, **env: str) -> str:
    tmp = processes.tmp_path / name
    tmp.mkdir()
    proc, port = bench.start_web(
        tmp, workers=1, threads=threads, env=process_env(PUNCTUAL_POLL_SECONDS=AN_HOUR, **env)
    )
    processes.adopt(proc, tmp / "web.out")
    return f"http://127.0.0.1:{port}"


def start_dispatcher(processes) -> None:
    """Once it beats: a fire while it is still starting would be late by
    its start, which is not what these tests look at."""
    processes.manage("dispatch")
    wait_until(
        ProcessHeartbeat.objects.filter(kind="dispatcher").exists,
        timeout=60,
        message="the dispatcher to start",
    )


def claim(base: str, token: str, **body) -> requests.Response:
    return requests.post(
        base + CLAIM,
        json={"worker": "w", **body},
        headers={"Authorization": f"Token {token}"},
        timeout=WAIT + 30,
    )


def complete(base: str, token: str, run: dict) -> None:
    answer = requests.post(
        f"{base}/api/v1/runs/{run['id']}/complete/",
        json={"attempt": run["attempt"], "status": "succeeded"},
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


def fire_to_answer(base: str, token: str, job, rounds: int) -> list[dict]:
    """Claim with a wait, ``rounds`` times, completing each run (the job is
    ``skip``: the next fire needs the run ended). Each round: when the claim
    was sent and answered (this clock), and the run's fire and claim time
    (the database's: its ``started_at`` is the claim's now)."""
    seen = []
    for _ in range(rounds):
        sent = time.time()
        answer = claim(base, token, wait_seconds=WAIT)
        answered = time.time()
        assert answer.status_code == 200, answer.text
        [run] = answer.json()
        row = Run.objects.get(pk=run["id"])
        seen.append(
            {
                "sent": sent,
                "answered": answered,
                "fire": row.scheduled_at.timestamp(),
                "made": row.created_at.timestamp(),
                "claimed": row.started_at.timestamp(),
            }
        )
        complete(base, token, run)
    return seen


@pytest.mark.pooler  # the web process's LISTEN goes straight to the server
def test_a_waiting_claim_answers_a_fire_at_once_through_the_wake_up(
    owner, processes, record_property
):
    token = api_key(owner)
    base = start_web(processes, "web")
    start_dispatcher(processes)
    job = make_job(owner, name="every-2s", target_kind="pull", url="", interval_seconds=2)
    rounds = fire_to_answer(base, token, job, rounds=6)

    # The rounds whose claim was waiting when the fire came (the first may
    # find a fire already due, and a slow round may miss one).
    waited = [r for r in rounds if r["sent"] < r["fire"]]
    assert len(waited) >= 3, rounds
    by_database = [r["claimed"] - r["fire"] for r in waited]
    by_client = [r["answered"] - r["fire"] for r in waited]
    # From the dispatcher's insert of the run (its transaction's start) to
    # the claim: the wake-up's own share, without the dispatcher's lag.
    made_to_claim = [r["claimed"] - r["made"] for r in waited]
    figures = {
        f"{name}_ms_{stat}": round(f(values) * 1000, 1)
        for name, values in (
            ("fire_to_claim", by_database),
            ("fire_to_answer", by_client),
            ("made_to_claim", made_to_claim),
        )
        for stat, f in (("median", statistics.median), ("max", max))
    }
    for key, value in figures.items():
        record_property(key, value)
    print("waiting claim, fire to answer:", figures)
    # Seconds before the end of the wait (30 s), the only other way a run
    # could come back here: the safety poll is an hour. 5 s leaves a busy
    # 2-core machine ample room while staying far from either.
    assert max(by_client) < 5.0, figures
    assert max(by_database) < 5.0, figures


def test_a_waiting_claim_that_finds_nothing_answers_empty_when_the_wait_ends(owner, processes):
    token = api_key(owner)
    base = start_web(processes, "web")
    make_job(owner, name="far-off", target_kind="pull", url="", interval_seconds=3600)
    started = time.monotonic()
    answer = claim(base, token, wait_seconds=2)
    assert (answer.status_code, answer.json()) == (200, [])
    assert time.monotonic() - started >= 2
    assert not Run.objects.exists()


@pytest.mark.pooler  # what a pooled web process without a direct LISTEN URL does
def test_without_listen_a_waiting_claim_polls_and_still_answers_the_fire(owner, processes):
    """A transaction pooler without a direct LISTEN URL (PUNCTUAL_LISTEN=false):
    the waiting claim claims again every FALLBACK_POLL, within its wait."""
    token = api_key(owner)
    base = start_web(processes, "web", PUNCTUAL_LISTEN="false")
    start_dispatcher(processes)
    job = make_job(owner, name="every-2s", target_kind="pull", url="", interval_seconds=2)
    rounds = fire_to_answer(base, token, job, rounds=3)
    waited = [r for r in rounds if r["sent"] < r["fire"]]
    assert waited, rounds
    assert max(r["answered"] - r["fire"] for r in waited) < 5.0, rounds


def web_listens() -> bool:
    """A web process's LISTEN connection is up, in this test's database: the
    first waiting claim opened it (api/claim_waits.py), so that claim waits."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT 1 FROM pg_stat_activity
            WHERE datname = current_database() AND application_name LIKE 'punctual-claim-listen %%'
              AND state = 'idle' AND query ILIKE 'LISTEN %%'
            """
        )
        return cur.fetchone() is not None


def test_waiting_claims_are_capped_and_leave_the_web_process_free(owner, other_owner, processes):
    """One waiting claim allowed per process: while the first owner's claim
    waits, another owner's waiting claim, and the first owner's second, answer
    429 at once; the health check is answered meanwhile; and the waiting claim
    answers the run triggered for it."""
    base = start_web(processes, "web", threads=4, PUNCTUAL_CLAIM_WAITERS="1")
    token, other = api_key(owner), api_key(other_owner)
    answers: list[requests.Response] = []
    waiting = threading.Thread(target=lambda: answers.append(claim(base, token, wait_seconds=20)))
    waiting.start()
    try:
        wait_until(web_listens, timeout=30, message="the first claim to wait")
        for key in (other, token):
            refused = claim(base, key, wait_seconds=20)
            assert refused.status_code == 429, refused.text
            assert refused.headers["Retry-After"] == "1"
        health = requests.get(base + "/api/v1/health/", timeout=10)
        assert health.status_code in (200, 503) and "status" in health.json()
        assert waiting.is_alive()
        job = make_job(owner, name="now", target_kind="pull", url="", interval_seconds=3600)
        run = job_verbs.trigger(job)
    finally:
        waiting.join(timeout=60)
    [answer] = answers
    assert [r["id"] for r in answer.json()] == [str(run.pk)]

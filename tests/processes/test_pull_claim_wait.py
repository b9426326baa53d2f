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
    processes.manage("dispatch")
    job = make_job(owner, name="every-2s", target_kind="pull", url="", interval_seconds=2)
    rounds = fire_to_answer(base, token, job, rounds=6)

    # The rounds whose claim was waiting when the fire came (the first may
    # find a fire already due, and a slow round may miss one).
    waited = [r for r in rounds if r["sent"] < r["fire"]]
    assert len(waited) >= 3, rounds
    by_database = [r["claimed"] - r["fire"] for r in waited]
    by_client = [r["answered"] - r["fire"] for r in waited]
    figures = {
        "fire_to_claim_ms_median": round(statistics.median(by_database) * 1000, 1),
        "fire_to_claim_ms_max": round(max(by_database) * 1000, 1),
        "fire_to_answer_ms_median": round(statistics.median(by_client) * 1000, 1),
        "fire_to_answer_ms_max": round(max(by_client) * 1000, 1),
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
    processes.manage("dispatch")
    job = make_job(owner, name="every-2s", target_kind="pull", url="", interval_seconds=2)
    rounds = fire_to_answer(base, token, job, rounds=3)
    waited = [r for r in rounds if r["sent"] < r["fire"]]
    assert waited, rounds
    assert max(r["answered"] - r["fire"] for r in waited) < 5.0, rounds


def test_waiting_claims_are_capped_and_leave_the_web_process_free(
    owner, other_owner, processes, django_user_model
):
    """Four threads, two waiting claims at most (one per owner): the third
    owner's waiting claim answers 429 at once, the first owner's second waits
    no more than once, and the health check is answered meanwhile."""
    base = start_web(processes, "web", threads=4, PUNCTUAL_CLAIM_WAITERS="2")
    third = django_user_model.objects.create_user("carol", password="pw-carol-123")
    tokens = {user.username: api_key(user) for user in (owner, other_owner, third)}
    answers: dict[str, requests.Response] = {}

    def wait_for(name: str) -> None:
        answers[name] = claim(base, tokens[name], wait_seconds=20)

    threads = [threading.Thread(target=wait_for, args=(n,)) for n in ("alice", "bob")]
    for thread in threads:
        thread.start()
    try:
        # Both waits are registered once a third one is refused.
        # (A list: a Response of a 429 is falsy.)
        [refused] = wait_until(
            lambda: (a := claim(base, tokens["carol"], wait_seconds=1)).status_code == 429 and [a],
            timeout=30,
            message="a claim past the cap to be refused",
        )
        assert refused.headers["Retry-After"] == "1"
        again = claim(base, tokens["alice"], wait_seconds=20)
        assert again.status_code == 429, again.text  # one per owner (half of 2)
        health = requests.get(base + "/api/v1/health/", timeout=10)
        assert health.status_code in (200, 503)
        assert "status" in health.json()
        # A run for the waiting owner: its claim answers it.
        job = make_job(owner, name="now", target_kind="pull", url="", interval_seconds=3600)
        run = job_verbs.trigger(job)
        threads[0].join(timeout=30)
        assert answers["alice"].status_code == 200
        assert [r["id"] for r in answers["alice"].json()] == [str(run.pk)]
    finally:
        for thread in threads:
            thread.join(timeout=60)
    assert answers["bob"].json() == []

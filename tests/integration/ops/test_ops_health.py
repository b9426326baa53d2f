"""GET /api/v1/health/ (docs/operating/health.md): 200 when dispatchers run and keep up,
503 with reasons otherwise."""

from __future__ import annotations

import datetime as dt

import pytest

from core.db import db_now
from dispatch import fleet
from dispatch.models import ProcessHeartbeat
from jobs.models import Job
from runs import job_verbs, leases
from runs.models import Run, RunKind
from tests.factories import make_job

pytestmark = pytest.mark.django_db

URL = "/api/v1/health/"


def beat(kind: str, seen_ago: dt.timedelta = dt.timedelta(0)) -> None:
    registration = fleet.Registration(kind)
    registration.beat()
    ProcessHeartbeat.objects.filter(name=registration.name).update(last_seen=db_now() - seen_ago)


def overdue(job: Job, by: dt.timedelta) -> None:
    Job.objects.filter(pk=job.pk).update(next_fire_at=db_now() - by)


def test_health_is_ok_with_a_live_dispatcher_and_no_lag(client, owner):
    beat("dispatcher")
    beat("worker")
    beat("worker")
    make_job(owner, interval_seconds=3600)
    response = client.get(URL)
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "dispatchers": 1,
        "workers": 2,
        "dispatch_lag_seconds": 0.0,
        "backlog_seconds": 0.0,
    }
    assert "no-store" in response["Cache-Control"]


def test_health_needs_no_authentication_and_answers_head(client):
    beat("dispatcher")
    assert client.head(URL).status_code == 200
    assert client.post(URL).status_code == 405


def test_no_dispatcher_at_all_is_degraded_with_a_reason(client):
    response = client.get(URL)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["database"] == "ok"
    assert body["dispatchers"] == 0
    assert body["reasons"] == ["no dispatcher seen within 30 s"]


def test_a_dispatcher_silent_for_over_30_s_no_longer_counts(client):
    beat("dispatcher", seen_ago=dt.timedelta(seconds=31))
    beat("worker")
    response = client.get(URL)
    assert response.status_code == 503
    assert response.json()["dispatchers"] == 0
    beat("dispatcher", seen_ago=dt.timedelta(seconds=20))
    assert client.get(URL).status_code == 200


def test_lag_over_30_s_is_degraded_even_with_a_dispatcher(client, owner):
    beat("dispatcher")
    overdue(make_job(owner), by=dt.timedelta(seconds=120))
    response = client.get(URL)
    assert response.status_code == 503
    body = response.json()
    assert body["dispatchers"] == 1
    assert 120 <= body["dispatch_lag_seconds"] < 150
    assert len(body["reasons"]) == 1
    assert body["reasons"][0].startswith("dispatch lag 1")
    assert body["reasons"][0].endswith("s is over 30 s")


def test_lag_under_30_s_is_still_ok(client, owner):
    beat("dispatcher")
    overdue(make_job(owner), by=dt.timedelta(seconds=10))
    response = client.get(URL)
    assert response.status_code == 200
    assert 10 <= response.json()["dispatch_lag_seconds"] < 30


def test_paused_and_deleted_jobs_do_not_count_as_lag(client, owner):
    beat("dispatcher")
    paused, deleted = make_job(owner), make_job(owner)
    overdue(paused, by=dt.timedelta(hours=1))
    overdue(deleted, by=dt.timedelta(hours=1))
    job_verbs.pause(Job.objects.get(pk=paused.pk), note="maintenance")
    job_verbs.soft_delete(Job.objects.get(pk=deleted.pk))
    response = client.get(URL)
    assert response.status_code == 200
    assert response.json()["dispatch_lag_seconds"] == 0.0


def test_both_reasons_are_listed_together(client, owner):
    overdue(make_job(owner), by=dt.timedelta(minutes=5))
    body = client.get(URL).json()
    assert body["reasons"][0] == "no dispatcher seen within 30 s"
    assert body["reasons"][1].startswith("dispatch lag 3")


@pytest.mark.django_db(transaction=True)
def test_database_down_is_503_with_database_error(client, database_down):
    beat("dispatcher")
    with database_down():
        response = client.get(URL)
    assert response.status_code == 503
    assert response.json() == {
        "status": "degraded",
        "database": "error",
        "dispatchers": None,
        "workers": None,
        "dispatch_lag_seconds": None,
        "backlog_seconds": None,
        "reasons": ["database unavailable"],
    }
    assert client.get(URL).status_code == 200


def due_run(job: Job, waited: dt.timedelta) -> Run:
    """A pending run of ``job`` that has been claimable for ``waited``."""
    fire = db_now() - waited
    Run.objects.create_for_fires(job, [fire], kind=RunKind.SCHEDULED)
    return Run.objects.get(job=job, scheduled_at=fire)


def test_a_run_waiting_for_a_worker_too_long_is_degraded_with_its_age(client, owner):
    beat("dispatcher")
    job = make_job(owner, interval_seconds=3600)
    due_run(job, dt.timedelta(seconds=30))
    body = client.get(URL).json()
    assert body["status"] == "ok" and 30 <= body["backlog_seconds"] < 60
    due_run(job, dt.timedelta(seconds=95))
    response = client.get(URL)
    assert response.status_code == 503
    body = response.json()
    assert 95 <= body["backlog_seconds"] < 125
    [reason] = body["reasons"]
    assert reason.startswith("oldest claimable run has waited 9") or reason.startswith(
        "oldest claimable run has waited 1"
    )
    assert reason.endswith("s for a worker (over 60 s): deliveries are late")


def test_the_backlog_limit_is_a_setting(client, owner, settings):
    settings.PUNCTUAL_BACKLOG_DEGRADED_SECONDS = 10
    beat("dispatcher")
    due_run(make_job(owner, interval_seconds=3600), dt.timedelta(seconds=30))
    assert "(over 10 s)" in client.get(URL).json()["reasons"][0]


def test_a_spread_backfill_not_due_yet_is_no_backlog(client, owner, settings):
    settings.PUNCTUAL_BACKFILL_RATE = 0.01
    beat("dispatcher")
    now = db_now()
    job = make_job(
        owner, interval_seconds=60, overlap_policy="allow", start_at=now - dt.timedelta(hours=2)
    )
    job_verbs.backfill(job, now - dt.timedelta(hours=1), now - dt.timedelta(minutes=30))
    # The first is due at once, and claimed; the rest are spread over the next hour.
    assert len(leases.claim("w1", limit=100, lease_seconds=60)) == 1
    response = client.get(URL)
    assert response.status_code == 200
    assert response.json()["backlog_seconds"] == 0.0


def test_runs_of_paused_jobs_and_runs_waiting_for_their_own_job_are_no_backlog(client, owner):
    beat("dispatcher")
    paused = make_job(owner, interval_seconds=3600)
    due_run(paused, dt.timedelta(minutes=5))
    job_verbs.pause(Job.objects.get(pk=paused.pk), note="")
    queued = make_job(owner, interval_seconds=3600, overlap_policy="queue")
    due_run(queued, dt.timedelta(minutes=6))
    due_run(queued, dt.timedelta(minutes=5))
    [running] = leases.claim("w1", limit=10, lease_seconds=600)
    assert running.job_id == queued.pk
    response = client.get(URL)
    assert response.status_code == 200, response.json()
    assert response.json()["backlog_seconds"] == 0.0

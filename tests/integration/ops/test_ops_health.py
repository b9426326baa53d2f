"""GET /api/v1/health/ (README "The REST API"): 200 when dispatchers run and keep up,
503 with reasons otherwise."""

from __future__ import annotations

import datetime as dt

import pytest

from core.db import db_now
from dispatch import fleet
from dispatch.models import ProcessHeartbeat
from jobs.models import Job
from runs import job_verbs
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
        "reasons": ["database unavailable"],
    }
    assert client.get(URL).status_code == 200

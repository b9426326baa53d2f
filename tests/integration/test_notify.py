"""NOTIFY on ``punctual_runs`` (runs/notify.py), heard on a real LISTEN
connection: one per transaction that made runs claimable, delivered at
commit, none for a transaction that made none (docs/operating/processes.md "Wake-ups")."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.db import connection, transaction

from dispatch.dispatcher import Dispatcher
from jobs.schedules import jitter_offset
from runs import job_verbs, leases, outcomes
from runs.models import Run
from runs.notify import CHANNEL, KEEPALIVES, listen_conninfo
from scheduler_site.database_url import database_settings
from tests.factories import at, make_job, rewrite_job

pytestmark = pytest.mark.django_db(transaction=True)

T0 = at("2026-06-01T12:00:00")
S = dt.timedelta(seconds=1)
MARKER = "test-marker"


@pytest.fixture
def heard():
    """A LISTEN connection of the test's own. ``heard()`` returns the payloads
    announced since the last call: it sends a marker notification after
    whatever was committed, and reads up to it (PostgreSQL delivers
    notifications in commit order), so "none" needs no fixed wait."""
    conn = psycopg.connect(**listen_conninfo("punctual-test-listener"), autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")

    def read() -> list[str]:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_notify(%s, %s)", [CHANNEL, MARKER])
        payloads = []
        for note in conn.notifies(timeout=60):
            if note.payload == MARKER:
                return payloads
            payloads.append(note.payload)
        pytest.fail("the marker notification never arrived")

    yield read
    conn.close()


def due_at(job, when):
    rewrite_job(job, next_fire_at=when, created_at=when, start_at=when)
    job.refresh_from_db()
    return job


def test_a_tick_that_makes_runs_notifies_once_and_a_tick_that_makes_none_never(owner, heard):
    for _ in range(3):  # the SQL fast path
        due_at(make_job(owner, interval_seconds=60), T0)
    due_at(make_job(owner, cron="* * * * *", interval_seconds=None), T0)  # the planned path
    d = Dispatcher()
    assert heard() == []
    assert d.tick(now=T0 + S).created == {"pending": 4}
    assert heard() == ["dispatch"]
    assert d.tick(now=T0 + S).created == {}
    assert heard() == []


def test_a_jittered_run_is_announced_by_the_tick_that_finds_it_claimable(owner, heard):
    job = make_job(owner, cron="* * * * *", interval_seconds=None, jitter_seconds=3600)
    offset = dt.timedelta(seconds=jitter_offset(job.pk, 3600))
    assert offset > 2 * S  # this job's offset (a hash of its id) is not tiny
    due_at(job, T0)
    d = Dispatcher()
    assert d.tick(now=T0 + S).created == {"pending": 1}
    assert heard() == []  # not claimable before T0 + offset
    assert 0 < d.seconds_until_later_runs() <= offset.total_seconds()
    d.tick(now=T0 + offset - S)
    assert heard() == []
    d.tick(now=T0 + offset)
    assert heard() == ["dispatch"]
    d.tick(now=T0 + offset + S)
    assert heard() == []


def test_owner_verbs_that_make_runs_claimable_notify(owner, heard):
    job = make_job(owner)
    job_verbs.trigger(job, idempotency_key="k1")
    assert heard() == ["trigger"]
    job_verbs.trigger(job, idempotency_key="k1")  # the same run again: nothing new
    assert heard() == []
    start = job.created_at
    assert job_verbs.backfill(job, start, start + 3 * 60 * S)["created"] == 3
    assert heard() == ["backfill"]
    job_verbs.backfill(job, start, start + 3 * 60 * S)  # every slot taken
    assert heard() == []
    job_verbs.pause(job)
    assert heard() == []
    job_verbs.resume(job)  # a run backfilled while paused may start now
    assert heard() == ["resume"]


def test_a_rolled_back_trigger_announces_nothing(owner, heard):
    job = make_job(owner)
    with pytest.raises(RuntimeError), transaction.atomic():
        job_verbs.trigger(job)
        raise RuntimeError("roll back")
    assert heard() == []
    assert not Run.objects.exists()


def test_retries_due_now_releases_and_operator_retries_notify(owner, heard):
    job = make_job(owner, overlap_policy="allow")
    for k in range(3):
        Run.objects.create(
            job=job, scheduled_at=T0 + k * S, available_at=T0, exclusive=False, max_attempts=1
        )
    heard()
    a, b, c = leases.claim("w1", limit=3, lease_seconds=30)

    def result(claimed, **kw):
        return outcomes.Result(
            run_id=claimed.run_id, job_id=claimed.job_id, attempt=claimed.attempt, **kw
        )

    # A retry later is the writer's timer's (dispatch/wakeup.py), not a NOTIFY.
    outcomes.complete("w1", [result(a, state="retrying", retry_in=30)])
    assert heard() == []
    outcomes.complete("w1", [result(b, state="retrying", retry_in=0)])
    assert heard() == ["retry"]
    assert leases.release("w1", [(c.run_id, c.attempt)]) == 1
    assert heard() == ["released"]
    assert leases.release("w1", [(c.run_id, c.attempt)]) == 0
    assert heard() == []
    [d] = leases.claim("w2", limit=1, lease_seconds=30)
    outcomes.complete("w2", [result(d, state="failed")])
    assert heard() == []
    failed = Run.objects.get(state="failed")
    failed.retry()
    assert heard() == ["retry"]


def test_the_listen_connection_takes_keepalives_from_the_url_before_its_own(settings):
    url = "postgres://u@db.internal:5432/p?keepalives_idle=2&tcp_user_timeout=3000"
    settings.PUNCTUAL_LISTEN_DATABASE = database_settings(url)
    params = listen_conninfo("punctual-test-listener")
    assert params["keepalives_idle"] == 2  # the URL's, not KEEPALIVES' 30
    assert params["tcp_user_timeout"] == 3000
    assert params["keepalives_count"] == KEEPALIVES["keepalives_count"]  # not in the URL

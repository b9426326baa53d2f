"""The jobs and runs lists cost a constant number of queries per page, however
many rows it shows, and the runs list never counts the runs table."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.db import db_now
from jobs import history
from runs import job_verbs
from runs.models import Run
from tests.admin_support import beat, make_owner
from tests.factories import make_job

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:jobs_job_changelist")
RUNS = reverse("admin:runs_run_changelist")
EVENTS = reverse("admin:jobs_jobevent_changelist")
STATES = ["succeeded", "failed", "missed", "succeeded", "skipped"]


def fill(owner, jobs: int, runs_per_job: int) -> None:
    now = db_now()
    for j in range(jobs):
        job = make_job(owner, **({"cron": "*/5 * * * *"} if j % 2 else {"interval_seconds": 300}))
        Run.objects.bulk_create(
            Run(
                job=job,
                scheduled_at=now - dt.timedelta(minutes=5 * (i + 1)),
                state=STATES[(i + j) % len(STATES)],
                lag_seconds=0.3,
                started_at=now - dt.timedelta(minutes=5 * (i + 1)),
                finished_at=now - dt.timedelta(minutes=5 * (i + 1), seconds=-1),
                lease_owner="worker-1",
            )
            for i in range(runs_per_job)
        )
        job.record_event("created", actor=owner, channel="admin")


def queries_for(client, url: str, **params) -> list[str]:
    client.get(url, params)  # warm caches that a long-running process keeps warm
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params)
    assert response.status_code == 200
    return [q["sql"] for q in captured]


@pytest.mark.parametrize("url", [JOBS, RUNS, EVENTS])
@pytest.mark.parametrize("dispatcher_alive", [True, False])
def test_a_list_page_costs_the_same_queries_for_5_rows_as_for_60(
    client, url, dispatcher_alive, django_user_model
):
    if dispatcher_alive:
        beat()
    few, many = make_owner("few"), make_owner("many")
    fill(few, jobs=5, runs_per_job=1)
    fill(many, jobs=60, runs_per_job=3)

    client.force_login(few)
    small = queries_for(client, url)
    client.force_login(many)
    large = queries_for(client, url)

    assert len(small) == len(large), "\n".join(large)
    # Session, user, permissions, the two banners, clock, the page and its
    # runs: a handful, whatever the size.
    assert len(large) <= 13, "\n".join(large)


def test_the_superusers_jobs_list_is_constant_too(client):
    root = make_owner("root", superuser=True)
    fill(root, jobs=5, runs_per_job=2)
    client.force_login(root)
    small = queries_for(client, JOBS)
    fill(make_owner("other"), jobs=55, runs_per_job=2)
    large = queries_for(client, JOBS)
    assert len(small) == len(large)


@pytest.mark.parametrize("status", ["", "missed", "late", "running", "lease_expired", "failed"])
def test_no_query_of_the_runs_list_counts_runs(client, status):
    owner = make_owner("counter")
    fill(owner, jobs=3, runs_per_job=40)
    client.force_login(owner)
    params = {"status": status} if status else {}
    sql = queries_for(client, RUNS, **params)
    assert not [q for q in sql if "COUNT(" in q.upper()]


def test_lists_read_indexes_not_tables_with_10_000_jobs_and_1_000_000_runs(client):
    """Real volumes on PostgreSQL: 10,000 jobs, 1,000,000 runs.

    The assertions are about the plan, not the machine (page times belong to
    ``manage.py bench``): every page answers, the runs page reads the
    scheduled_at index instead of scanning the table, and nothing counts the
    table.
    """
    owner = make_owner("bulk")
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO jobs_job (id, owner_id, name, description, cron, interval_seconds,
                timezone, target_kind, url, payload, timeout_seconds, max_attempts,
                retry_backoff_seconds, misfire_policy, max_catchup, misfire_grace_seconds,
                overlap_policy, jitter_seconds, state, pause_note, consecutive_failures,
                next_fire_at, secret_encrypted, previous_secret_encrypted, version,
                created_at, updated_at)
            SELECT gen_random_uuid(), %s, 'bulk-' || g, '', NULL, 60, 'UTC', 'webhook',
                'https://93.184.215.14/hook', '{}', 30, 3, 10, 'skip', 3, 60, 'skip', 0,
                'active', '', 0, now() + (g %% 60) * interval '1 second', 'x', '', 1,
                now(), now()
            FROM generate_series(1, 10000) AS g
            """,
            [owner.pk],
        )
        # Analysed before the runs go in: each run's foreign key is checked
        # with a cached plan, and statistics from an earlier test that saw
        # jobs_job empty make that plan a scan of every job, once per run
        # (minutes for a million runs, instead of seconds).
        cur.execute("ANALYZE jobs_job")
        cur.execute(
            """
            INSERT INTO runs_run (id, job_id, scheduled_at, kind, state, reason, attempt,
                max_attempts, lease_owner, created_at, lag_seconds, last_error, target_kind,
                exclusive)
            SELECT gen_random_uuid(), j.id, now() - r * interval '1 minute', 'scheduled',
                (ARRAY['succeeded','failed','missed','succeeded'])[1 + r % 4], '', 1, 3, '',
                now(), 0.2, '', 'webhook', true
            FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM jobs_job) AS j,
                 generate_series(1, 100) AS r
            """
        )
        cur.execute("ANALYZE jobs_job")
        cur.execute("ANALYZE runs_run")
    history.open_missing_spans(db_now())
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs_run")
        assert cur.fetchone()[0] == 1_000_000

    client.force_login(owner)
    pages = [
        (JOBS, {}),
        (JOBS, {"health": "failing"}),
        (RUNS, {}),
        (RUNS, {"p": 3}),
        (RUNS, {"status": "missed"}),
        (RUNS, {"status": "failed"}),
        (RUNS, {"status": "late"}),
        (RUNS, {"status": "lease_expired"}),
        (RUNS, {"kind__exact": "manual"}),
        (EVENTS, {}),
    ]
    for url, params in pages:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url, params)
        assert response.status_code == 200
        if url == RUNS:
            assert not [q for q in captured if "COUNT(" in q["sql"].upper()]
    # The list as owners first see it, and its next pages, walk the
    # scheduled_at index backwards and stop after a page. (A filter that
    # matches almost nothing, such as "late" here, reads the table until the
    # page fills: a candidate for a partial index if tables grow much bigger.)
    for params in ({}, {"p": 3}):
        with CaptureQueriesContext(connection) as captured:
            client.get(RUNS, params)
        for sql in (q["sql"] for q in captured if 'FROM "runs_run"' in q["sql"]):
            with connection.cursor() as cur:
                cur.execute("EXPLAIN " + sql)
                plan = "\n".join(row[0] for row in cur.fetchall())
            assert "Seq Scan on runs_run" not in plan, plan


def job_with_history(owner, runs: int, events: int, *, paused: bool):
    """A job with ``runs`` runs (some failed) and ``events`` audit events."""
    job = make_job(owner, timezone="Europe/Paris")
    now = db_now()
    Run.objects.bulk_create(
        Run(
            job=job,
            scheduled_at=now - dt.timedelta(minutes=i + 1),
            state=STATES[i % len(STATES)],
            last_status_code=500 if STATES[i % len(STATES)] == "failed" else 200,
            last_error="Internal Server Error" if STATES[i % len(STATES)] == "failed" else "",
        )
        for i in range(runs)
    )
    for _ in range(events):
        job.record_event("triggered", actor=owner, channel="admin")
    if paused:
        job_verbs.pause(job, note="deploy", actor=owner, channel="admin")
    return job


@pytest.mark.parametrize("paused", [False, True])
def test_a_job_page_costs_the_same_queries_for_a_short_history_as_for_a_long_one(client, paused):
    """The status header, the run history, the audit events and the schedule
    warnings read a bounded slice each, however long the job's history."""
    beat()
    owner = make_owner("pages")
    client.force_login(owner)
    short = job_with_history(owner, runs=3, events=2, paused=paused)
    long = job_with_history(owner, runs=400, events=120, paused=paused)
    url = "admin:jobs_job_change"
    few = queries_for(client, reverse(url, args=[short.pk]))
    many = queries_for(client, reverse(url, args=[long.pk]))
    assert len(few) == len(many), "\n".join(many)
    # Session, user, job (twice: the admin reads it twice), permissions (2),
    # the runs (one read for the header's strip and the history below), the
    # clock, the last failure's error text, the pause's event (paused only),
    # the events, the banners' clock, heartbeat and backlog, the typical run time;
    # the alerts section: the owner's channels, the job's own choice of them,
    # its recent alerts.
    assert len(many) <= (18 if paused else 17), "\n".join(many)
    assert not [q for q in many if "COUNT(" in q.upper()]

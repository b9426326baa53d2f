"""One fire, one identity (docs/concepts/run-id.md "Derived from the fire"): every
path that inserts runs gives a run the uuid5 of its fire, so a fire whose row is
lost and made again keeps the id its receivers have already seen."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

from core.db import db_now
from dispatch import queries
from dispatch.dispatcher import Dispatcher
from jobs.models import Job
from runs import identity, job_verbs, retention
from runs.models import Run
from tests.factories import at, make_job, rewrite_job

pytestmark = pytest.mark.django_db

T0 = at("2026-06-01T12:00:00.250000")
S = dt.timedelta(seconds=1)
MINUTE = 60 * S


def due_at(job: Job, when: dt.datetime) -> Job:
    rewrite_job(job, next_fire_at=when, created_at=when, start_at=when)
    job.refresh_from_db()
    return job


def ids_by_fire(job: Job) -> dict[dt.datetime, object]:
    return dict(Run.objects.filter(job=job).values_list("scheduled_at", "id"))


def assert_fire_ids(job: Job) -> None:
    runs = ids_by_fire(job)
    assert runs, "no runs to check"
    assert runs == {fire: identity.fire_id(job.pk, fire) for fire in runs}


def prune(job: Job, before: dt.datetime) -> None:
    """What retention does to old runs: they end, then their rows go."""
    Run.objects.filter(job=job).update(state="succeeded")
    while retention.prune_batch(before, 100):
        pass
    assert not Run.objects.filter(job=job, scheduled_at__lt=before).exists()


def test_the_fast_path_names_each_run_after_its_fire(owner):
    jobs = [due_at(make_job(owner, interval_seconds=60), T0 + n * S) for n in range(5)]
    assert queries.dispatch_simple_intervals(T0 + 10 * S, limit=100) == (5, {"pending": 5}, {})
    for job in jobs:
        assert_fire_ids(job)


def test_the_planned_path_names_each_run_after_its_fire(owner):
    cron = due_at(
        make_job(owner, cron="*/5 * * * *", interval_seconds=None), at("2026-06-01T12:00:00")
    )
    late = due_at(
        make_job(owner, interval_seconds=60, misfire_policy="catch_up", misfire_grace_seconds=5),
        T0,
    )
    skipped = due_at(make_job(owner, interval_seconds=60, misfire_grace_seconds=5), T0)
    result = Dispatcher().tick(now=T0 + 5 * MINUTE + 30 * S)
    assert result.created["pending"] >= 3 and result.created["missed"] >= 1
    assert Run.objects.filter(job=late, kind="catch_up").exists()
    for job in (cron, late, skipped):
        assert_fire_ids(job)


def test_catch_up_on_resume_names_each_run_after_its_fire(owner):
    job = make_job(owner, interval_seconds=60, max_catchup=3)
    job_verbs.pause(job)
    ten_minutes_ago = db_now() - 10 * MINUTE
    rewrite_job(job, created_at=ten_minutes_ago, paused_at=ten_minutes_ago)
    job.refresh_from_db()
    assert job_verbs.resume(job, catch_up=True)["created"] == 3
    assert_fire_ids(job)


@pytest.mark.parametrize(
    "verb",
    [
        lambda job: job_verbs.pause(job),
        lambda job: job_verbs.soft_delete(job),
        lambda job: job_verbs.edit(job, {"interval_seconds": 120}),
    ],
    ids=["pause", "delete", "edit"],
)
def test_fires_a_verb_settles_before_changing_the_job_are_named_after_their_fire(owner, verb):
    job = make_job(owner, interval_seconds=60)
    due_at(job, db_now() - 90 * S)
    verb(job)
    assert Run.objects.filter(job=job).count() == 2
    assert_fire_ids(job)


def test_a_pruned_fire_dispatched_then_backfilled_comes_back_with_the_same_id(owner):
    job = due_at(make_job(owner, interval_seconds=60, overlap_policy="allow"), T0)
    for minute in range(3):
        Dispatcher().tick(now=T0 + minute * MINUTE + S)
    dispatched = ids_by_fire(job)
    assert len(dispatched) == 3

    prune(job, before=T0 + 3 * MINUTE)
    made = job_verbs.backfill(job, T0, T0 + 3 * MINUTE)
    assert made["created"] == 3
    assert ids_by_fire(job) == dispatched
    assert set(Run.objects.filter(job=job).values_list("kind", flat=True)) == {"backfill"}


def test_a_backfill_repeated_over_a_pruned_window_recreates_the_same_ids(owner):
    job = make_job(owner, cron="*/15 * * * *", interval_seconds=None)
    start, end = at("2026-01-01T00:00:00"), at("2026-01-01T02:00:00")
    assert job_verbs.backfill(job, start, end)["created"] == 8
    first = ids_by_fire(job)
    assert_fire_ids(job)

    prune(job, before=end)
    assert job_verbs.backfill(job, start, end)["created"] == 8
    assert ids_by_fire(job) == first


def test_a_manual_trigger_without_a_key_is_the_fire_at_its_now(owner):
    job = make_job(owner)
    run = job_verbs.trigger(job)
    assert run.id == identity.fire_id(job.pk, run.scheduled_at)
    assert Run.objects.get(pk=run.pk).scheduled_at == run.scheduled_at


def test_a_manual_trigger_with_a_key_is_named_after_the_key_once(owner):
    job = make_job(owner)
    run = job_verbs.trigger(job, idempotency_key="deploy-42")
    assert run.id == identity.manual_id(job.pk, "deploy-42")
    # The same key later (its stored API answer long expired): the same run,
    # not a second fire and not a clash on the id.
    assert job_verbs.trigger(job, idempotency_key="deploy-42").pk == run.pk
    assert Run.objects.filter(job=job).count() == 1
    assert job.events.filter(action="triggered").count() == 1
    # The same key on another job is another fire.
    other = job_verbs.trigger(make_job(owner), idempotency_key="deploy-42")
    assert other.pk != run.pk


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kathmandu"])
def test_postgresql_writes_the_same_fire_name_as_python_in_any_session_zone(owner, zone):
    """The fast path lets PostgreSQL format the names it hashes: they must be
    byte for byte what identity.fire_name() makes, whatever the session's
    TimeZone."""
    job = make_job(owner)
    instants = [
        T0,
        at("2026-03-29T01:30:00.000001"),
        at("1999-12-31T23:59:59.999999"),
        at("2026-11-01T05:30:00"),
    ]
    sql = identity.FIRE_NAME_SQL.format(job="%(job)s::uuid", at="t")
    with connection.cursor() as cur:
        cur.execute("SET LOCAL TIME ZONE %s", [zone])
        cur.execute(
            f"SELECT {sql} FROM unnest(%(at)s::timestamptz[]) AS t ORDER BY t",
            {"job": job.pk, "at": instants},
        )
        made = [name for (name,) in cur.fetchall()]
    assert made == [identity.fire_name(job.pk, t) for t in sorted(instants)]


def test_the_benchmarks_synthetic_history_names_each_run_after_its_fire():
    """``manage.py bench audit`` writes its runs by SQL; they carry their
    fires' ids like real ones (the auditor is timed on a realistic table)."""
    from ops.bench.audit import scenario_audit

    result = scenario_audit(jobs=12, runs_per_job=5, cron_share=0.25, repeat=1, force=False)
    assert result["audited_runs"] == 60
    runs = list(Run.objects.values_list("id", "job_id", "scheduled_at"))
    assert len(runs) == 60
    assert all(run_id == identity.fire_id(job, at) for run_id, job, at in runs)

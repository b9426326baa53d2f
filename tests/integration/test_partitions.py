"""Runs and attempts partitioned by day (runs/partitions.py): the partitions are
made ahead of time, retention drops whole days, and every guard of the runs
table still holds across partitions."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest
from django.db import IntegrityError, connection, connections, transaction

from core.db import db_now
from runs import leases, outcomes, partitions, retention
from runs.models import Attempt, Run
from tests.factories import make_job, succeeded

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
DAY = dt.timedelta(days=1)


def midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def today() -> dt.date:
    return db_now().date()


def partition_of(table: str, **where) -> str:
    """The partition that holds the row of ``table`` matching ``where``."""
    [(key, value)] = where.items()
    with connection.cursor() as cur:
        cur.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE {key} = %s", [value])
        return cur.fetchone()[0]


def table_exists(name: str) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return cur.fetchone()[0]


def add_run(job, when: dt.datetime, state: str = "pending", **fields) -> Run:
    fields.setdefault("available_at", when)
    return Run.objects.create(
        job=job,
        scheduled_at=when,
        state=state,
        max_attempts=job.max_attempts,
        target_kind=job.target_kind,
        exclusive=job.overlap_policy != "allow",
        **fields,
    )


def migrated_on() -> dt.date:
    """The day (UTC) the test database was migrated: its partitions were
    made from that day on, which is yesterday once a run passes midnight."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT applied FROM django_migrations"
            " WHERE app = 'runs' AND name = '0006_partition_runs_by_day'"
        )
        return cur.fetchone()[0].astimezone(dt.UTC).date()


def test_today_and_the_coming_week_have_partitions_after_migrate():
    days = [migrated_on() + n * DAY for n in range(partitions.DAYS_AHEAD + 1)]
    for parent in ("runs_run", "runs_attempt"):
        assert set(days) <= set(partitions.day_partitions(parent))
        assert table_exists(f"{parent}_default")


def test_housekeeping_creates_the_coming_days_once():
    start = today() + 40 * DAY
    created = partitions.ensure_partitions(start, days_ahead=2)
    assert created == [start, start + DAY, start + 2 * DAY]
    assert partitions.ensure_partitions(start, days_ahead=2) == []
    for day in created:
        assert day in partitions.day_partitions("runs_run")
        assert day in partitions.day_partitions("runs_attempt")


def job_id_options() -> dict[str, list[str]]:
    """Each partition of runs_run and the n_distinct options of its job_id
    (Debian's PostgreSQL 15 keeps an option of its own there, pg_attver)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname, a.attoptions FROM pg_inherits AS i"
            " JOIN pg_class AS c ON c.oid = i.inhrelid"
            " JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attname = 'job_id'"
            " WHERE i.inhparent = 'runs_run'::regclass"
        )
        return {
            name: [o for o in options or [] if o.startswith("n_distinct=")]
            for name, options in cur.fetchall()
        }


def test_every_runs_partition_counts_job_id_as_many_jobs_new_days_included():
    # The migration's partitions (the default one included), and a day made
    # later by the housekeeping, which CREATE TABLE ... LIKE would leave without.
    made = partitions.ensure_partitions(today() + 50 * DAY, days_ahead=0)
    options = job_id_options()
    assert partitions.partition_name("runs_run", made[0]) in options
    assert "runs_run_default" in options
    wanted = [f"n_distinct={partitions.JOB_ID_DISTINCT}"]
    assert {name: wanted for name in options} == options


def test_the_dispatcher_s_housekeeping_makes_the_coming_week_and_drops_expired_days(owner):
    from dispatch.dispatcher import Dispatcher

    last = today() + partitions.DAYS_AHEAD * DAY
    old = today() - 45 * DAY
    assert partitions.ensure_partitions(old, days_ahead=0) == [old]
    with connection.cursor() as cur:
        for parent, _ in partitions.TABLES:
            # Absent when midnight passed since the migrate: the week was then
            # made from yesterday on.
            cur.execute(f"DROP TABLE IF EXISTS {partitions.partition_name(parent, last)}")
    assert last not in partitions.day_partitions()

    Dispatcher().housekeeping()

    for parent, _ in partitions.TABLES:
        assert last in partitions.day_partitions(parent)
        assert old not in partitions.day_partitions(parent)


def test_prune_runs_drops_the_days_past_retention(owner):
    import io

    from django.core.management import call_command

    old = today() - 45 * DAY
    partitions.ensure_partitions(old, days_ahead=0)
    add_run(make_job(owner), midnight(old) + S, state="succeeded")
    out = io.StringIO()
    call_command("prune_runs", "--older-than-days", "30", stdout=out)
    assert f"dropped 1 days of runs {old}; kept 0" in out.getvalue()
    assert old not in partitions.day_partitions()
    assert not Run.objects.exists()


def test_a_fire_far_ahead_lands_in_the_default_partition_and_moves_into_its_day(owner):
    job = make_job(owner)
    day = today() + 50 * DAY
    run = add_run(job, midnight(day) + 3600 * S, state="succeeded")
    Attempt.objects.create(run=run, number=1, outcome="succeeded")
    assert partition_of("runs_run", id=run.pk) == "runs_run_default"
    assert partition_of("runs_attempt", run_id=run.pk) == "runs_attempt_default"

    assert partitions.ensure_partitions(day, days_ahead=0) == [day]

    assert partition_of("runs_run", id=run.pk) == partitions.partition_name("runs_run", day)
    assert partition_of("runs_attempt", run_id=run.pk) == partitions.partition_name(
        "runs_attempt", day
    )
    assert Run.objects.get(pk=run.pk).attempts.get().number == 1


def test_a_backfill_far_in_the_past_lands_and_retention_deletes_it_row_by_row(owner):
    job = make_job(owner, interval_seconds=3600)
    fire = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
    assert Run.objects.create_for_fires(job, [fire], kind="backfill") == 1
    run = Run.objects.get(job=job)
    assert partition_of("runs_run", id=run.pk) == "runs_run_default"
    Run.objects.filter(pk=run.pk).update(state="succeeded")

    done = retention.expire(db_now() - 30 * DAY)

    assert done.runs_deleted == 1
    assert not Run.objects.filter(pk=run.pk).exists()


def test_retention_drops_an_old_day_whole_and_keeps_a_day_with_a_pending_run(owner):
    job = make_job(owner, overlap_policy="allow")
    old, kept = today() - 40 * DAY, today() - 39 * DAY
    assert partitions.ensure_partitions(old, days_ahead=1) == [old, kept]
    finished = [add_run(job, midnight(old) + n * S, state="succeeded") for n in range(3)]
    for run in finished:
        Attempt.objects.create(run=run, number=1, outcome="succeeded")
    done_on_kept_day = add_run(job, midnight(kept) + S, state="failed")
    Attempt.objects.create(run=done_on_kept_day, number=1, outcome="permanent")
    waiting = add_run(job, midnight(kept) + 2 * S, state="pending")

    done = retention.expire(db_now() - 30 * DAY)

    assert (done.days_dropped, done.days_kept) == ([old], [kept])
    assert not table_exists(partitions.partition_name("runs_run", old))
    assert not table_exists(partitions.partition_name("runs_attempt", old))
    assert old not in partitions.day_partitions("runs_attempt")
    # The kept day: its partitions stay, its finished run goes row by row,
    # its pending run stays.
    assert kept in partitions.day_partitions("runs_run")
    assert kept in partitions.day_partitions("runs_attempt")
    assert list(Run.objects.filter(job=job)) == [waiting]
    assert not Attempt.objects.exists()

    # Once the run has finished, the next round drops that day too.
    Run.objects.filter(pk=waiting.pk).update(state="cancelled")
    assert retention.expire(db_now() - 30 * DAY).days_dropped == [kept]


def test_retention_never_deletes_rows_of_a_day_that_is_not_wholly_past(owner):
    job = make_job(owner, overlap_policy="allow")
    # Times of today fixed from its midnight, so that a run just after
    # midnight cannot put the run and the cutoff on two days.
    day = midnight(today())
    run = add_run(job, day + S, state="succeeded")
    # The cutoff falls later in the run's day: the day is kept whole, to be
    # dropped once all of it is past.
    done = retention.expire(day + 2 * S)
    assert (done.runs_deleted, done.days_dropped) == (0, [])
    assert Run.objects.filter(pk=run.pk).exists()
    assert retention.row_cutoff(day + 2 * S) == day


def test_one_fire_one_run_across_partitions(owner):
    job = make_job(owner, interval_seconds=60)
    fires = [midnight(today()) + 60 * S, midnight(today() + DAY) + 60 * S]
    assert Run.objects.create_for_fires(job, fires, kind="backfill") == 2
    assert Run.objects.create_for_fires(job, fires, kind="backfill") == 0
    with pytest.raises(IntegrityError, match=r"\(job_id, scheduled_at\)"), transaction.atomic():
        add_run(job, fires[1], id=uuid.uuid4())


def test_at_most_one_exclusive_run_of_a_job_runs_across_days(owner):
    job = make_job(owner, overlap_policy="queue")
    first = add_run(job, midnight(today()) + S, state="running")
    second = add_run(job, midnight(today() + 2 * DAY) + S)
    far = add_run(job, dt.datetime(2001, 1, 1, tzinfo=dt.UTC))  # default partition
    assert partition_of("runs_run", id=second.pk) != partition_of("runs_run", id=first.pk)

    for other in (second, far):
        with (
            pytest.raises(IntegrityError, match="run_one_running_per_exclusive_job"),
            transaction.atomic(),
        ):
            Run.objects.filter(pk=other.pk).update(state="running")
    # Two at once, in one statement, when none was running.
    Run.objects.filter(pk=first.pk).update(state="succeeded")
    with (
        pytest.raises(IntegrityError, match="run_one_running_per_exclusive_job"),
        transaction.atomic(),
    ):
        Run.objects.filter(pk__in=[second.pk, far.pk]).update(state="running")
    # One is fine; so is a takeover of that running run by another claim.
    Run.objects.filter(pk=second.pk).update(state="running")
    Run.objects.filter(pk=second.pk).update(lease_owner="w2", attempt=2)
    with (
        pytest.raises(IntegrityError, match="run_one_running_per_exclusive_job"),
        transaction.atomic(),
    ):
        add_run(job, midnight(today() + DAY), state="running")


def test_runs_of_a_job_under_allow_may_run_together_across_days(owner):
    job = make_job(owner, overlap_policy="allow")
    add_run(job, midnight(today()) + S, state="running")
    add_run(job, midnight(today() + DAY) + S, state="running")
    assert Run.objects.filter(job=job, state="running").count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_transactions_cannot_start_two_exclusive_runs_of_a_job(owner):
    """The guard holds between concurrent transactions: the second waits for
    the first, then sees its running run and fails."""
    job = make_job(owner, overlap_policy="skip")
    a = add_run(job, midnight(today()) + S)
    b = add_run(job, midnight(today() + DAY) + S)
    first_in = threading.Event()
    errors: list[Exception] = []

    def start(run: Run, hold: bool) -> None:
        try:
            with transaction.atomic():
                Run.objects.filter(pk=run.pk).update(state="running")
                if hold:
                    first_in.set()
                    # Commit only once the other transaction is waiting on us.
                    with connection.cursor() as cur:
                        for _ in range(600):
                            cur.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                            if cur.fetchone()[0]:
                                break
                            cur.execute("SELECT pg_sleep(0.05)")
        except Exception as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    t1 = threading.Thread(target=start, args=(a, True))
    t1.start()
    assert first_in.wait(30)
    t2 = threading.Thread(target=start, args=(b, False))
    t2.start()
    t1.join(60)
    t2.join(60)
    assert len(errors) == 1 and isinstance(errors[0], IntegrityError), errors
    assert list(Run.objects.filter(job=job, state="running")) == [a]


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_creating_partitions_at_once_create_each_day_once():
    start = today() + 60 * DAY
    results: list[list[dt.date]] = []
    errors: list[Exception] = []
    go = threading.Barrier(2)

    def ensure() -> None:
        try:
            go.wait(10)
            results.append(partitions.ensure_partitions(start, days_ahead=3))
        except Exception as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=ensure) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert sorted(results[0] + results[1]) == [start + n * DAY for n in range(4)]
    finally:
        # DDL outlives a flushed test: leave the schema as migrate made it.
        with connection.cursor() as cur:
            for n in range(4):
                for parent, _ in partitions.TABLES:
                    cur.execute(
                        f"DROP TABLE IF EXISTS {partitions.partition_name(parent, start + n * DAY)}"
                    )


def test_claim_heartbeat_and_complete_work_in_a_day_partition_and_the_default(owner):
    job = make_job(owner, overlap_policy="allow", timeout_seconds=30)
    now = db_now()
    recent = add_run(job, now - 5 * S)
    ancient = add_run(job, dt.datetime(2001, 1, 1, tzinfo=dt.UTC))
    claimed = leases.claim("w1", limit=10, lease_seconds=30, now=now)
    assert {c.run_id for c in claimed} == {recent.pk, ancient.pk}

    scheduled = [c.scheduled_at for c in claimed]
    kept = leases.heartbeat(
        "w1", [(c.run_id, c.attempt) for c in claimed], now=now + S, scheduled=scheduled
    )
    assert set(kept) == {recent.pk, ancient.pk}
    results = [succeeded(c, status_code=200) for c in claimed]
    done = outcomes.complete("w1", results, now=now + 2 * S)
    assert set(done.applied) == {recent.pk, ancient.pk}
    for run in (recent, ancient):
        attempt = Attempt.objects.get(run=run)
        assert (attempt.number, attempt.scheduled_at) == (1, run.scheduled_at)
        assert Run.objects.get(pk=run.pk).state == "succeeded"
    assert partition_of("runs_attempt", run_id=ancient.pk) == "runs_attempt_default"


def test_complete_without_scheduled_at_still_finds_the_run(owner):
    job = make_job(owner, overlap_policy="allow")
    run = add_run(job, db_now() - S)
    [c] = leases.claim("w1", limit=1, lease_seconds=30)
    done = outcomes.complete(
        "w1", [outcomes.Result(run_id=run.pk, job_id=job.pk, attempt=c.attempt, state="failed")]
    )
    assert done.applied == [run.pk]
    assert Attempt.objects.get(run=run).scheduled_at == run.scheduled_at


def test_heartbeat_and_complete_look_only_in_their_batch_s_days(owner):
    """The scheduled_at window prunes every other day's partition from the plan."""
    now = db_now()
    start = midnight(now.date())
    params = {
        "now": now,
        "lease": 30,
        "owner": "w1",
        "ids": [Run().id],
        "attempts": [1],
        **leases.window([start + S, start + 2 * S]),
    }
    with connection.cursor() as cur:
        cur.execute("EXPLAIN " + leases.HEARTBEAT, params)
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert partitions.partition_name("runs_run", now.date()) in plan
    assert partitions.partition_name("runs_run", now.date() + DAY) not in plan
    assert "runs_run_default" not in plan

    result = outcomes.Result(
        run_id=Run().id, job_id=Run().id, attempt=1, state="succeeded", status_code=200
    )
    complete = outcomes.complete_params("w1", [result], now)
    complete.update(leases.window([start + S]))
    with connection.cursor() as cur:
        cur.execute("EXPLAIN " + outcomes.COMPLETE, complete)
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert partitions.partition_name("runs_run", now.date() + DAY) not in plan
    assert "runs_run_default" not in plan

"""The hot statements' plans, on whichever server the session runs (the
embedded PostgreSQL 18, or Debian's 15 with JIT under CI: Makefile
``test-pg15``). No clock: what a plan must look like, not how fast it runs.

- Inside every hot transaction (the dispatcher's tick, the worker's and the
  pull API's claims, heartbeats, releases, completions, the API's creates)
  ``SHOW jit`` answers ``off``, and with ``jit_above_cost = 0`` no statement's
  plan has a JIT section (core/db.py NO_JIT).
- No node of those plans is priced at 1e9 or more, and on PostgreSQL 18 none
  is marked disabled: every claim has an index that yields its order
  (runs/leases.py ORDERED_WALK).
- A claim reads a bounded number of buffers per run it takes, beside 2,000
  as beside 20,000 waiting runs: it costs its batch, not the backlog.

Each statement is explained as the code sends it (tests/plans.py).
"""

from __future__ import annotations

import datetime as dt
import os
import random

import pytest
from django.db import connection, connections, transaction

from core.db import db_now, insert_rows, jit_off_per_transaction
from dispatch import queries
from dispatch.dispatcher import Dispatcher
from jobs.models import Job
from runs import identity, leases, outcomes
from runs.models import Run, RunKind
from tests import plans
from tests.factories import make_job, rewrite_job, succeeded
from tests.integration.api.support import PUBLIC_URL, token_client
from tests.plans import explaining, jit_everywhere

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
DAY = dt.timedelta(days=1)
# Buffers a claim may read per run it takes (shared hits and reads, summed
# over the claim's statements). About 20 to 40 on either server.
BUFFERS_PER_CLAIMED_RUN = 60
# Buffers a completion or a heartbeat may read per run it finds: about 25 and
# 10 on either server.
BUFFERS_PER_RUN_FOUND_BY_KEY = 60
# Rows a completion's or a heartbeat's plan may handle per run it finds (each
# node's rows times its loops, summed: tests/plans.py rows_handled): 3 or 4
# when each run is found by its id; the batch's size when each run found
# scans the whole batch again.
ROWS_PER_RUN_FOUND_BY_ID = 40


def assert_hot(statements, at_least: int = 1) -> None:
    assert len(statements) >= at_least, [s.sql for s in statements]
    problems = [p for s in statements for p in s.problems()]
    assert problems == [], "\n".join(problems)


def vacuum() -> None:
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE runs_run")
        cur.execute("VACUUM ANALYZE jobs_job")


def due_runs(owner, jobs: int, runs_each: int, **fields) -> list:
    """``jobs`` jobs of ``owner`` (overlap allow: each run may go) with
    ``runs_each`` due waiting runs each, the oldest 2 minutes old."""
    now = db_now()
    made = []
    for j in range(jobs):
        job = make_job(owner, overlap_policy="allow", **fields)
        fires = [now - 120 * S - (n * jobs + j) * S for n in range(runs_each)]
        Run.objects.create_for_fires(job, fires, kind=RunKind.SCHEDULED)
        made.append(job)
    return made


def one_due_run_each(owner, jobs: int, ago: dt.timedelta = 120 * S, **fields) -> None:
    """``jobs`` jobs of ``owner`` under overlap skip, as most are, each with
    one due waiting run: each run the claim considers has its turn checked
    (runs/leases.py ITS_TURN), which is what made a claim cost the backlog.
    Written in two statements, as a bulk create and a tick would."""
    now = db_now()
    made = [
        Job(
            owner=owner,
            name=f"{owner.username}-{n}",
            interval_seconds=60,
            overlap_policy="skip",
            url=fields.get("url", "http://127.0.0.1:9/hook"),
            target_kind=fields.get("target_kind", "webhook"),
        )
        for n in range(jobs)
    ]
    Job.create_many(made, now=now, changes=[{}] * jobs)
    runs = []
    for n, job in enumerate(made):
        fire = now - ago - n * dt.timedelta(milliseconds=1)
        runs.append(
            Run.for_job(
                job,
                id=identity.fire_id(job.pk, fire),
                scheduled_at=fire,
                available_at=fire,
                kind=RunKind.SCHEDULED,
            )
        )
    insert_rows(runs)


def test_a_tick_runs_without_jit_or_a_disabled_node(owner):
    now = db_now()
    simple = make_job(owner, interval_seconds=60)
    planned = make_job(owner, cron="* * * * *", overlap_policy="skip")
    busy = make_job(owner, interval_seconds=60, overlap_policy="skip")
    Run.objects.create_for_fires(busy, [now - 300 * S], kind=RunKind.SCHEDULED)
    for job in (simple, planned, busy):
        rewrite_job(job, next_fire_at=now - 2 * S)
    with jit_everywhere(), explaining() as statements:
        result = Dispatcher(batch_size=100).tick()
    assert result.jobs == 3
    assert_hot(statements, at_least=3)


def test_a_tick_reads_the_jobs_it_locked_by_their_address(owner):
    """The fast path's second statement finds its batch's jobs again by
    their ctid (dispatch/queries.py JOBS_IN_MEMORY): a Tid Scan, to join and
    to update, beside 20,000 jobs as beside a few. Priced with the default
    random page, 1,000 addresses beside 20,000 jobs (about 1,200 pages)
    made the planner read the whole table twice instead, each tick."""
    now = db_now()
    made = [
        Job(owner=owner, name=f"fleet-{n}", interval_seconds=60, url="http://127.0.0.1:9/hook")
        for n in range(20_000)
    ]
    Job.create_many(made, now=now, changes=[{}] * len(made))
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE jobs_job SET next_fire_at = %s"
            " WHERE id IN (SELECT id FROM jobs_job ORDER BY id LIMIT 1000)",
            [now - 2 * S],
        )
    vacuum()
    with explaining(lambda sql: "WITH due AS" in sql) as statements:
        result = Dispatcher(batch_size=1_000).tick()
    assert result.jobs == 1_000
    assert_hot(statements)
    scans = [s.scans_of("jobs_job") for s in statements]
    assert scans == [["Tid Scan", "Tid Scan"]], scans


def test_a_ticks_overlap_probes_read_the_days_that_can_hold_an_active_run(owner):
    """The overlap probes of both paths (dispatch/queries.py OVERLAP_SKIPS,
    ACTIVE_COUNTS) read run_active_idx from the active floor to the active
    ceiling (runs/partitions.py): the days from the floor (yesterday, or the
    default partition, which holds the days before the first one) to
    tomorrow, not the coming week's empty partitions: three probes per job,
    not nine."""
    now = db_now()
    simple = make_job(owner, interval_seconds=60, overlap_policy="skip")
    planned = make_job(owner, cron="* * * * *", overlap_policy="skip")
    for job in (simple, planned):
        Run.objects.create_for_fires(job, [now - 300 * S], kind=RunKind.SCHEDULED)
        rewrite_job(job, next_fire_at=now - 2 * S)
    with explaining(lambda sql: "runs_run" in sql) as statements:
        result = Dispatcher(batch_size=100).tick()
    assert result.jobs == 2, result
    tomorrow = f"runs_run_p{result.now.date() + DAY:%Y%m%d}"
    (fast,) = [s for s in statements if "WITH due AS" in s.sql]
    (planned,) = [s for s in statements if "count(*) FILTER" in s.sql]
    # The fast path's probe is the only read of runs in its "due" part (its
    # backlog part bounds its days by each job's fires, known at run time).
    for probed in (
        fast.relations_read("runs_run_p", under="CTE due"),
        planned.relations_read("runs_run_p"),
    ):
        assert probed and max(probed) == tomorrow, sorted(probed)


def test_the_fast_path_leaves_the_rest_of_the_tick_priced_as_configured(owner):
    """JOBS_IN_MEMORY is for the fast path's second statement only: the tick's
    planned path, after it in the same transaction, is priced as the server
    is configured."""
    now = db_now()
    make_job(owner, interval_seconds=60)
    rewrite_job(Job.objects.get(owner=owner), next_fire_at=now - 2 * S)
    with connection.cursor() as cur:
        cur.execute("SHOW random_page_cost")
        configured = cur.fetchone()[0]
        with transaction.atomic():
            jobs, _, _ = queries.dispatch_simple_intervals(now, 100)
            cur.execute("SHOW random_page_cost")
            after = cur.fetchone()[0]
    assert (jobs, after) == (1, configured)


@pytest.mark.parametrize("kind", ["one owner", "owners' shares", "expired leases"])
def test_a_worker_claim_runs_without_jit_or_a_disabled_node(owner, other_owner, kind):
    due_runs(owner, jobs=20, runs_each=5)
    if kind == "owners' shares":
        due_runs(other_owner, jobs=5, runs_each=5)
    if kind == "expired leases":
        # Taken by a worker a minute ago with a 5 s lease, which expired.
        taken = leases.claim("gone", limit=30, lease_seconds=5, now=db_now() - 60 * S)
        assert len(taken) == 30
    vacuum()
    with jit_everywhere(), explaining() as statements:
        claimed = leases.claim(
            "w1", limit=50, lease_seconds=30, fair=kind == "owners' shares", owner_cap=40
        )
    assert len(claimed) == 50
    if kind == "expired leases":
        assert sum(c.attempt == 2 for c in claimed) == 30
    assert_hot(statements, at_least=2)


@pytest.mark.parametrize("one_job", [False, True])
def test_the_pull_apis_claim_runs_without_jit_or_a_disabled_node(owner, one_job):
    jobs = due_runs(owner, jobs=10, runs_each=10, target_kind="pull", url="")
    vacuum()
    body = {"worker": "w1", "limit": 20, **({"job": str(jobs[3].pk)} if one_job else {})}
    api = token_client(owner)
    with jit_everywhere(), explaining(lambda sql: "runs_run" in sql) as statements:
        answer = api.post("/api/v1/runs/claim/", body, "json")
    assert answer.status_code == 200, answer.content
    assert len(answer.json()) == (10 if one_job else 20)
    assert_hot(statements, at_least=2)


def test_heartbeats_completions_and_releases_run_without_jit(owner):
    due_runs(owner, jobs=10, runs_each=3)
    claimed = leases.claim("w1", limit=30, lease_seconds=30)
    held = [(c.run_id, c.attempt) for c in claimed]
    done = [
        outcomes.Result(run_id=c.run_id, job_id=c.job_id, attempt=c.attempt, state="succeeded")
        for c in claimed[:20]
    ]
    with jit_everywhere(), explaining() as statements:
        assert len(leases.heartbeat("w1", held, scheduled=[c.scheduled_at for c in claimed])) == 30
        assert len(outcomes.complete("w1", done).applied) == 20
        assert leases.release("w1", held[20:]) == 10
    assert_hot(statements, at_least=3)


def test_completions_that_record_alerts_and_the_alert_loop_run_without_jit(owner):
    """A completion batch with failures and successes records its alert
    events (alerts/events.py RECORD, RESOLVE) in its transaction; the alert
    loop's claim and completion (alerts/ledger.py) run in their own."""
    from alerts import ledger
    from alerts.models import Channel
    from jobs import crypto

    Channel.objects.create(
        owner=owner, name="ops", url_encrypted=crypto.encrypt("json://x.example/"), masked="-"
    )
    due_runs(owner, jobs=10, runs_each=2)
    claimed = leases.claim("w1", limit=20, lease_seconds=30)
    failed = [
        outcomes.Result(
            run_id=c.run_id, job_id=c.job_id, attempt=c.max_attempts, state="failed", error="500"
        )
        for c in claimed[:10]
    ]
    for c in claimed[:10]:
        with connection.cursor() as cur:
            cur.execute("UPDATE runs_run SET attempt = max_attempts WHERE id = %s", [c.run_id])
    succeeded = [
        outcomes.Result(run_id=c.run_id, job_id=c.job_id, attempt=c.attempt, state="succeeded")
        for c in claimed[10:]
    ]
    with jit_everywhere(), explaining() as statements:
        assert len(outcomes.complete("w1", failed).applied) == 10
        assert len(outcomes.complete("w1", succeeded).applied) == 10
        alerts = ledger.claim("alerts-1", limit=20, lease_seconds=30)
        assert alerts
        sent = [ledger.Sent(a.id, a.attempt, ok=True) for a in alerts]
        assert len(ledger.complete("alerts-1", sent, rng=random.Random())) == len(alerts)
    recorded = [s for s in statements if "alerts_" in s.sql]
    assert_hot(recorded, at_least=4)


@pytest.mark.parametrize("jobs", [1, 200])
def test_the_apis_creates_run_without_jit(owner, jobs):
    api = token_client(owner)
    items = [{"name": f"hot-{n}", "interval_seconds": 60, "url": PUBLIC_URL} for n in range(jobs)]
    with jit_everywhere(), explaining(lambda sql: 'INSERT INTO "jobs_job"' in sql) as statements:
        answer = api.post("/api/v1/jobs/", items[0] if jobs == 1 else items, "json")
    assert answer.status_code == 201, answer.content
    assert_hot(statements)


def in_flight(owner) -> None:
    """Every waiting run of ``owner`` running, as a claim leaves it, since the
    statistics were taken (vacuum() before): the state of an install that
    just got busy."""
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runs_run SET state = 'running', attempt = 1, lease_owner = 'w0',"
            " lease_seconds = 300, attempt_started_at = now(), started_at = now(),"
            " deadline_at = now() + interval '1 hour', lease_until = now() + interval '300 s'"
            " WHERE owner_id = %s",
            [owner.pk],
        )


def assert_claim_reads_a_bounded_number_of_buffers_per_run(owner, claimer: str) -> None:
    """One claim, by a worker (200 runs) or ``owner``'s pull worker over the
    API (100): its statements, summed, per run claimed, within the bound."""
    with explaining(lambda sql: "runs_run" in sql) as statements:
        if claimer == "worker":
            claimed = leases.claim("w1", limit=200, lease_seconds=30)
        else:
            answer = token_client(owner).post(
                "/api/v1/runs/claim/", {"worker": "w1", "limit": 100}, "json"
            )
            assert answer.status_code == 200, answer.content
            claimed = answer.json()
    assert len(claimed) == (200 if claimer == "worker" else 100)
    per_run = sum(s.buffers for s in statements) / len(claimed)
    assert per_run <= BUFFERS_PER_CLAIMED_RUN, [(s.sql[:60], s.buffers) for s in statements]


@pytest.mark.parametrize("waiting", [2_000, 20_000])
@pytest.mark.parametrize("claimer", ["worker", "pull API"])
def test_a_claim_reads_a_bounded_number_of_buffers_per_run(owner, other_owner, waiting, claimer):
    """The claim's statements, summed, per run claimed: the same bound
    beside 2,000 and beside 20,000 waiting runs."""
    pull = {"target_kind": "pull", "url": ""} if claimer == "pull API" else {}
    one_due_run_each(owner, waiting, **pull)
    if claimer == "worker":
        one_due_run_each(other_owner, 100)  # two owners: the fair claim
    vacuum()
    assert_claim_reads_a_bounded_number_of_buffers_per_run(owner, claimer)


@pytest.mark.parametrize("claimer", ["worker", "pull API"])
def test_a_claim_reads_a_bounded_number_of_buffers_per_run_beside_runs_in_flight(
    owner, other_owner, django_user_model, claimer
):
    """The claim's overlap probe (runs/leases.py ITS_TURN: is another run of
    this job running?) is one job's probe, whatever else is running. Beside
    1,000 runs in flight that the statistics do not know of yet (an install
    that just got busy, as in a bench), a probe that walked every running run
    read ~1,000 buffers per run it claimed."""
    pull = {"target_kind": "pull", "url": ""} if claimer == "pull API" else {}
    one_due_run_each(owner, 500, **pull)
    if claimer == "worker":
        one_due_run_each(other_owner, 100)
    busy = django_user_model.objects.create_user("carol", password="pw-carol-123")
    one_due_run_each(busy, 1_000)
    vacuum()
    in_flight(busy)
    assert_claim_reads_a_bounded_number_of_buffers_per_run(owner, claimer)


@pytest.mark.parametrize("statement", ["completion", "heartbeat"])
def test_a_completion_and_a_heartbeat_read_a_bounded_number_of_buffers_per_run(
    owner, other_owner, statement
):
    """A completion (runs/outcomes.py COMPLETE) and a heartbeat
    (runs/leases.py HEARTBEAT) find their runs by key, beside 20,000 waiting
    runs that the statistics have not seen: ANALYZE ran before the runs came,
    as on a busy install at the recent edge of today's partition. The
    planner expected one run in the batch's window and read the runs through
    the index of every active run instead (runs/leases.py
    LEASE_HELD): about 125 buffers per run here, 400 in a bench."""
    vacuum()  # statistics from before the runs: today's partition empty
    one_due_run_each(owner, 20_000)
    one_due_run_each(other_owner, 100)
    claimed = leases.claim("w1", limit=200, lease_seconds=30)
    assert len(claimed) == 200
    with explaining(lambda sql: "UPDATE runs_run" in sql) as statements:
        if statement == "completion":
            results = [succeeded(c, started_at=c.scheduled_at, duration_ms=1) for c in claimed]
            assert len(outcomes.complete("w1", results).applied) == 200
        else:
            held = leases.heartbeat(
                "w1",
                [(c.run_id, c.attempt) for c in claimed],
                scheduled=[c.scheduled_at for c in claimed],
            )
            assert len(held) == 200
    assert_hot(statements)
    marks = ("INSERT INTO runs_attempt", "lease_until")
    (found,) = [s for s in statements if any(mark in s.sql for mark in marks)]
    assert found.buffers / 200 <= BUFFERS_PER_RUN_FOUND_BY_KEY, found.buffers


@pytest.mark.parametrize("batch", [200, 600])
@pytest.mark.parametrize("statement", ["completion", "heartbeat"])
def test_a_completion_and_a_heartbeat_meet_each_run_once(owner, other_owner, statement, batch):
    """A completion (runs/outcomes.py COMPLETE) and a heartbeat (runs/leases.py
    HEARTBEAT) find each of their runs by its id, so their work grows with
    the batch, not with its square. With statistics from before the runs
    came (as in a bench: the planner expects one run in the batch's window),
    a completion joined to its batch of results scanned the whole batch again
    for each run it found (a nested loop, a Join Filter: 117,000 rows
    compared for 343 runs in a bench, 80 % of the statement's time): per run
    about the batch's size, 200 and 600 here, against a few rows when each
    run is found by its id."""
    # What the statistics saw: a day of finished runs, none running.
    one_due_run_each(other_owner, 2_000)
    with connection.cursor() as cur:
        cur.execute("UPDATE runs_run SET state = 'succeeded', finished_at = now()")
    vacuum()
    one_due_run_each(owner, 2 * batch)
    claimed = leases.claim("w1", limit=batch, lease_seconds=30)
    assert len(claimed) == batch
    with explaining(lambda sql: "UPDATE runs_run" in sql) as statements:
        if statement == "completion":
            results = [succeeded(c, started_at=c.scheduled_at, duration_ms=1) for c in claimed]
            assert len(outcomes.complete("w1", results).applied) == batch
        else:
            held = leases.heartbeat(
                "w1",
                [(c.run_id, c.attempt) for c in claimed],
                scheduled=[c.scheduled_at for c in claimed],
            )
            assert len(held) == batch
    (found,) = statements
    assert found.rows_handled / batch <= ROWS_PER_RUN_FOUND_BY_ID, found.rows_handled


def test_the_jobs_table_keeps_to_the_indexes_every_fire_writes(owner):
    """Every fire updates its job's row in a new version that each index of
    jobs_job takes an entry for (next_fire_at is indexed: no update is HOT).
    These four, and the tag index for tagged jobs only (jobs/migrations/0018:
    GIN takes an entry for an empty array too): an index added here is a
    write added to every fire."""
    with connection.cursor() as cur:
        cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'jobs_job'")
        indexes = dict(cur.fetchall())
    assert set(indexes) == {
        "jobs_job_pkey",
        "job_due_idx",
        "job_unique_name_per_owner",
        "job_tags_idx",
    }
    assert indexes["job_tags_idx"].endswith("WHERE (NOT (tags = '{}'::character varying(40)[]))")


def test_the_reaper_of_exhausted_leases_reads_those_runs_only(owner, other_owner):
    """The dispatcher's housekeeping (runs/outcomes.py FAIL_EXHAUSTED: running
    runs on their last attempt whose lease expired) walks run_exhausted_idx,
    which holds only running runs with no attempt left: beside 5,000 waiting
    runs and 1,000 in flight it reads a few buffers (26 on PostgreSQL 18),
    not an entry of each (over 100 beside 3,000 active runs)."""
    one_due_run_each(owner, 5_000)
    one_due_run_each(other_owner, 1_001)
    vacuum()
    in_flight(other_owner)
    with connection.cursor() as cur:
        # One of them on its last attempt, its lease lapsed.
        cur.execute(
            "UPDATE runs_run SET attempt = max_attempts, lease_until = now() - interval '1 s'"
            " WHERE id = (SELECT id FROM runs_run WHERE owner_id = %s LIMIT 1)",
            [other_owner.pk],
        )
    with explaining(lambda sql: "runs_run" in sql) as statements:
        assert outcomes.fail_exhausted() == 1
    assert_hot(statements)
    reaper = next(s for s in statements if "lease expired on the last attempt" in s.sql)
    assert reaper.buffers <= 60, reaper.buffers


def test_a_direct_connection_starts_its_session_with_jit_off():
    """settings JIT_OFF_OPTION: every statement of a direct connection, hot or
    not, is planned without JIT, at no cost per transaction."""
    fresh = connections.create_connection("default")
    try:
        with fresh.cursor() as cur:
            cur.execute("SHOW jit")
            assert cur.fetchone()[0] == "off"
    finally:
        fresh.close()
    assert not jit_off_per_transaction()


def test_behind_a_pooler_every_hot_transaction_turns_jit_off_itself(owner, settings):
    """Behind a transaction pooler a session's settings are not ours (the
    server session here has jit on): each hot transaction sets it
    (core/db.py NO_JIT), a single create included."""
    settings.PUNCTUAL_TRANSACTION_POOLER = True
    due_runs(owner, jobs=5, runs_each=4)
    job = make_job(owner, interval_seconds=60)
    rewrite_job(job, next_fire_at=db_now() - 2 * S)
    with connection.cursor() as cur:
        cur.execute("SET jit = on")
    try:
        with jit_everywhere(), explaining() as statements:
            assert Dispatcher(batch_size=100).tick().jobs == 1
            assert len(leases.claim("w1", limit=10, lease_seconds=30)) == 10
        api = token_client(owner)
        item = {"name": "pooled", "interval_seconds": 60, "url": PUBLIC_URL}
        with jit_everywhere(), explaining(lambda sql: 'INSERT INTO "jobs_job"' in sql) as create:
            assert api.post("/api/v1/jobs/", item, "json").status_code == 201
    finally:
        with connection.cursor() as cur:
            cur.execute("RESET jit")
    assert_hot(statements, at_least=4)
    assert_hot(create)
    assert all(s.in_transaction for s in statements + create)


def test_the_session_runs_on_the_server_asked_for():
    """The other servers' tiers ask for their server: PostgreSQL 15 with JIT
    (Makefile ``test-pg15``), 16 and 17 by version (``test-pg16``,
    ``test-pg17``). A session that fell back to the embedded one would prove
    nothing."""
    server = plans.server()
    if os.environ.get("PUNCTUAL_TEST_REQUIRE_JIT") == "true":
        assert server["jit_available"], server
    if os.environ.get("PUNCTUAL_TEST_REQUIRE_MAJOR"):
        assert server["major"] == int(os.environ["PUNCTUAL_TEST_REQUIRE_MAJOR"]), server
    assert server["major"] >= 15, server

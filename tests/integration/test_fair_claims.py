"""Fair claims between owners, the run's copy of its owner, and spread
backfills (docs/design/claims.md; docs/concepts/misfire-and-overlap.md "Backfills")."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from django.db import connection, transaction

from core.db import db_now
from dispatch import fleet, queries
from dispatch.dispatcher import Dispatcher
from dispatch.models import ProcessHeartbeat
from jobs.models import Job
from ops.audit import Rule, audit
from runs import job_verbs, leases
from runs.models import Run, RunKind, Spread
from tests.factories import at, make_job

pytestmark = pytest.mark.django_db

T0 = at("2026-06-01T12:00:00")
S = dt.timedelta(seconds=1)


def flood(job: Job, count: int, *, before: dt.datetime) -> None:
    """``count`` due runs of ``job``, all older than ``before``."""
    fires = [before - (n + 1) * S for n in range(count)]
    Run.objects.create_for_fires(job, fires, kind=RunKind.BACKFILL)


def allow_job(owner) -> Job:
    """A one-minute ``allow`` job anchored an hour ago: it has past slots to backfill."""
    start = db_now() - dt.timedelta(hours=1)
    return make_job(owner, interval_seconds=60, overlap_policy="allow", start_at=start)


def claimed_owners(batch: list[leases.Claimed]) -> list[int | None]:
    return [c.owner_id for c in batch]


def test_a_flood_of_one_owner_takes_only_its_share_of_a_batch(owner, other_owner):
    flood(make_job(owner, overlap_policy="allow"), 300, before=T0 - 60 * S)
    few = [make_job(other_owner) for _ in range(3)]
    for job in few:
        Run.objects.create_for_fires(job, [T0], kind=RunKind.SCHEDULED)
    batch = leases.claim("w1", limit=10, lease_seconds=30, now=T0 + S)
    # The other owner's three fires, though newer than all 300, and the flood
    # fills the rest of the batch (its share and what the shares left over).
    assert claimed_owners(batch).count(other_owner.pk) == 3
    assert claimed_owners(batch).count(owner.pk) == 7
    assert len({c.run_id for c in batch}) == 10


def test_a_claim_that_is_not_fair_takes_the_oldest_runs_whoever_owns_them(owner, other_owner):
    """A worker that found one owner with live webhook jobs claims with
    fair=False: no owners' scan, the oldest due runs first."""
    flood(make_job(owner, overlap_policy="allow"), 300, before=T0 - 60 * S)
    Run.objects.create_for_fires(make_job(other_owner), [T0], kind=RunKind.SCHEDULED)
    batch = leases.claim("w1", limit=10, lease_seconds=30, now=T0 + S, fair=False)
    assert claimed_owners(batch) == [owner.pk] * 10


def test_owners_with_more_than_their_share_split_the_batch(owner, other_owner):
    flood(make_job(owner, overlap_policy="allow"), 50, before=T0 - 60 * S)
    flood(make_job(other_owner, overlap_policy="allow"), 50, before=T0)
    batch = leases.claim("w1", limit=9, lease_seconds=30, now=T0 + S)
    counts = sorted(claimed_owners(batch).count(o) for o in (owner.pk, other_owner.pk))
    assert counts == [4, 5]


def test_a_batch_of_one_serves_each_owner_in_turn(owner, other_owner):
    flood(make_job(owner, overlap_policy="allow"), 100, before=T0 - 60 * S)
    flood(make_job(other_owner, overlap_policy="allow"), 100, before=T0)
    served = set()
    for n in range(40):
        [c] = leases.claim(f"w{n}", limit=1, lease_seconds=30, now=T0 + S)
        served.add(c.owner_id)
    assert served == {owner.pk, other_owner.pk}


def test_the_overlap_rule_holds_inside_an_owners_share(owner, other_owner):
    queued = make_job(owner, overlap_policy="queue")
    flood(queued, 5, before=T0)
    Run.objects.create_for_fires(make_job(other_owner), [T0], kind=RunKind.SCHEDULED)
    batch = leases.claim("w1", limit=10, lease_seconds=30, now=T0 + S)
    assert [c.job_id for c in batch].count(queued.pk) == 1
    assert len(batch) == 2


def test_a_paused_jobs_runs_are_not_claimed_and_do_not_use_a_share(owner, other_owner):
    paused = make_job(owner, overlap_policy="allow")
    flood(paused, 5, before=T0)
    job_verbs.pause(Job.objects.get(pk=paused.pk), note="")
    live = make_job(other_owner, overlap_policy="allow")
    flood(live, 5, before=T0)
    batch = leases.claim("w1", limit=10, lease_seconds=30, now=T0 + S)
    assert claimed_owners(batch) == [other_owner.pk] * 5


def test_an_owner_at_the_claimers_cap_gets_no_more_runs(owner, other_owner):
    flood(make_job(owner, overlap_policy="allow"), 100, before=T0 - 60 * S)
    flood(make_job(other_owner, overlap_policy="allow"), 3, before=T0)
    # The claimer already holds 8 of the flood's runs, under a cap of 10: the
    # flood gets 2 more, the other owner all three, and the batch stays short.
    batch = leases.claim(
        "w1", limit=50, lease_seconds=30, now=T0 + S, owner_cap=10, held={owner.pk: 8}
    )
    assert claimed_owners(batch).count(owner.pk) == 2
    assert claimed_owners(batch).count(other_owner.pk) == 3
    # At the cap, the flood gets nothing, even with the batch's room to spare.
    at_cap = leases.claim(
        "w1", limit=50, lease_seconds=30, now=T0 + S, owner_cap=10, held={owner.pk: 10}
    )
    assert at_cap == []


def test_one_owner_alone_is_held_to_the_cap(owner):
    flood(make_job(owner, overlap_policy="allow"), 100, before=T0)
    batch = leases.claim("w1", limit=50, lease_seconds=30, now=T0 + S, owner_cap=20, held={})
    assert len(batch) == 20
    # Without a cap, the whole batch.
    assert len(leases.claim("w2", limit=50, lease_seconds=30, now=T0 + S)) == 50


def test_what_the_shares_leave_goes_to_owners_with_room(owner, other_owner):
    flood(make_job(owner, overlap_policy="allow"), 100, before=T0 - 60 * S)
    flood(make_job(other_owner, overlap_policy="allow"), 100, before=T0)
    # Shares of 10 are 5 each; the other owner has room for 2 only, so the
    # flood takes the 8 left, up to its own cap.
    batch = leases.claim(
        "w1", limit=10, lease_seconds=30, now=T0 + S, owner_cap=10, held={other_owner.pk: 8}
    )
    assert claimed_owners(batch).count(other_owner.pk) == 2
    assert claimed_owners(batch).count(owner.pk) == 8


def test_the_cap_applies_only_while_several_owners_have_live_webhook_jobs(owner, other_owner):
    make_job(owner)
    assert not leases.several_owners()
    theirs = make_job(other_owner)
    assert leases.several_owners()
    Job.objects.filter(pk=theirs.pk).update(state="paused")
    assert not leases.several_owners()
    Job.objects.filter(pk=theirs.pk).update(state="active", deleted_at=db_now())
    assert not leases.several_owners()
    Job.objects.filter(pk=theirs.pk).update(deleted_at=None, target_kind="pull")
    assert not leases.several_owners()


def test_every_path_that_makes_runs_writes_the_jobs_owner(owner, other_owner):
    """With the trigger that fills a missing owner switched off, each path
    must write it itself (the column is NOT NULL)."""
    with connection.cursor() as cur:
        cur.execute("ALTER TABLE runs_run DISABLE TRIGGER run_owner_from_job")
    now = db_now()
    fast = make_job(owner, interval_seconds=60)  # the dispatcher's SQL fast path
    # The planned path (jitter), anchored an hour ago so that it has past slots.
    planned = make_job(
        other_owner, interval_seconds=60, jitter_seconds=5, start_at=now - dt.timedelta(hours=1)
    )
    Job.objects.filter(pk__in=[fast.pk, planned.pk]).update(next_fire_at=now - S)
    Dispatcher().tick(now=now)
    job_verbs.trigger(fast)
    job_verbs.backfill(planned, now - dt.timedelta(minutes=10), now - dt.timedelta(minutes=1))
    job_verbs.pause(Job.objects.get(pk=fast.pk), note="")
    runs = Run.objects.select_related("job")
    assert runs.filter(job=fast).count() >= 2 and runs.filter(job=planned).count() >= 2
    assert {(r.job.owner_id, r.owner_id) for r in runs} == {
        (owner.pk, owner.pk),
        (other_owner.pk, other_owner.pk),
    }


def test_an_insert_without_the_owner_gets_the_jobs(owner):
    job = make_job(owner)
    run = Run.objects.create(job=job, scheduled_at=T0, available_at=T0)
    run.refresh_from_db()
    assert run.owner_id == owner.pk


def test_a_backfill_is_spread_at_the_configured_rate(owner, settings):
    settings.PUNCTUAL_BACKFILL_RATE = 4
    job = allow_job(owner)
    now = db_now()
    job_verbs.backfill(job, now - dt.timedelta(minutes=30), now - dt.timedelta(minutes=20))
    first = list(Run.objects.filter(job=job).order_by("scheduled_at"))
    gaps = {(b.available_at - a.available_at) for a, b in itertools.pairwise(first)}
    assert len(first) == 10 and gaps == {dt.timedelta(seconds=0.25)}
    assert now <= first[0].available_at <= db_now()
    # A second backfill at once continues after the first, at the same rate.
    job_verbs.backfill(job, now - dt.timedelta(minutes=40), now - dt.timedelta(minutes=30))
    second = Run.objects.filter(job=job).exclude(pk__in=[r.pk for r in first])
    starts = sorted(r.available_at for r in second)
    assert starts[0] == first[-1].available_at + dt.timedelta(seconds=0.25)
    # Claimed as they come due: only the first one at the start.
    assert len(leases.claim("w1", limit=50, lease_seconds=30, now=first[0].available_at)) == 1


def test_the_auditor_does_not_call_a_spread_backfill_stuck(owner, settings):
    """Runs spread into the future are not due, so not "stuck waiting"; the
    same window unspread would be (all due 20 to 30 minutes ago)."""
    settings.PUNCTUAL_BACKFILL_RATE = 0.01  # one run every 100 s
    job = allow_job(owner)
    now = db_now()
    job_verbs.backfill(job, now - dt.timedelta(minutes=30), now - dt.timedelta(minutes=20))
    worker = fleet.Registration("worker")
    worker.beat()
    # Up for a minute: the auditor expects a worker to have claimed by now.
    ProcessHeartbeat.objects.filter(name=worker.name).update(started_at=now - 60 * S)
    report = audit(job_ids=[job.pk])
    assert Run.objects.filter(job=job).count() == 10
    assert [v for v in report.violations if v.rule == Rule.STUCK_WAITING] == []


def test_a_claim_beside_one_job_s_partition_probes_by_job_not_the_whole_partition(
    owner, other_owner
):
    """Regression: ANALYZE of a partition that holds one job's runs (here a
    20,000-run backfill in the default partition) records job_id's distinct
    values as 1, and the planner then scanned the whole partition for each
    waiting run whose overlap it checked (runs/partitions.py JOB_ID_DISTINCT).
    Counted in pages read, not seconds: about 400,000 pages before, a few
    thousand now."""
    far = db_now() - dt.timedelta(days=400)  # no day partition: the default one
    big = make_job(owner, interval_seconds=60, overlap_policy="allow", start_at=far)
    now = db_now()
    # Not due for an hour (a spread backfill): the claim checks only the
    # skip jobs' runs below, each one's overlap against every partition.
    later = Spread(start=now + dt.timedelta(hours=1), step=S / 1000)
    fires = [far + n * S for n in range(20_000)]
    Run.objects.create_for_fires(big, fires, kind=RunKind.BACKFILL, spread=later)
    skips = [make_job(owner, name=f"skip-{n}", overlap_policy="skip") for n in range(300)]
    for job in skips:
        Run.objects.create_for_fires(job, [now - S], kind=RunKind.SCHEDULED)
    with connection.cursor() as cur:
        cur.execute("ANALYZE runs_run")
        cur.execute(
            "SELECT n_distinct FROM pg_stats WHERE tablename = 'runs_run_default'"
            " AND attname = 'job_id'"
        )
        assert cur.fetchone()[0] < 0  # the override, not the sample's 1
    params = {
        "owners": [owner.pk],
        "shares": [300],
        "now": now,
        "owner": "w1",
        "lease": 30,
        "grace": leases.DEADLINE_GRACE_SECONDS,
        "floor": queries.EPOCH,  # every partition, as the probe this test counts
    }
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + leases.FAIR_CLAIM, params)
        plan = cur.fetchone()[0][0]["Plan"]
        transaction.set_rollback(True)
    assert plan["Actual Rows"] == 300
    pages = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert pages < 100_000, pages


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("owners", [1, 2])
def test_a_claim_costs_its_batch_not_the_backlog_of_due_runs(owner, other_owner, owners):
    """Regression: the planner joined every due run to its job, checked each
    one's turn (ITS_TURN: two probes per partition) and sorted them all, to
    keep the batch's few (beside 20,000 due runs and 30 days of history, one
    claim of 200 read 2.6 million pages). The claim now walks the claim index
    in order and stops at its limit (runs/leases.py ORDERED_WALK). Counted in
    pages read by the claim's own statement, as ``leases.claim`` sends it:
    for 800 due runs, 12,457 before and 300 now (one owner), 12,435 before
    with a second owner (the fair claim, in shares)."""
    now = db_now()
    for n in range(800):
        job = make_job(owner, name=f"due-{n}", overlap_policy="skip")
        Run.objects.create_for_fires(job, [now - S * (n + 1)], kind=RunKind.SCHEDULED)
    if owners == 2:  # the fair claim, in owners' shares
        job = make_job(other_owner, name="other", overlap_policy="skip")
        Run.objects.create_for_fires(job, [now - S], kind=RunKind.SCHEDULED)
    with connection.cursor() as cur:
        # Committed, and vacuumed: the rows an earlier test rolled back would
        # otherwise still fill the pages each probe reads.
        cur.execute("VACUUM ANALYZE runs_run")
        cur.execute("VACUUM ANALYZE jobs_job")
    plans = []
    statement = leases.CLAIM_WAITING.format(scope="") if owners == 1 else leases.FAIR_CLAIM

    def explain_the_claim(execute, sql, params, many, context):
        if sql == statement:
            # Measured in a savepoint, then the claim itself runs as sent.
            with context["cursor"].connection.cursor() as cur:
                cur.execute("SAVEPOINT explain_claim")
                cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
                plans.append(cur.fetchone()[0][0]["Plan"])
                cur.execute("ROLLBACK TO SAVEPOINT explain_claim")
        return execute(sql, params, many, context)

    waiting = Run.objects.filter(job__owner=owner).order_by("available_at")
    tenth = waiting.values_list("available_at", flat=True)[9]
    with connection.execute_wrapper(explain_the_claim):
        batch = leases.claim("w1", limit=10, lease_seconds=30, now=now)
    # The first due runs in claim order, as before.
    claimed = Run.objects.filter(pk__in=[c.run_id for c in batch], job__owner=owner)
    assert claimed.count() == 10 - (owners - 1)
    assert all(run.available_at <= tenth for run in claimed)
    [plan] = plans[:1]
    pages = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert pages < 700, pages

"""The worker's bookkeeping of the leases it holds (dispatch/worker.py), driven
in-process: its database calls run on the test's own connection."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import threading

import pytest
from django.db import connection, connections
from django.db.models import F

from core.db import db_now
from dispatch import worker as worker_module
from dispatch.worker import EXPIRED_EVERY, Worker
from jobs.models import Job
from runs import job_verbs, outcomes
from runs.after_attempt import GONE_NOTE
from runs.models import Run
from tests.factories import make_job
from tests.polling import wait_until

# Committed data: inside the event loop Django hands out its own connection.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _sql_inside_the_event_loop(monkeypatch):
    # The worker's database thread is replaced by inline calls, made from
    # inside the event loop.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def run_in_loop(scenario) -> None:
    async def main():
        try:
            await scenario()
        finally:
            connections.close_all()  # the event loop's own connection

    asyncio.run(main())


def in_process_worker(name: str = "w1", lease_seconds: int = 5) -> Worker:
    """A worker whose database calls run inline and whose deliveries hang
    until cancelled, so a test decides when each attempt ends."""
    worker = Worker(name=name, lease_seconds=lease_seconds, concurrency=10)

    async def inline_db(fn, *args, **kwargs):
        return fn(*args, **kwargs)

    async def hang(claimed):
        try:
            await asyncio.Event().wait()
        finally:
            worker.in_flight -= 1

    async def stop_after_one_claim(seconds):
        worker.stop()

    worker._db = inline_db
    worker._deliver = hang
    worker._sleep = stop_after_one_claim
    worker._wakeup.wait = lambda db=None: stop_after_one_claim(0)
    return worker


async def claim_once(worker: Worker) -> None:
    """One round of the claim loop, expired leases included: a worker looks
    for those once every EXPIRED_EVERY seconds, and these claims follow each
    other within one."""
    worker.stopping.clear()
    worker._expired_checked = -EXPIRED_EVERY
    await worker._claim_loop()


def expire_lease(run_id) -> None:
    Run.objects.filter(pk=run_id).update(lease_until=db_now() - dt.timedelta(seconds=1))


def test_a_worker_that_reclaims_its_own_run_keeps_the_new_attempt_apart(owner):
    run = job_verbs.trigger(make_job(owner, timeout_seconds=60))
    worker = in_process_worker()

    async def scenario():
        worker._wake = asyncio.Event()
        await claim_once(worker)
        [first] = [h.task for h in worker.held.values()]
        # Its heartbeat did not get through in time, and nobody else claimed
        # the run: this worker's own claim loop takes it over at attempt 2.
        expire_lease(run.pk)
        await claim_once(worker)
        assert Run.objects.get(pk=run.pk).attempt == 2
        await asyncio.sleep(0)
        assert first.cancelled(), "the stale attempt's delivery goes on"
        # The stale attempt's result reaches the complete loop: it is dropped,
        # and must not make the worker forget the attempt it now holds.
        worker.results.append(
            outcomes.Result(run_id=run.pk, job_id=run.job_id, attempt=1, state="succeeded")
        )
        await worker._flush()
        expire_lease(run.pk)
        await worker._beat_leases()
        for held in worker.held.values():
            held.task.cancel()

    run_in_loop(scenario)
    run.refresh_from_db()
    assert (run.state, run.lease_owner, run.attempt) == ("running", "w1", 2)
    assert run.lease_until > db_now(), "attempt 2's lease is no longer extended"


def test_a_worker_looks_for_expired_leases_once_every_expired_every(owner, monkeypatch):
    # An hour: far longer than this test takes, however slow the machine.
    monkeypatch.setattr(worker_module, "EXPIRED_EVERY", 3600.0)
    run = job_verbs.trigger(make_job(owner, timeout_seconds=60))
    worker = in_process_worker()

    async def one_round() -> None:
        worker.stopping.clear()
        await worker._claim_loop()

    async def scenario():
        worker._wake = asyncio.Event()
        worker._expired_checked = -math.inf
        await one_round()
        expire_lease(run.pk)
        # Within EXPIRED_EVERY of the last look: no look for expired leases.
        await one_round()
        assert Run.objects.get(pk=run.pk).attempt == 1
        # EXPIRED_EVERY later, the next round looks, and takes the run over.
        worker._expired_checked -= 3600.0
        await one_round()
        assert Run.objects.get(pk=run.pk).attempt == 2
        for held in worker.held.values():
            held.task.cancel()

    run_in_loop(scenario)


def gone(run, attempt: int = 1) -> outcomes.Result:
    """A 410 Gone answer, as the worker decides it: the run fails, the job pauses."""
    return outcomes.Result(
        run_id=run.pk,
        job_id=run.job_id,
        attempt=attempt,
        state="failed",
        status_code=410,
        reason="permanent error",
        attempt_outcome="permanent",
        pause_note=GONE_NOTE,
    )


def owner_patch(job_id, url: str, started: threading.Event, pid: list) -> None:
    """An owner's PATCH from its own connection: writes its column, bumps version."""
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pid.append(cur.fetchone()[0])
            started.set()
        Job.objects.filter(pk=job_id).update(url=url, version=F("version") + 1)
    finally:
        connection.close()


def test_an_owner_patch_racing_the_auto_pause_is_not_reverted(owner):
    job = make_job(owner, timeout_seconds=60)
    run = job_verbs.trigger(job)
    version = Job.objects.get(pk=job.pk).version
    worker = in_process_worker()
    patched = "http://127.0.0.1:9/patched"
    pid: list[int] = []
    started = threading.Event()
    patch = threading.Thread(target=owner_patch, args=(job.pk, patched, started, pid))

    def patch_before_pausing(execute, sql, params, many, context):
        # Just before the worker writes the pause, the owner's PATCH runs: it
        # either commits first or waits for the worker's lock on the job row.
        updates_job = sql.lstrip().upper().startswith("UPDATE") and "jobs_job" in sql
        pausing = updates_job and ("paused" in sql or "paused" in [str(p) for p in params or ()])
        if pausing and not patch.is_alive() and not started.is_set():
            patch.start()
            started.wait(10)
            wait_until(
                lambda: not patch.is_alive() or waits_for_a_lock(pid[0]),
                message="the owner's PATCH to commit or wait for the row lock",
            )
        return execute(sql, params, many, context)

    async def scenario():
        worker._wake = asyncio.Event()
        await claim_once(worker)
        worker.results.append(gone(run))
        with connection.execute_wrapper(patch_before_pausing):
            await worker._flush()
        for held in worker.held.values():
            held.task.cancel()

    run_in_loop(scenario)
    patch.join(30)
    job.refresh_from_db()
    assert (job.state, job.url) == ("paused", patched)
    assert job.version == version + 2  # one bump each: nothing was overwritten
    assert GONE_NOTE in job.pause_note


def waits_for_a_lock(pid: int) -> bool:
    with connections["default"].cursor() as cur:
        cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cur.fetchone()
    return bool(row) and row[0] == "Lock"


FAULT_ONCE = """
    CREATE SEQUENCE test_pause_fault_seq;
    CREATE FUNCTION test_pause_fault() RETURNS trigger AS $$
    BEGIN
        -- nextval is not rolled back: the fault fires on the first pause only.
        IF NEW.state = 'paused' AND OLD.state = 'active'
           AND nextval('test_pause_fault_seq') = 1 THEN
            RAISE EXCEPTION 'injected fault while pausing';
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql;
    CREATE TRIGGER test_pause_fault BEFORE UPDATE ON jobs_job
        FOR EACH ROW EXECUTE FUNCTION test_pause_fault();
"""


@pytest.fixture
def pause_fails_once():
    with connection.cursor() as cur:
        cur.execute(FAULT_ONCE)
    yield
    with connection.cursor() as cur:
        cur.execute(
            "DROP TRIGGER test_pause_fault ON jobs_job; DROP FUNCTION test_pause_fault();"
            " DROP SEQUENCE test_pause_fault_seq;"
        )


def test_a_database_error_while_auto_pausing_neither_kills_the_worker_nor_loses_the_pause(
    owner, pause_fails_once, monkeypatch
):
    monkeypatch.setattr(worker_module, "DB_RETRY_EVERY", 0.05)
    job = make_job(owner, timeout_seconds=60)
    run = job_verbs.trigger(job)
    worker = in_process_worker()

    async def scenario():
        worker._wake = asyncio.Event()
        await claim_once(worker)
        worker.stopping.clear()
        worker.in_flight = 1  # keeps the complete loop going until the test ends
        loop = asyncio.create_task(worker._complete_loop())
        worker.results.append(gone(run))
        deadline = asyncio.get_running_loop().time() + 30
        while Job.objects.get(pk=job.pk).state != "paused":
            assert not loop.done(), "the complete loop died"
            assert asyncio.get_running_loop().time() < deadline, "the job was never paused"
            await asyncio.sleep(0.02)
        assert not loop.done()
        loop.cancel()
        for held in worker.held.values():
            held.task.cancel()

    run_in_loop(scenario)
    run.refresh_from_db()
    assert (run.state, run.last_status_code) == ("failed", 410)
    assert list(run.attempts.values_list("number", "outcome")) == [(1, "permanent")]


def test_a_lease_the_heartbeat_renewed_outlives_the_timer_set_at_its_claim(owner):
    # One timer watches each claimed batch (Worker._renewed). A heartbeat that
    # got through moves every run's lapse on: the claim's timer, when it
    # fires, must leave those deliveries alone; the heartbeat's own timer
    # gives them up if no later heartbeat got through.
    runs = [job_verbs.trigger(make_job(owner, timeout_seconds=60)) for _ in range(2)]
    worker = in_process_worker(lease_seconds=30)
    cancelled_at: dict[str, list] = {}

    async def scenario():
        worker._wake = asyncio.Event()
        await claim_once(worker)
        held = list(worker.held.items())
        assert sorted(key[0] for key, _ in held) == sorted(run.pk for run in runs)
        at_claim = {h.lapse_at for _, h in held}
        assert len(at_claim) == 1, "one claim, one lapse deadline"
        [claim_deadline] = at_claim
        await asyncio.sleep(0.01)
        await worker._beat_leases()
        renewed = {h.lapse_at for _, h in held}
        assert len(renewed) == 1 and renewed.pop() > claim_deadline
        # The claim's timer fires: the heartbeat renewed both leases since.
        worker._lapse_due([key for key, _ in held], claim_deadline)
        await asyncio.sleep(0)
        cancelled_at["claim timer"] = [h.task.cancelled() for _, h in held]
        # The heartbeat's timer fires with nothing renewed since: both lapse.
        worker._lapse_due([key for key, _ in held], held[0][1].lapse_at)
        await asyncio.sleep(0)
        cancelled_at["heartbeat timer"] = [h.task.cancelled() for _, h in held]
        assert worker.held == {}

    run_in_loop(scenario)
    assert cancelled_at == {"claim timer": [False, False], "heartbeat timer": [True, True]}


def test_a_lease_nobody_renews_lapses_by_the_worker_s_own_clock(owner):
    # No heartbeat gets through (the test sends none): the claim's own timer
    # gives the delivery up just before the database's lease expires.
    run = job_verbs.trigger(make_job(owner, timeout_seconds=60))
    worker = in_process_worker(lease_seconds=1)

    async def scenario():
        worker._wake = asyncio.Event()
        await claim_once(worker)
        [(key, held)] = worker.held.items()
        assert key == (run.pk, 1)
        deadline = asyncio.get_running_loop().time() + 30
        while not held.task.done():
            assert asyncio.get_running_loop().time() < deadline, "the lease never lapsed"
            await asyncio.sleep(0.02)
        assert held.task.cancelled()
        assert worker.held == {}

    run_in_loop(scenario)


@pytest.mark.parametrize(("freed", "claims"), [(5, [100]), (50, [100, 50])])
def test_after_a_full_batch_the_worker_claims_again_only_for_a_tenth_of_its_slots(
    owner, freed, claims
):
    # 300 due runs, 100 slots: the first claim comes back full. If only a few
    # deliveries ended meanwhile, the loop waits for more slots to free (here
    # the wait ends the test) rather than claiming a few runs per statement;
    # if a tenth of the slots or more are free, it claims again at once.
    job = make_job(owner, overlap_policy="allow", timeout_seconds=60)
    now = db_now()
    Run.objects.create_for_fires(
        job, [now - dt.timedelta(seconds=n + 1) for n in range(300)], kind="backfill"
    )
    worker = in_process_worker()
    worker.concurrency = 100
    worker._refill_at = 10
    seen: list[int] = []

    async def counting_db(fn, *args, **kwargs):
        result = fn(*args, **kwargs)
        if fn is worker_module.leases.claim:
            seen.append(len(result))
            worker.in_flight -= freed  # deliveries that ended while the claim ran
        return result

    worker._db = counting_db

    async def scenario():
        worker._wake = asyncio.Event()
        await claim_once(worker)
        for held in worker.held.values():
            held.task.cancel()

    run_in_loop(scenario)
    assert seen[: len(claims)] == claims
    if freed < worker._refill_at:
        assert seen == claims, "claimed again for a few slots"

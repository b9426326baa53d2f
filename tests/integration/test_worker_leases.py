"""The worker's bookkeeping of the leases it holds (dispatch/worker.py), driven
in-process: its database calls run on the test's own connection."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from django.db import connections

from core.db import db_now
from dispatch.worker import Worker
from runs import job_verbs, outcomes
from runs.models import Run
from tests.factories import make_job

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
    return worker


async def claim_once(worker: Worker) -> None:
    worker.stopping.clear()
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

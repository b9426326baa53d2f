"""An owner and the system writing one job at the same moment, on two live
connections: each writer locks the row and decides on what it holds then,
writes only its own fields, and bumps ``version`` in SQL. The interleaving is
forced: one connection holds the row lock until the other is seen waiting."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import transaction

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from jobs.models import Channel, Job
from runs import job_verbs, leases, outcomes
from runs.after_attempt import GONE_NOTE
from runs.models import Run
from tests.factories import at, make_job
from tests.integration.races import start, wait_until_blocked_or_done

pytestmark = pytest.mark.django_db(transaction=True)

LONG_AGO = at("2000-01-01T00:00:00")
PATCH = {"description": "edited by the owner", "timeout_seconds": 7}


def url(job: Job) -> str:
    return f"/api/v1/jobs/{job.pk}/"


def test_an_owner_delete_committing_under_the_auto_resume_leaves_the_job_deleted(
    owner, api, monkeypatch
):
    job = make_job(owner)
    job_verbs.pause(job, note="maintenance", resume_at=LONG_AGO)
    has_copy, go = threading.Event(), threading.Event()
    real_resume = job_verbs.resume

    def resume_when_told(stale: Job, **kwargs):
        has_copy.set()  # the dispatcher read the job: paused, due to resume
        assert go.wait(30)
        return real_resume(stale, **kwargs)

    monkeypatch.setattr(job_verbs, "resume", resume_when_told)
    dispatcher = start(lambda: Dispatcher()._auto_resume())
    assert has_copy.wait(30)
    with transaction.atomic():  # the owner's DELETE, committed when this block ends
        assert api.delete(url(job)).status_code == 204
        go.set()
        wait_until_blocked_or_done(dispatcher, "the auto-resume")
    dispatcher.result()

    job.refresh_from_db()
    assert job.deleted_at is not None
    assert (job.state, job.next_fire_at) == ("paused", None)
    assert Dispatcher().tick(now=db_now() + dt.timedelta(days=1)).runs == 0
    assert not Run.objects.filter(job=job).exists()


def gone(claimed: leases.Claimed) -> outcomes.Result:
    """A 410 Gone, as the worker decides it: the run fails, the job pauses."""
    return outcomes.Result(
        run_id=claimed.run_id,
        job_id=claimed.job_id,
        attempt=claimed.attempt,
        state="failed",
        status_code=410,
        reason="permanent error",
        attempt_outcome="permanent",
        pause_note=GONE_NOTE,
    )


@pytest.mark.parametrize("first", ["owner_patch", "auto_pause"])
def test_the_worker_s_auto_pause_racing_an_owner_patch_keeps_both(owner, api, first):
    job = make_job(owner, timeout_seconds=60)
    job_verbs.trigger(job)
    [claimed] = leases.claim("w1", limit=1, lease_seconds=30)
    start_version = Job.objects.get(pk=job.pk).version

    if first == "owner_patch":
        with transaction.atomic():  # the PATCH holds the row until this block ends
            patched = api.patch(url(job), PATCH, format="json")
            worker = start(lambda: outcomes.complete("w1", [gone(claimed)]))
            wait_until_blocked_or_done(worker, "the worker's completion")
        assert worker.result().pauses == [(job.pk, GONE_NOTE)]
    else:
        paused, go = threading.Event(), threading.Event()

        def complete_and_hold():
            with transaction.atomic():
                done = outcomes.complete("w1", [gone(claimed)])
                paused.set()
                assert go.wait(30)
            return done

        worker = start(complete_and_hold)
        assert paused.wait(30)
        owner_patch = start(lambda: api.patch(url(job), PATCH, format="json"))
        try:
            wait_until_blocked_or_done(owner_patch, "the owner's PATCH")
        finally:
            go.set()
        assert worker.result().pauses == [(job.pk, GONE_NOTE)]
        patched = owner_patch.result()

    assert patched.status_code == 200
    fresh = Job.objects.get(pk=job.pk)
    assert (fresh.description, fresh.timeout_seconds) == tuple(PATCH.values())
    assert (fresh.state, fresh.pause_note) == ("paused", GONE_NOTE)
    assert fresh.version == start_version + 2  # one bump each: nothing was overwritten
    assert patched["ETag"] == f'"{start_version + (1 if first == "owner_patch" else 2)}"'


def second_writer(kind: str, api, job: Job, version: int):
    """The writer that comes second, from the same version: what it answers."""
    if kind == "owner_patch":
        return lambda: api.patch(url(job), {"description": "second"}, format="json")["ETag"]
    if kind == "owner_patch_if_match":
        headers = {"HTTP_IF_MATCH": f'"{version}"'}
        return lambda: api.patch(url(job), {"description": "second"}, format="json", **headers)
    stale = Job.objects.get(pk=job.pk)  # the copy an admin page or the system holds

    def verb():
        if kind == "rotate_secret":
            stale.rotate_secret(channel=Channel.ADMIN)
        else:
            getattr(job_verbs, kind)(stale, channel=Channel.SYSTEM)
        return f'"{stale.version}"'  # what an answer built from the copy sends

    return verb


@pytest.mark.parametrize(
    "kind", ["owner_patch", "owner_patch_if_match", "pause", "rotate_secret", "soft_delete"]
)
def test_two_writers_from_one_version_never_share_a_version(owner, api, kind):
    job = make_job(owner)
    version = Job.objects.get(pk=job.pk).version
    writer = second_writer(kind, api, job, version)

    with transaction.atomic():  # the first writer holds the row until this block ends
        first = api.patch(url(job), {"description": "first"}, format="json")
        second = start(writer)
        wait_until_blocked_or_done(second, "the second writer")
    answer = second.result()

    assert first["ETag"] == f'"{version + 1}"'
    fresh = Job.objects.get(pk=job.pk)
    if kind == "owner_patch_if_match":
        assert answer.status_code == 412  # it asked for the version the first one replaced
        assert (fresh.version, fresh.description) == (version + 1, "first")
        return
    assert answer == f'"{version + 2}"'
    assert fresh.version == version + 2
    assert fresh.description == ("second" if kind == "owner_patch" else "first")

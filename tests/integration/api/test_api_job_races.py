"""Owner changes, system changes and admin buttons that act on copies read
earlier: each verb locks the row and decides on what it holds now, so none of
them writes a stale copy back over another writer's change."""

from __future__ import annotations

import datetime as dt

import pytest
from django.forms.models import model_to_dict

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from jobs.models import Channel, Job, JobEvent
from runs import job_verbs
from runs.models import Run
from tests.factories import at, make_job

pytestmark = pytest.mark.django_db

LONG_AGO = at("2000-01-01T00:00:00")


def url(job: Job) -> str:
    return f"/api/v1/jobs/{job.pk}/"


def row(job: Job) -> dict:
    fresh = Job.objects.get(pk=job.pk)
    return {**model_to_dict(fresh), "version": fresh.version, "updated_at": fresh.updated_at}


def run_verb(name: str, job: Job) -> None:
    if name == "rotate_secret":
        job.rotate_secret(channel=Channel.ADMIN)
    else:
        getattr(job_verbs, name)(job, channel=Channel.ADMIN)


def test_auto_resume_does_not_bring_back_a_job_the_owner_deleted_meanwhile(owner, api, monkeypatch):
    job = make_job(owner)
    job_verbs.pause(job, note="maintenance", resume_at=LONG_AGO)
    real_resume = job_verbs.resume

    def owner_deletes_first(stale: Job, **kwargs):
        # The dispatcher read the job; the owner's DELETE commits before it resumes it.
        assert api.delete(url(stale)).status_code == 204
        return real_resume(stale, **kwargs)

    monkeypatch.setattr(job_verbs, "resume", owner_deletes_first)
    Dispatcher()._auto_resume()

    job.refresh_from_db()
    assert job.deleted_at is not None
    assert (job.state, job.next_fire_at) == ("paused", None)
    assert Dispatcher().tick(now=db_now() + dt.timedelta(days=1)).runs == 0
    assert not Run.objects.filter(job=job).exists()


def test_auto_resume_keeps_a_later_resume_at_the_owner_set_meanwhile(owner, api, monkeypatch):
    job = make_job(owner)
    job_verbs.pause(job, resume_at=LONG_AGO)
    later = db_now() + dt.timedelta(days=1)
    real_resume = job_verbs.resume

    def owner_pauses_again_first(stale: Job, **kwargs):
        body = {"note": "longer", "resume_at": later.isoformat()}
        assert api.post(url(stale) + "pause/", body, format="json").status_code == 200
        return real_resume(stale, **kwargs)

    monkeypatch.setattr(job_verbs, "resume", owner_pauses_again_first)
    Dispatcher()._auto_resume()

    job.refresh_from_db()
    assert (job.state, job.pause_note, job.resume_at) == ("paused", "longer", later)


@pytest.mark.parametrize("verb", ["pause", "resume", "rotate_secret"])
def test_an_admin_button_on_a_stale_copy_keeps_the_owners_patch(owner, api, verb):
    job = make_job(owner)
    if verb == "resume":
        job_verbs.pause(job)
    stale = Job.objects.get(pk=job.pk)  # what the admin page or list action holds
    patch = {"description": "edited by the owner", "timeout_seconds": 7}
    assert api.patch(url(job), patch, format="json").status_code == 200

    run_verb(verb, stale)

    fresh = Job.objects.get(pk=job.pk)
    assert (fresh.description, fresh.timeout_seconds) == ("edited by the owner", 7)
    assert stale.description == "edited by the owner"  # the caller's copy shows the row


@pytest.mark.parametrize("verb", ["pause", "resume", "rotate_secret", "soft_delete"])
def test_two_changes_from_the_same_version_end_with_two_new_versions(owner, api, verb):
    job = make_job(owner)
    if verb == "resume":
        job_verbs.pause(job)
    start = Job.objects.get(pk=job.pk).version
    stale = Job.objects.get(pk=job.pk)

    patched = api.patch(url(job), {"description": "x"}, format="json", HTTP_IF_MATCH=f'"{start}"')
    assert patched["ETag"] == f'"{start + 1}"'
    run_verb(verb, stale)

    assert Job.objects.get(pk=job.pk).version == start + 2
    assert stale.version == start + 2  # what an answer built from it would send as ETag


def test_an_owner_patch_after_a_system_pause_answers_a_new_etag(owner, api):
    job = make_job(owner)
    start = job.version
    stale = Job.objects.get(pk=job.pk)
    job_verbs.pause(stale, note="auto", channel=Channel.SYSTEM)

    answer = api.patch(url(job), {"description": "y"}, format="json")

    assert answer.status_code == 200
    assert answer["ETag"] == f'"{start + 2}"'
    fresh = Job.objects.get(pk=job.pk)
    assert (fresh.state, fresh.pause_note, fresh.version) == ("paused", "auto", start + 2)


@pytest.mark.parametrize("verb", ["pause", "resume", "soft_delete"])
def test_a_verb_on_a_deleted_job_writes_nothing(owner, verb):
    job = make_job(owner)
    if verb == "resume":
        job_verbs.pause(job)
    stale = Job.objects.get(pk=job.pk)
    job_verbs.soft_delete(job)
    before, events = row(job), JobEvent.objects.filter(job=job).count()

    run_verb(verb, stale)

    assert row(job) == before
    assert JobEvent.objects.filter(job=job).count() == events


def test_rotating_the_secret_of_a_deleted_job_is_refused_and_writes_nothing(owner):
    job = make_job(owner)
    stale = Job.objects.get(pk=job.pk)
    job_verbs.soft_delete(job)
    before = row(job)

    with pytest.raises(Job.DoesNotExist):
        stale.rotate_secret(channel=Channel.ADMIN)

    assert row(job) == before
    assert Job.objects.get(pk=job.pk).secret_encrypted == job.secret_encrypted


def test_a_full_row_save_of_an_existing_job_is_refused(owner):
    job = make_job(owner)
    with pytest.raises(ValueError, match="update_fields"):
        job.save()

"""Owners see and change only their own jobs, runs and events; another
owner's object is not found (404), whatever the URL."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from jobs.models import Job, JobEvent
from runs import job_verbs
from runs.models import Run
from tests.admin_support import OWNERS_GROUP, make_run
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def test_migration_creates_the_job_owners_group_with_exactly_the_owner_permissions():
    group = Group.objects.get(name=OWNERS_GROUP)
    perms = set(group.permissions.values_list("content_type__app_label", "codename"))
    assert perms == {
        ("jobs", "add_job"),
        ("jobs", "change_job"),
        ("jobs", "delete_job"),
        ("jobs", "view_job"),
        ("jobs", "view_jobevent"),
        ("runs", "view_run"),
        ("runs", "change_run"),
        ("runs", "view_attempt"),
        ("alerts", "add_channel"),
        ("alerts", "change_channel"),
        ("alerts", "delete_channel"),
        ("alerts", "view_channel"),
        ("alerts", "view_alert"),
    }


def test_owner_lists_show_only_their_own_jobs_runs_and_events(ann, ben, ann_client):
    mine = make_job(ann, name="ann-nightly")
    theirs = make_job(ben, name="ben-secret-job")
    make_run(mine, state="failed")
    make_run(theirs, state="failed")
    job_verbs.pause(theirs, actor=ben, channel="admin")
    mine.record_event("renamed", actor=ann, channel="admin")

    jobs = ann_client.get(reverse("admin:jobs_job_changelist")).content.decode()
    runs = ann_client.get(reverse("admin:runs_run_changelist")).content.decode()
    events = ann_client.get(reverse("admin:jobs_jobevent_changelist")).content.decode()

    assert "ann-nightly" in jobs and "ben-secret-job" not in jobs
    assert "ann-nightly" in runs and "ben-secret-job" not in runs
    assert 'field-action_text">Renamed<' in events
    assert "ben-secret-job" not in events and 'field-action_text">Paused<' not in events


def test_another_owners_objects_are_not_found_at_every_admin_url(ann, ben, ann_client):
    job = make_job(ben, name="ben-job")
    run = make_run(job, state="failed")
    event = job.record_event("paused", actor=ben)
    urls = [
        reverse("admin:jobs_job_change", args=[job.pk]),
        reverse("admin:jobs_job_delete", args=[job.pk]),
        reverse("admin:jobs_job_history", args=[job.pk]),
        reverse("admin:runs_run_change", args=[run.pk]),
        reverse("admin:runs_run_history", args=[run.pk]),
        reverse("admin:jobs_jobevent_change", args=[event.pk]),
    ]
    for url in urls:
        assert ann_client.get(url).status_code == 404, url
    posts = [
        reverse("admin:jobs_job_rotate_secret", args=[job.pk]),
        reverse("admin:jobs_job_test_delivery", args=[job.pk]),
        reverse("admin:jobs_job_pause", args=[job.pk]),
        reverse("admin:jobs_job_resume", args=[job.pk]),
        reverse("admin:runs_run_retry", args=[run.pk]),
    ]
    for url in posts:
        assert ann_client.post(url).status_code == 404, url
    job.refresh_from_db()
    assert job.state == "active" and job.version == 1
    assert not Run.objects.filter(job=job, kind="manual").exists()


def test_an_owners_list_actions_cannot_reach_another_owners_jobs(ann, ben, ann_client):
    theirs = make_job(ben)
    response = ann_client.post(
        reverse("admin:jobs_job_changelist"),
        {"action": "pause_jobs", "_selected_action": [str(theirs.pk)]},
    )
    assert response.status_code in (200, 302)
    theirs.refresh_from_db()
    assert theirs.state == "active"


def test_a_malformed_id_is_not_found_too(ann_client):
    assert ann_client.get("/admin/jobs/job/not-a-uuid/change/").status_code == 404


def test_superusers_see_every_owners_jobs(ann, ben, root_client):
    make_job(ann, name="ann-job")
    make_job(ben, name="ben-job")
    page = root_client.get(reverse("admin:jobs_job_changelist")).content.decode()
    assert "ann-job" in page and "ben-job" in page


def test_a_new_job_belongs_to_the_owner_who_adds_it(ann, ann_client):
    response = ann_client.post(
        reverse("admin:jobs_job_add"),
        {
            "name": "made-in-admin",
            "description": "",
            "cron": "",
            "interval_seconds": "300",
            "timezone": "UTC",
            "target_kind": "pull",
            "url": "",
            "payload": "{}",
            "timeout_seconds": "30",
            "max_attempts": "3",
            "retry_backoff_seconds": "10",
            "jitter_seconds": "0",
            "misfire_policy": "skip",
            "max_catchup": "3",
            "misfire_grace_seconds": "60",
            "overlap_policy": "skip",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get(name="made-in-admin")
    assert job.owner == ann
    assert job.next_fire_at is not None


def test_deleting_in_the_admin_is_a_soft_delete_that_hides_the_job(ann, ann_client):
    job = make_job(ann, name="to-delete")
    waiting = make_run(job, state="pending", ago=1)
    done = make_run(job, state="succeeded", ago=120)

    confirm = ann_client.get(reverse("admin:jobs_job_delete", args=[job.pk]))
    assert confirm.status_code == 200
    response = ann_client.post(reverse("admin:jobs_job_delete", args=[job.pk]), {"post": "yes"})
    assert response.status_code == 302

    job.refresh_from_db()
    assert job.deleted_at is not None
    waiting.refresh_from_db()
    done.refresh_from_db()
    assert (waiting.state, waiting.reason) == ("cancelled", "deleted")
    assert done.state == "succeeded"  # history stays
    event = JobEvent.objects.get(job=job, action="deleted")
    assert (event.channel, event.actor) == ("admin", ann)
    listing = ann_client.get(reverse("admin:jobs_job_changelist")).content.decode()
    assert ">to-delete</a>" not in listing
    assert ann_client.get(reverse("admin:jobs_job_change", args=[job.pk])).status_code == 404


def test_owners_cannot_add_or_delete_runs(ann, ann_client):
    run = make_run(make_job(ann), state="failed")
    assert ann_client.get(reverse("admin:runs_run_add")).status_code == 403
    assert ann_client.get(reverse("admin:runs_run_delete", args=[run.pk])).status_code == 403
    page = ann_client.get(reverse("admin:runs_run_changelist")).content.decode()
    assert "delete_selected" not in page

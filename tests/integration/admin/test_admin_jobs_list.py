"""The jobs list: readable schedules, state, next fire, last run and its lag,
a strip of recent outcomes, the filters, and actions that call domain verbs."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.urls import reverse

from core.db import db_now
from jobs.models import Job, JobEvent
from runs import job_verbs
from runs.models import Run
from tests.admin_support import make_run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

LIST = "admin:jobs_job_changelist"


def rows(page: str) -> list[str]:
    """The names in the list, in order."""
    return re.findall(r'<th class="field-name"><a href="[^"]+">([^<]+)</a>', page)


def get(client, **params) -> str:
    response = client.get(reverse(LIST), params)
    assert response.status_code == 200
    return response.content.decode()


def test_schedules_read_as_words(ann, ann_client):
    make_job(ann, name="every-five", interval_seconds=300)
    make_job(ann, name="nightly", cron="0 2 * * *", timezone="Europe/Berlin")
    make_job(ann, name="hourly-macro", cron="@hourly")
    page = get(ann_client)
    assert "every 5 minutes" in page
    assert "At 02:00, Europe/Berlin" in page
    assert "Every hour, UTC" in page


def test_last_run_shows_its_state_and_lag_and_the_strip_shows_recent_outcomes(ann, ann_client):
    job = make_job(ann, name="with-history")
    make_run(job, state="succeeded", ago=300)
    make_run(job, state="missed", ago=200)
    make_run(job, state="failed", ago=100, lag_seconds=2.5)
    page = get(ann_client)
    last_run = re.search(r'<td class="field-last_run">(.*?)</td>', page, re.S).group(1)
    assert "st-failed" in last_run and "+2.5 s" in last_run
    strip = re.search(r'<td class="field-recent_outcomes">(.*?)</td>', page, re.S).group(1)
    # Oldest on the left.
    assert re.findall(r"punctual-sq st-(\w+)", strip) == ["succeeded", "missed", "failed"]


def test_next_fire_is_shown_in_the_jobs_zone(ann, ann_client):
    make_job(ann, name="berlin", cron="0 2 * * *", timezone="Europe/Berlin")
    page = get(ann_client)
    cell = re.search(r'<td class="field-next_fire[^"]*">(.*?)</td>', page, re.S).group(1)
    assert re.search(r"\d{4}-\d\d-\d\d 02:00 CES?T", cell), cell
    assert "in " in cell


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"state": "paused"}, ["paused-one"]),
        ({"state": "finished"}, ["finished-one"]),
        ({"state": "active"}, ["catch-up-one", "failing-one", "plain", "pull-one", "queue-one"]),
        ({"target_kind__exact": "pull"}, ["pull-one"]),
        ({"misfire_policy__exact": "catch_up"}, ["catch-up-one"]),
        ({"overlap_policy__exact": "queue"}, ["queue-one"]),
        ({"health": "failing"}, ["failing-one"]),
    ],
)
def test_filters_answer_state_target_policies_and_failing(ann, ann_client, params, expected):
    make_job(ann, name="plain")
    job_verbs.pause(make_job(ann, name="paused-one"), note="maintenance")
    make_job(ann, name="pull-one", target_kind="pull", url="")
    make_job(ann, name="catch-up-one", misfire_policy="catch_up")
    make_job(ann, name="queue-one", overlap_policy="queue")
    make_job(ann, name="failing-one", consecutive_failures=2)
    make_job(ann, name="finished-one", run_at=db_now() - dt.timedelta(minutes=1))
    assert rows(get(ann_client, **params)) == expected


def test_a_finished_job_shows_finished_not_failing_and_its_schedule_in_words(ann, ann_client):
    make_job(
        ann,
        name="done",
        run_at=dt.datetime(2026, 1, 1, 17, 30, tzinfo=dt.UTC),
        timezone="Europe/Berlin",
        consecutive_failures=1,
    )
    page = get(ann_client)
    state = re.search(r'<td class="field-state_column">(.*?)</td>', page, re.S).group(1)
    assert "Finished" in state and "Failing" not in state
    assert "once, at 2026-01-01 18:30 (Europe/Berlin)" in page


def act(client, action: str, *jobs: Job):
    return client.post(
        reverse(LIST),
        {"action": action, "_selected_action": [str(j.pk) for j in jobs]},
        follow=True,
    )


def pause_selected(client, *jobs: Job, **fields):
    """The list's pause action: its form first, then the form posted."""
    form = act(client, "pause_jobs", *jobs)
    assert 'id="pause-form"' in form.content.decode()
    data = {"_selected_action": [str(j.pk) for j in jobs], "note": "", "resume_at": "", **fields}
    return client.post(reverse("admin:jobs_job_pause_selected"), data, follow=True)


def test_pause_and_resume_actions_call_the_domain_verbs_through_the_admin_channel(ann, ann_client):
    job = make_job(ann)
    waiting = make_run(job, state="pending", ago=1)

    form = act(ann_client, "pause_jobs", job)
    job.refresh_from_db()
    assert job.state == "active"  # the action asks first
    assert "Pause the selected jobs" in form.content.decode()
    pause_selected(ann_client, job)
    job.refresh_from_db()
    waiting.refresh_from_db()
    assert job.state == "paused" and job.next_fire_at is None
    assert waiting.state == "cancelled"  # Job.pause cancels waiting runs

    response = act(ann_client, "resume_jobs", job)
    job.refresh_from_db()
    assert job.state == "active" and job.next_fire_at is not None
    assert "Resumed 1 job." in response.content.decode()

    events = list(JobEvent.objects.filter(job=job).order_by("created_at", "id"))
    assert [(e.action, e.channel, e.actor) for e in events] == [
        ("paused", "admin", ann),
        ("resumed", "admin", ann),
    ]


def test_trigger_now_makes_a_manual_run_per_job(ann, ann_client):
    first, second = make_job(ann), make_job(ann)
    act(ann_client, "trigger_jobs", first, second)
    manual = Run.objects.filter(kind="manual")
    assert sorted(r.job_id for r in manual) == sorted([first.pk, second.pk])
    assert JobEvent.objects.filter(action="triggered", channel="admin", actor=ann).count() == 2


def test_pausing_a_paused_job_again_changes_nothing(ann, ann_client):
    job = make_job(ann)
    job_verbs.pause(job, note="by hand")
    response = pause_selected(ann_client, job, note="another note")
    job.refresh_from_db()
    assert job.pause_note == "by hand"
    assert "Paused 0 jobs (1 already paused)." in response.content.decode()


def test_deleted_jobs_are_not_listed(ann, ann_client):
    make_job(ann, name="kept")
    job_verbs.soft_delete(make_job(ann, name="gone"))
    assert rows(get(ann_client)) == ["kept"]

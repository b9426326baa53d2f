"""A job's history is its audit events: HISTORY opens them, actions read in
words, changes as "field: old → new", filters by job and by action."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from jobs.models import JobEvent
from runs import job_verbs
from tests.factories import make_job

pytestmark = pytest.mark.django_db

EVENTS = reverse("admin:jobs_jobevent_changelist")


def rows(client, **params) -> list[str]:
    response = client.get(EVENTS, params)
    assert response.status_code == 200, response.content.decode()[:2000]
    body = re.search(r"<tbody>(.*?)</tbody>", response.content.decode(), re.S)
    return re.findall(r"<tr>.*?</tr>", body.group(1), re.S) if body else []


def test_history_opens_the_jobs_audit_events(ann, ann_client):
    job = make_job(ann, name="nightly")
    response = ann_client.get(reverse("admin:jobs_job_history", args=[job.pk]))
    assert response.status_code == 302
    assert response["Location"] == f"{EVENTS}?job__id__exact={job.pk}"


def test_history_of_another_owners_job_is_not_found(ben, ann_client):
    job = make_job(ben)
    assert ann_client.get(reverse("admin:jobs_job_history", args=[job.pk])).status_code == 404


def test_events_read_in_words_with_what_changed(ann, ann_client):
    job = make_job(ann, name="nightly", payload={"report": "daily"})
    job_verbs.edit(
        job, {"timeout_seconds": 45, "payload": {"report": "weekly"}}, actor=ann, channel="admin"
    )
    job_verbs.pause(job, actor=ann, channel="api", note="holiday")
    job.rotate_secret(actor=ann, channel="admin")

    listed = rows(ann_client, job__id__exact=str(job.pk))
    actions = [re.search(r'class="field-action_text">([^<]+)<', row).group(1) for row in listed]
    assert actions == ["Secret rotated", "Paused", "Edited"]
    edited = listed[2]
    assert "timeout_seconds: 30 → 45" in edited
    assert re.search(
        r"payload: 18 bytes, sha256 [0-9a-f]{12}… → 19 bytes, sha256 [0-9a-f]{12}…", edited
    )
    assert (
        "state: active → paused" in listed[1] and "pause_note: &#x27;&#x27; → holiday" in listed[1]
    )

    event = JobEvent.objects.get(job=job, action="paused")
    page = ann_client.get(reverse("admin:jobs_jobevent_change", args=[event.pk])).content.decode()
    assert "<h1>Paused</h1>" in page
    assert "<li>state: active → paused</li>" in page and "<li>cancelled_runs: 0</li>" in page


def test_a_long_change_list_is_cut_in_the_list_and_whole_on_the_event(ann, ann_client):
    job = make_job(ann)
    event = job.record_event(
        "updated",
        actor=ann,
        channel="api",
        changes={f"field_{i}": [i, i + 1] for i in range(7)},
    )
    (row,) = rows(ann_client)
    assert row.count("<li>") == 6 and "… and 2 more (open the event)" in row
    page = ann_client.get(reverse("admin:jobs_jobevent_change", args=[event.pk])).content.decode()
    assert page.count("<li>field_") == 7


def test_events_filter_by_job_and_by_action(ann, ben, ann_client):
    one, other = make_job(ann, name="one"), make_job(ann, name="other")
    job_verbs.pause(one, actor=ann, channel="admin")
    job_verbs.pause(other, actor=ann, channel="admin")
    job_verbs.resume(one, actor=ann, channel="admin")
    job_verbs.pause(make_job(ben, name="bens"), actor=ben, channel="admin")

    assert len(rows(ann_client, job__id__exact=str(one.pk))) == 2
    assert len(rows(ann_client, action="paused")) == 2
    (row,) = rows(ann_client, action="resumed")
    assert "Resumed" in row and ">one<" in row
    assert rows(ann_client, job__id__exact=str(one.pk), action="paused")[0].count("Paused") == 1
    page = ann_client.get(EVENTS).content.decode()
    assert 'href="?action=secret_rotated"' in page and ">Secret rotated</a>" in page
    assert "bens" not in page

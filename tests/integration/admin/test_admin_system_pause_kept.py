"""A manual pause over a system pause keeps the system's reason
(docs/concepts/pause-and-resume.md "Paused by the system").

A job pauses itself after 2 consecutive failed runs, delivered by the
worker's own code to a real receiver that answers 500. Its owner then pauses
it again, with a note of their own, from the admin's pause form and through
the API. The system's reason stays: in the job row (``paused_by`` is
``system``, ``system_pause_note`` the reason), the jobs list's "Paused by the
system" filter and the dashboard card, the job page's header, the API's job,
and the job's events. A resume clears both.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from jobs.models import JobEvent
from runs import job_verbs
from tests.admin_support import deliver
from tests.factories import make_job
from tests.integration.api.support import token_client

pytestmark = pytest.mark.django_db

STREAK_NOTE = "Paused automatically after 2 consecutive failed runs."
JOBS = reverse("admin:jobs_job_changelist")


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def header(client, job) -> str:
    page = client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    found = re.search(r'<div class="punctual-status[^>]*id="job-status">.*?\n</div>', page, re.S)
    assert found, page
    return text(found.group(0))


def system_paused_names(client) -> set[str]:
    page = client.get(JOBS, {"paused_by": "system"}).content.decode()
    return set(re.findall(r'class="field-name"><a [^>]*>([^<]+)</a>', page))


@pytest.fixture
def streak_paused(ann, receiver_url):
    job = make_job(
        ann,
        name="flaky",
        url=receiver_url("status/500"),
        max_attempts=1,
        pause_after_failures=2,
    )
    deliver(job, times=2)
    job.refresh_from_db()
    assert (job.state, job.paused_by, job.pause_note) == ("paused", "system", STREAK_NOTE)
    assert job.system_pause_note == STREAK_NOTE
    return job


def assert_system_reason_kept(job, client, owner_note: str, how: str) -> None:
    job.refresh_from_db()
    assert (job.state, job.paused_by) == ("paused", "system")
    assert (job.system_pause_note, job.pause_note) == (STREAK_NOTE, owner_note)
    # The list filter and the dashboard card.
    assert system_paused_names(client) == {"flaky"}
    card = client.get(reverse("admin:index")).content.decode()
    assert STREAK_NOTE in card
    # The job page: the system's reason first, then the owner's note.
    words = header(client, job)
    assert words.startswith(f"{STREAK_NOTE} · then paused by you{how}: “{owner_note}” · since ")
    # The job's events: the owner's pause says the system's stays.
    event = JobEvent.objects.filter(job=job, action="paused").order_by("-created_at").first()
    assert event.channel != "system"
    assert event.changes["system_pause_kept"] == STREAK_NOTE
    assert event.changes["pause_note"][1] == owner_note
    assert JobEvent.objects.filter(job=job, action="paused", channel="system").count() == 1


def test_an_owner_pause_in_the_admin_keeps_the_system_s_reason(ann, ann_client, streak_paused):
    job = streak_paused
    form = ann_client.get(reverse("admin:jobs_job_pause", args=[job.pk])).content.decode()
    # The note field is the owner's own: it does not start with the system's.
    assert f'value="{STREAK_NOTE}"' not in form
    answer = ann_client.post(
        reverse("admin:jobs_job_pause", args=[job.pk]),
        {"note": "checking the receiver", "resume_at": "", "zone": "UTC"},
    )
    assert answer.status_code == 302
    assert_system_reason_kept(job, ann_client, "checking the receiver", "")
    # The list's state column names both.
    page = ann_client.get(JOBS).content.decode()
    assert f"{STREAK_NOTE} · checking the receiver" in page
    assert "Paused (auto)" in page


def test_an_owner_pause_through_the_api_keeps_the_system_s_reason(ann, ann_client, streak_paused):
    job = streak_paused
    api = token_client(ann)
    answer = api.post(f"/api/v1/jobs/{job.pk}/pause/", {"note": "on it"}, format="json")
    assert answer.status_code == 200, answer.content
    assert_system_reason_kept(job, ann_client, "on it", " through the API")
    body = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert (body["system_pause_note"], body["pause_note"]) == (STREAK_NOTE, "on it")
    # Paused again, and again: still the system's.
    job_verbs.pause(job, note="still on it", actor=ann, channel="api")
    assert_system_reason_kept(job, ann_client, "still on it", " through the API")


def test_a_resume_clears_the_system_s_reason_and_the_owner_s_note(ann, ann_client, streak_paused):
    job = streak_paused
    job_verbs.pause(job, note="on it", actor=ann, channel="admin")
    job_verbs.resume(job, actor=ann, channel="admin")
    job.refresh_from_db()
    assert (job.state, job.paused_by, job.system_pause_note, job.pause_note) == (
        "active",
        "",
        "",
        "",
    )
    assert system_paused_names(ann_client) == set()
    # An owner's pause of the job now active is the owner's alone.
    job_verbs.pause(job, note="holiday", actor=ann, channel="admin")
    job.refresh_from_db()
    assert (job.paused_by, job.system_pause_note, job.pause_note) == ("admin", "", "holiday")
    assert system_paused_names(ann_client) == set()
    assert header(ann_client, job).startswith("Paused by you: “holiday” · since ")


def test_a_job_paused_for_an_unreadable_schedule_is_paused_by_the_system(ann, ann_client):
    job = make_job(ann, name="flaky")
    assert job_verbs.pause_unreadable(job.pk, problem="no time zone 'Mars/Olympus'")
    job.refresh_from_db()
    assert job.paused_by == "system"
    assert job.system_pause_note == job.pause_note
    assert job.pause_note.startswith("paused by the system: its schedule cannot be read")
    assert system_paused_names(ann_client) == {"flaky"}

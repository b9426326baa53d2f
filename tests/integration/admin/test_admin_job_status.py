"""The job page's status header (state and why, the last runs, the last
failure), the pause form (a note and a resume time, from the job page and
from the list), and the confirmation before a secret rotation."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

import pytest
from django.urls import reverse

from console.display import run_url
from console.forms import PAUSE_NOTE_MAX
from console.job_status import job_status
from core.db import db_now
from jobs.models import Job, JobEvent
from runs import job_verbs
from runs.after_attempt import GONE_NOTE
from runs.models import Run
from tests.admin_support import deliver, make_run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

PARIS = zoneinfo.ZoneInfo("Europe/Paris")


def change_url(job: Job) -> str:
    return reverse("admin:jobs_job_change", args=[job.pk])


def pause_url(job: Job) -> str:
    return reverse("admin:jobs_job_pause", args=[job.pk])


def header(client, job: Job) -> str:
    page = client.get(change_url(job)).content.decode()
    found = re.search(r'<div class="punctual-status[^>]*id="job-status">.*?\n</div>', page, re.S)
    assert found, page
    return found.group(0)


def text(html: str) -> str:
    """The words of some HTML, as a reader sees them."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


# -- the header ----------------------------------------------------------------------


def test_the_header_of_an_active_job_comes_first_and_says_when_it_fires(ann, ann_client):
    job = make_job(ann, cron="*/10 * * * *", timezone="Europe/Paris")
    for k in range(25):
        make_run(job, state="succeeded" if k % 5 else "missed", ago=600 * (25 - k))
    page = ann_client.get(change_url(job)).content.decode()
    assert page.index('id="job-status"') < page.index('id="job_form"')

    words = text(header(ann_client, job))
    local = job.next_fire_at.astimezone(PARIS)
    assert words.startswith("Active · next fire")
    # (The date is shown too when the fire is on another day than today.)
    assert f"{job.next_fire_at:%H:%M:%S} UTC (" in words
    assert f"{local:%H:%M} Europe/Paris, in " in words
    assert "Pause…" in words and "Resume" not in words and "Last failure" not in words
    squares = re.findall(r'punctual-sq st-(\w+)" href="([^"]+)"', header(ann_client, job))
    newest = Run.objects.filter(job=job).order_by("-scheduled_at")[:20]
    assert [href for _, href in squares] == [run_url(r.pk) for r in reversed(newest)]


def test_a_failing_active_job_shows_its_streak_and_its_last_failure(ann, ann_client, receiver_url):
    job = make_job(ann, url=receiver_url("status/503"), max_attempts=1, pause_after_failures=5)
    deliver(job, times=2)
    html = header(ann_client, job)
    words = text(html)
    assert words.startswith("Active, failing · next fire")
    assert "2 failed runs in a row (it pauses itself at 5)" in words
    last = Run.objects.filter(job=job).order_by("-scheduled_at").first()
    assert f'href="{run_url(last.pk)}" id="last-failure-link"' in html
    assert "Failed · HTTP 503 Service Unavailable · attempts exhausted" in words
    assert 'class="punctual-status punctual-status-failed"' in html


def test_a_job_paused_by_its_failure_streak_says_so_at_the_top(ann, ann_client, receiver_url):
    job = make_job(ann, url=receiver_url("status/500"), max_attempts=1, pause_after_failures=2)
    deliver(job, times=2)
    job.refresh_from_db()
    assert job.state == "paused"
    words = text(header(ann_client, job))
    assert words.startswith("Paused automatically after 2 consecutive failed runs. · since ")
    assert "stays paused until resumed · 2 failed runs in a row" in words
    assert "Resume" in words and "Edit pause…" in words
    assert "Last failure:" in words and "HTTP 500" in words


def test_a_job_paused_by_a_410_says_so_with_the_answer(ann, ann_client, receiver_url):
    job = make_job(ann, url=receiver_url("status/410"))
    deliver(job)
    job.refresh_from_db()
    assert (job.state, job.pause_note) == ("paused", GONE_NOTE)
    words = text(header(ann_client, job))
    assert words.startswith(GONE_NOTE + " · since ")
    assert (
        "Failed · HTTP 410 Gone: the receiver says this URL no longer exists · permanent" in words
    )


def test_a_job_paused_with_a_note_names_who_paused_it_and_when_it_resumes(
    ann, ann_client, root_client
):
    job = make_job(ann, timezone="Europe/Paris")
    resume_at = db_now() + dt.timedelta(days=2)
    job_verbs.pause(job, note="deploy", resume_at=resume_at, actor=ann, channel="admin")
    words = text(header(ann_client, job))
    local = resume_at.astimezone(PARIS)
    assert words.startswith("Paused by you: “deploy” · since ")
    resumes = f"resumes at {resume_at:%Y-%m-%d %H:%M:%S} UTC ({local:%Y-%m-%d %H:%M} Europe/Paris"
    assert resumes + ", in 1 d 23 h)" in words
    assert text(header(root_client, job)).startswith("Paused by ann: “deploy”")

    job_verbs.pause(job, note="from a script", actor=ann, channel="api")
    assert text(header(ann_client, job)).startswith("Paused by you through the API: “from a")


def test_a_deleted_job_reads_deleted(ann):
    job = make_job(ann)
    job_verbs.soft_delete(job, actor=ann, channel="admin")
    job.refresh_from_db()
    status = job_status(job, [], db_now(), ann)
    assert (status.state, status.headline) == ("deleted", "Deleted")
    assert status.details[0].startswith("since ")


# -- pausing from the job page ---------------------------------------------------------


def test_the_pause_form_pauses_with_a_note_and_a_resume_time_in_the_jobs_zone(ann, ann_client):
    job = make_job(ann, timezone="Europe/Paris")
    form = ann_client.get(pause_url(job)).content.decode()
    assert 'id="pause-form"' in form and "Europe/Paris (the job&#x27;s time zone)" in form
    job.refresh_from_db()
    assert job.state == "active"  # a GET only asks

    when = (db_now() + dt.timedelta(days=3)).astimezone(PARIS).replace(second=0, microsecond=0)
    answer = ann_client.post(
        pause_url(job),
        {"note": "deploy", "resume_at": f"{when:%Y-%m-%d %H:%M}", "zone": "Europe/Paris"},
    )
    assert answer.status_code == 302 and answer["Location"] == change_url(job)
    job.refresh_from_db()
    assert (job.state, job.pause_note, job.resume_at) == ("paused", "deploy", when)
    event = JobEvent.objects.get(job=job, action="paused")
    assert (event.channel, event.actor) == ("admin", ann)


def test_a_resume_time_in_utc_or_with_an_offset_is_read_as_written(ann, ann_client):
    job = make_job(ann, timezone="Europe/Paris")
    when = (db_now() + dt.timedelta(days=1)).replace(second=0, microsecond=0)
    ann_client.post(pause_url(job), {"resume_at": f"{when:%Y-%m-%d %H:%M}", "zone": "UTC"})
    job.refresh_from_db()
    assert job.resume_at == when and job.pause_note == ""

    later = when + dt.timedelta(hours=5)
    typed = later.astimezone(dt.timezone(dt.timedelta(hours=-3))).isoformat()
    ann_client.post(pause_url(job), {"resume_at": typed, "zone": "Europe/Paris"})
    job.refresh_from_db()
    assert job.resume_at == later


def test_editing_a_pause_keeps_when_it_began(ann, ann_client):
    job = make_job(ann)
    job_verbs.pause(job, note="first", actor=ann, channel="admin")
    job.refresh_from_db()
    began = job.paused_at
    form = ann_client.get(pause_url(job)).content.decode()
    assert "Change the pause of" in form and 'value="first"' in form
    answer = ann_client.post(pause_url(job), {"note": "second", "resume_at": "", "zone": "UTC"})
    assert answer.status_code == 302
    job.refresh_from_db()
    assert (job.state, job.pause_note, job.paused_at) == ("paused", "second", began)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"resume_at": "2020-01-01 09:00", "zone": "UTC"}, "resume_at", "Must be in the future"),
        ({"note": "x" * (PAUSE_NOTE_MAX + 1)}, "note", "no more than 500 characters"),
        ({"note": "de\x00ploy"}, "note", "NUL characters"),
        ({"resume_at": "2030-01-01\x0009:00", "zone": "UTC"}, "resume_at", "NUL characters"),
        ({"resume_at": "next tuesday", "zone": "UTC"}, "resume_at", "Not a date and time"),
        ({"resume_at": "2030-13-01 09:00", "zone": "UTC"}, "resume_at", "Not a date and time"),
        ({"resume_at": "9999-01-01 09:00", "zone": "UTC"}, "resume_at", "between 1970"),
        ({"resume_at": "2030-03-31 02:30", "zone": "Europe/Paris"}, "resume_at", "does not exist"),
        ({"resume_at": "2030-01-01 09:00"}, "zone", "Choose the time zone"),
        ({"resume_at": "2030-01-01 09:00", "zone": "Mars/Olympus"}, "zone", "Select a valid"),
    ],
)
def test_bad_pause_input_is_a_form_error_and_writes_nothing(ann, ann_client, data, field, message):
    job = make_job(ann, timezone="Europe/Paris")
    answer = ann_client.post(pause_url(job), data)
    assert answer.status_code == 400
    page = answer.content.decode()
    errors = re.search(rf'field-{field}">\s*<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', page, re.S)
    assert errors and message in text(errors.group(1)), page
    job.refresh_from_db()
    assert (job.state, job.version) == ("active", 1)
    assert not JobEvent.objects.filter(job=job, action="paused").exists()


# -- pausing from the list -------------------------------------------------------------


def list_action(client, *jobs: Job):
    return client.post(
        reverse("admin:jobs_job_changelist"),
        {"action": "pause_jobs", "_selected_action": [str(j.pk) for j in jobs]},
    )


def pause_selected(client, ids: list[str], **fields):
    return client.post(
        reverse("admin:jobs_job_pause_selected"), {"_selected_action": ids, **fields}
    )


def test_the_list_action_asks_for_a_note_then_pauses_the_active_jobs(ann, ann_client):
    paris = make_job(ann, name="paris", timezone="Europe/Paris")
    tokyo = make_job(ann, name="tokyo", timezone="Asia/Tokyo")
    done = make_job(ann, name="done")
    job_verbs.pause(done, note="kept")
    form = list_action(ann_client, paris, tokyo, done).content.decode()
    assert 'id="pause-form"' in form
    assert re.findall(r"<li>(\w+)</li>", form) == ["paris", "tokyo"]
    assert 'id="already-paused">done<' in form
    # Two zones among the selection: UTC is preselected, each zone is offered.
    assert '<option value="UTC" selected>' in form
    assert "Asia/Tokyo (the job&#x27;s time zone)" in form

    when = db_now() + dt.timedelta(hours=6)
    answer = pause_selected(
        ann_client,
        [str(j.pk) for j in (paris, tokyo, done)],
        note="migration",
        resume_at=when.isoformat(),
        zone="UTC",
    )
    assert answer.status_code == 302
    for job in (paris, tokyo):
        job.refresh_from_db()
        assert (job.state, job.pause_note, job.resume_at) == ("paused", "migration", when)
    done.refresh_from_db()
    assert (done.pause_note, done.resume_at) == ("kept", None)
    page = ann_client.get(answer["Location"]).content.decode()
    assert "Paused 2 jobs (1 already paused)." in page


def test_the_list_forms_errors_keep_the_selection_and_write_nothing(ann, ann_client):
    job = make_job(ann)
    answer = pause_selected(ann_client, [str(job.pk)], note="a\x00b", resume_at="", zone="UTC")
    assert answer.status_code == 400
    page = answer.content.decode()
    assert "NUL characters" in page
    assert f'name="_selected_action" value="{job.pk}"' in page
    job.refresh_from_db()
    assert (job.state, job.version) == ("active", 1)


def test_the_list_form_reaches_only_the_owners_own_jobs(ann, ben, ann_client):
    theirs = make_job(ben)
    answer = pause_selected(ann_client, [str(theirs.pk)], note="", zone="UTC")
    assert answer.status_code == 302
    theirs.refresh_from_db()
    assert (theirs.state, theirs.version) == ("active", 1)

    refused = pause_selected(ann_client, ["not-an-id"], note="")
    assert refused.status_code == 400
    assert "not an id" in refused.content.decode()


# -- rotating the secret ---------------------------------------------------------------


def test_rotating_again_within_the_overlap_warns_first(ann, ann_client):
    job = make_job(ann)
    url = reverse("admin:jobs_job_rotate_secret", args=[job.pk])
    assert 'id="rotate-overlap"' not in ann_client.get(url).content.decode()
    ann_client.post(url)
    warning = ann_client.get(url).content.decode()
    assert 'id="rotate-overlap"' in warning and "Rotating now stops it at once" in warning

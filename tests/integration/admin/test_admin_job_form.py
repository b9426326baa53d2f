"""The job form and the job page: fieldsets, validation, next fires with DST
flags, risk warnings, the secret shown once, rotate and test-delivery buttons,
audit events and the run history."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.urls import reverse

from core.db import db_now
from dispatch.webhooks import Delivery, build_request
from jobs import crypto
from jobs.models import Job, JobEvent
from runs import job_verbs
from runs.models import Run
from tests.admin_support import add_attempt, make_run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

ADD = reverse("admin:jobs_job_add")


# A one-off's time, and a start, as the admin's split date and time inputs take them.
ONE_OFF = {"interval_seconds": "", "run_at_0": "2027-01-01", "run_at_1": "12:00:00"}
START = {"start_at_0": "2027-01-01", "start_at_1": "00:00:00"}


def change_url(job: Job) -> str:
    return reverse("admin:jobs_job_change", args=[job.pk])


def form_data(**overrides) -> dict:
    data = {
        "name": "nightly-report",
        "description": "",
        "cron": "",
        "interval_seconds": "300",
        "timezone": "UTC",
        "start_at_0": "",
        "start_at_1": "",
        "target_kind": "webhook",
        "url": "https://93.184.215.14/hook",
        "payload": '{"report": "daily"}',
        "timeout_seconds": "30",
        "max_attempts": "3",
        "retry_backoff_seconds": "10",
        "jitter_seconds": "0",
        "misfire_policy": "skip",
        "max_catchup": "3",
        "misfire_grace_seconds": "60",
        "overlap_policy": "skip",
        "pause_after_failures": "",
    }
    data.update(overrides)
    return data


def errors(response) -> dict[str, list[str]]:
    assert response.status_code == 200, "expected the form back, with errors"
    form = response.context["adminform"].form
    return {field: list(messages) for field, messages in form.errors.items()}


def test_the_form_groups_fields_under_titled_fieldsets(ann_client):
    page = ann_client.get(ADD).content.decode()
    titles = re.findall(r'<h2 id="[^"]*" class="fieldset-heading">([^<]+)</h2>', page)
    assert titles == ["Schedule", "Target", "Delivery and retries", "Policies", "Alerts"]


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"cron": "*/5 * * * *"}, "cron", "exactly one of cron, interval and run at"),
        ({"interval_seconds": ""}, "interval_seconds", "exactly one of cron, interval and run"),
        ({"interval_seconds": ""}, "run_at", "exactly one of cron, interval and run at"),
        ({**ONE_OFF, "interval_seconds": "300"}, "run_at", "exactly one of cron, interval"),
        ({**ONE_OFF, **START}, "start_at", "leave start_at empty"),
        ({**START, "end_at_0": "2027-01-01", "end_at_1": "00:00:00"}, "end_at", "after start_at"),
        ({**START, "end_at_0": "2026-12-01", "end_at_1": "00:00:00"}, "end_at", "after start_at"),
        ({**ONE_OFF, "end_at_0": "2027-01-01", "end_at_1": "12:00:00"}, "end_at", "after run_at"),
        ({"end_at_0": "someday", "end_at_1": "00:00:00"}, "end_at", "Enter a valid date"),
        ({**ONE_OFF, "run_at_0": "9999-12-31", "run_at_1": "23:59:59"}, "run_at", "between 1970"),
        ({"cron": "0 0 30 2 *", "interval_seconds": ""}, "cron", "can never fire"),
        ({"cron": "0 0 * *", "interval_seconds": ""}, "cron", "has 4 fields"),
        ({"interval_seconds": "0"}, "interval_seconds", "greater than or equal to 1"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Not a valid time zone"),
        ({"url": "http://127.0.0.1:8000/hook"}, "url", "non-public address"),
        ({"url": "http://169.254.169.254/latest"}, "url", "non-public address"),
        ({"url": "ftp://93.184.215.14/x"}, "url", "http"),
        ({"url": ""}, "url", "needs a URL"),
        ({"payload": "[1, 2]"}, "payload", "Must be a JSON object"),
        ({"timeout_seconds": "901"}, "timeout_seconds", "less than or equal to 900"),
        ({"max_attempts": "21"}, "max_attempts", "less than or equal to 20"),
        ({"jitter_seconds": "-1"}, "jitter_seconds", "greater than or equal to 0"),
    ],
)
def test_invalid_jobs_are_refused_next_to_the_field(ann_client, overrides, field, fragment):
    response = ann_client.post(ADD, form_data(**overrides))
    found = errors(response)
    assert field in found, found
    assert any(fragment in message for message in found[field]), found[field]
    assert not Job.objects.exists()


def test_private_targets_are_accepted_when_the_setting_allows_them(ann_client, settings):
    settings.PUNCTUAL_ALLOW_PRIVATE_TARGETS = True
    response = ann_client.post(ADD, form_data(url="http://127.0.0.1:8000/hook"))
    assert response.status_code == 302
    assert Job.objects.get().url == "http://127.0.0.1:8000/hook"


def test_a_second_job_with_the_same_name_is_refused_for_the_same_owner_only(ann, ben, ann_client):
    make_job(ann, name="nightly-report")
    make_job(ben, name="taken-by-ben")
    assert "name" in errors(ann_client.post(ADD, form_data()))
    assert ann_client.post(ADD, form_data(name="taken-by-ben")).status_code == 302


def test_creating_a_job_shows_its_secret_once_with_a_verification_snippet(ann, ann_client):
    response = ann_client.post(ADD, form_data(), follow=True)
    job = Job.objects.get()
    secret = crypto.decrypt(job.secret_encrypted)
    assert response.redirect_chain[-1][0] == change_url(job)
    page = response.content.decode()
    assert f'<code class="secret" id="secret-value">{secret}</code>' in page
    assert "from standardwebhooks.webhooks import Webhook" in page
    assert secret.startswith("whsec_")

    again = ann_client.get(change_url(job)).content.decode()
    assert secret not in again and "whsec_" not in again
    assert "Hidden. A secret is shown once" in again


def test_the_verification_snippet_verifies_a_real_delivery(ann, ann_client):
    response = ann_client.post(ADD, form_data(), follow=True)
    snippet = response.context["verify_snippet"]
    job = Job.objects.get()
    delivery = Delivery(
        run_id="3f1c1c5e-0000-4000-8000-000000000001",
        job_id=str(job.pk),
        job_name=job.name,
        scheduled_at=db_now(),
        kind="scheduled",
        attempt=1,
        payload=job.payload,
        url=job.url,
        secrets=job.signing_secrets(db_now()),
        timeout_seconds=5,
    )
    headers, body = build_request(delivery, dt.datetime.now(dt.UTC))
    namespace: dict = {}
    exec(snippet, namespace)  # the snippet exactly as the owner copies it
    event = namespace["verify"](body, headers)
    assert event["data"]["run_id"] == delivery.run_id
    with pytest.raises(namespace["WebhookVerificationError"]):
        namespace["verify"](body + b" ", headers)


def test_the_job_page_lists_the_next_ten_fires_in_its_zone_and_flags_dst(ann, ann_client):
    # 02:30 does not exist in Berlin on 2030-03-31: that fire runs at 03:00 CEST.
    start = dt.datetime(2030, 3, 28, tzinfo=dt.UTC)
    job = make_job(
        ann, cron="30 2 * * *", timezone="Europe/Berlin", start_at=start, interval_seconds=None
    )
    page = ann_client.get(change_url(job)).content.decode()
    table = re.search(r'<table class="punctual-fires">.*?</table>', page, re.S).group(0)
    fires = re.findall(r"<tr( class=\"punctual-dst\")?><td>([^<]+)</td><td>([^<]+)</td>", table)
    assert len(fires) == 10
    assert fires[0][1:] == ("Thu 2030-03-28 02:30:00", "UTC+01:00 (CET)")
    assert fires[3][1:] == ("Sun 2030-03-31 03:00:00", "UTC+02:00 (CEST)")
    assert fires[4][1:] == ("Mon 2030-04-01 02:30:00", "UTC+02:00 (CEST)")
    # Within 24 hours of the change (01:00 UTC on the 31st), either side.
    flagged = [local for dst, local, _ in fires if dst]
    assert flagged == [
        "Sat 2030-03-30 02:30:00",
        "Sun 2030-03-31 03:00:00",
        "Mon 2030-04-01 02:30:00",
    ]
    assert "DST change within a day" in table


def test_the_job_page_warns_about_risky_cron_patterns(ann, ann_client):
    either = make_job(ann, cron="0 0 13 * 5", interval_seconds=None)
    gap = make_job(ann, cron="30 2 * * *", timezone="Europe/Berlin", interval_seconds=None)
    assert "EITHER" in ann_client.get(change_url(either)).content.decode()
    assert "does not exist in Europe/Berlin" in ann_client.get(change_url(gap)).content.decode()


def test_the_job_page_warns_when_runs_take_longer_than_the_interval(ann, ann_client):
    job = make_job(ann, interval_seconds=2)
    for ago in (30, 20, 10):
        add_attempt(make_run(job, ago=ago), duration_ms=5000)
    page = ann_client.get(change_url(job)).content.decode()
    assert "Runs take about 5.0 s (the median of the last 3 attempts)" in page
    assert "longer than the 2.0 s between fires" in page


def test_saving_a_new_schedule_reschedules_and_records_what_changed(ann, ann_client):
    job = make_job(ann, name="nightly-report", interval_seconds=300)
    before = job.next_fire_at
    data = form_data(interval_seconds="3600", description="now hourly")
    response = ann_client.post(change_url(job), data)
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.interval_seconds == 3600
    assert job.next_fire_at != before and job.version == 2
    event = JobEvent.objects.get(job=job, action="updated")
    assert (event.channel, event.actor) == ("admin", ann)
    assert event.changes["interval_seconds"] == [300, 3600]
    assert event.changes["description"] == ["", "now hourly"]
    assert "secret" not in str(event.changes) and "whsec_" not in str(event.changes)


def test_the_created_event_never_holds_the_secret(ann, ann_client):
    ann_client.post(ADD, form_data())
    event = JobEvent.objects.get(action="created")
    assert (event.channel, event.actor) == ("admin", ann)
    assert event.changes["interval_seconds"] == 300
    assert "whsec_" not in str(event.changes)


def test_rotating_the_secret_shows_the_new_one_once(ann, ann_client):
    job = make_job(ann)
    old = crypto.decrypt(job.secret_encrypted)
    response = ann_client.post(reverse("admin:jobs_job_rotate_secret", args=[job.pk]), follow=True)
    job.refresh_from_db()
    new = crypto.decrypt(job.secret_encrypted)
    assert new != old
    assert crypto.decrypt(job.previous_secret_encrypted) == old
    assert new in response.content.decode()
    assert new not in ann_client.get(change_url(job)).content.decode()
    assert JobEvent.objects.filter(job=job, action="secret_rotated", channel="admin").exists()


def test_rotate_asks_first_and_test_delivery_needs_a_post(ann, ann_client):
    job = make_job(ann)
    secret = job.secret_encrypted
    confirm = ann_client.get(reverse("admin:jobs_job_rotate_secret", args=[job.pk]))
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert 'id="rotate-form"' in page and "Yes, rotate" in page and "whsec_" not in page
    job.refresh_from_db()
    assert (job.secret_encrypted, job.version) == (secret, 1)
    assert not JobEvent.objects.filter(job=job, action="secret_rotated").exists()
    assert ann_client.get(reverse("admin:jobs_job_test_delivery", args=[job.pk])).status_code == 405


def test_send_test_delivery_makes_a_one_attempt_test_run_and_follows_it(ann, ann_client):
    job = make_job(ann, max_attempts=5)
    response = ann_client.post(reverse("admin:jobs_job_test_delivery", args=[job.pk]))
    run = Run.objects.get(job=job)
    assert (run.kind, run.state, run.max_attempts) == ("test", "pending", 1)
    assert response["Location"] == reverse("admin:runs_run_change", args=[run.pk]) + "?watch=1"
    page = ann_client.get(response["Location"]).content.decode()
    assert '<meta http-equiv="refresh" content="2">' in page
    assert JobEvent.objects.filter(job=job, action="test_delivery", channel="admin").exists()


def test_the_job_page_shows_audit_events_and_the_run_history_strip(ann, ann_client):
    job = make_job(ann)
    for ago, state in ((300, "succeeded"), (200, "failed"), (100, "succeeded")):
        make_run(job, state=state, ago=ago)
    job_verbs.pause(job, note="deploy", actor=ann, channel="admin")
    page = ann_client.get(change_url(job)).content.decode()
    history = re.search(r'<div class="punctual-history">.*?</div></div>', page, re.S).group(0)
    assert re.findall(r"punctual-sq st-(\w+)", history) == ["succeeded", "failed", "succeeded"]
    events = re.search(r'<table class="punctual-events">.*?</table>', page, re.S).group(0)
    assert "paused" in events and "Admin" in events and "ann" in events
    assert "All runs of this job" in page


def test_pause_and_resume_buttons_on_the_job_page(ann, ann_client):
    job = make_job(ann)
    ann_client.post(reverse("admin:jobs_job_pause", args=[job.pk]))
    job.refresh_from_db()
    assert job.state == "paused"
    ann_client.post(reverse("admin:jobs_job_resume", args=[job.pk]))
    job.refresh_from_db()
    assert job.state == "active"


def test_superusers_choose_the_owner_of_a_new_job(ann, root_client):
    response = root_client.post(ADD, form_data(owner=str(ann.pk)))
    assert response.status_code == 302
    assert Job.objects.get().owner == ann


def test_saving_over_a_change_made_meanwhile_is_refused(ann, ann_client):
    job = make_job(ann, name="nightly-report")
    loaded_at = job.version
    job_verbs.pause(job, note="paused through the API meanwhile")
    response = ann_client.post(
        change_url(job), form_data(description="edit", expected_version=str(loaded_at))
    )
    assert "changed elsewhere since this page was loaded" in response.content.decode()
    job.refresh_from_db()
    assert (job.state, job.description) == ("paused", "")


def test_an_edit_writes_only_the_fields_it_changed(ann, ann_client):
    job = make_job(ann, name="nightly-report", interval_seconds=300)
    # The worker counts a failure while the owner edits (a guarded update,
    # which does not bump the version).
    Job.objects.filter(pk=job.pk).update(consecutive_failures=4)
    response = ann_client.post(
        change_url(job), form_data(description="edited", expected_version=str(job.version))
    )
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.description, job.consecutive_failures, job.version) == ("edited", 4, 2)


def test_the_new_secret_waits_in_the_session_encrypted(ann, ann_client):
    ann_client.post(ADD, form_data())
    waiting = ann_client.session["punctual.new_secrets"]
    assert len(waiting) == 1
    assert "whsec_" not in str(waiting)


def test_a_superuser_sees_an_existing_jobs_owner_but_cannot_change_it(root_client, ann):
    """Its runs carry a copy of the owner (the claim shares batches by it)."""
    job = make_job(ann)
    page = root_client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    assert 'name="owner"' not in page
    assert "ann" in page
    add_page = root_client.get(reverse("admin:jobs_job_add")).content.decode()
    assert 'name="owner"' in add_page


def test_a_new_jobs_payload_box_holds_the_empty_object(ann_client):
    """Not "null", which the form would refuse as not an object when saved as is."""
    page = ann_client.get(reverse("admin:jobs_job_add")).content.decode()
    box = re.search(r"<textarea name=\"payload\"[^>]*>([^<]*)</textarea>", page)
    assert box is not None and box.group(1).strip() == "{}", box


def test_a_one_off_is_saved_from_the_form_and_its_page_says_it_has_ended(ann, ann_client):
    response = ann_client.post(
        ADD, form_data(interval_seconds="", run_at_0="2026-01-01", run_at_1="12:00:00")
    )
    assert response.status_code == 302, errors(response)
    job = Job.objects.get()
    assert job.run_at == dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC) and job.next_fire_at is None
    page = ann_client.get(change_url(job)).content.decode()
    assert "None: this schedule has ended" in page
    assert "run_at is already past" in page
    assert "Finished" in page


def test_an_end_saved_from_the_form_cuts_the_next_fires(ann, ann_client):
    job = make_job(ann, cron="0 * * * *")
    end = db_now() + dt.timedelta(hours=3)
    response = ann_client.post(
        change_url(job),
        form_data(
            name=job.name,
            cron="0 * * * *",
            interval_seconds="",
            end_at_0=f"{end:%Y-%m-%d}",
            end_at_1=f"{end:%H:%M:%S}",
            expected_version=str(job.version),
        ),
    )
    assert response.status_code == 302, errors(response)
    job.refresh_from_db()
    assert job.end_at == end.replace(microsecond=0)
    page = ann_client.get(change_url(job)).content.decode()
    table = re.search(r'<table class="punctual-fires">.*?</table>', page, re.S).group(0)
    fires = re.findall(r"<td>(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC</td>", table)
    assert len(fires) == 3, fires

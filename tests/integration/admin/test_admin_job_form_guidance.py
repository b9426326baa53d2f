"""What the job form tells its user before saving: the live preview's box and
script, the API answer the script reads (through the admin's session and
CSRF token), the zone suggestions, labels and help of the policy fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

from jobs import schedules
from jobs.models import Job
from tests.factories import make_job
from tests.integration.admin.test_admin_job_form import ADD, change_url, errors, form_data

pytestmark = pytest.mark.django_db

PREVIEW = reverse("schedule-preview")


def test_the_add_form_has_the_preview_box_and_serves_its_script(ann_client):
    page = ann_client.get(ADD).content.decode()
    box = re.search(r'<div id="schedule-preview"[^>]*>', page).group(0)
    assert f'data-url="{PREVIEW}"' in box and 'data-on-load="true"' in box
    assert re.search(r'<script src="[^"]*/punctual/job_form\.js"', page)
    body = Path(finders.find("punctual/job_form.js")).read_text()
    # Debounced well above the API's per-owner rate (docs/guides/api.md "Rate limits").
    debounce = int(re.search(r"var DEBOUNCE_MS = (\d+);", body).group(1))
    assert debounce >= 300
    assert "X-CSRFToken" in body


def test_a_jobs_page_waits_for_an_edit_before_previewing(ann, ann_client):
    page = ann_client.get(change_url(make_job(ann))).content.decode()
    assert 'data-on-load="false"' in page
    assert "Edit the schedule to preview it here before saving." in page


def test_the_preview_answers_the_admin_session_with_its_csrf_token(ann):
    client = Client(enforce_csrf_checks=True)
    client.force_login(ann)
    body = {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "count": 2}
    refused = client.post(PREVIEW, body, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]

    page = client.get(ADD).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    answer = client.post(
        PREVIEW,
        {**body, "after": "2026-03-28T12:00:00Z"},
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert data["description"] == "At 02:30, Europe/Berlin"
    # 02:30 does not exist in Berlin on 2026-03-29: the fire is at 03:00 CEST.
    assert data["fires"] == ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    assert data["local_fires"] == ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
    assert any("02:30 does not exist in Europe/Berlin" in w for w in data["warnings"])

    invalid = client.post(
        PREVIEW,
        {"cron": "61 * * * *"},
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert invalid.status_code == 400 and list(invalid.json()) == ["cron"]


def test_zone_suggestions_are_canonical_and_a_stored_alias_stays_valid(ann, ann_client):
    page = ann_client.get(ADD).content.decode()
    datalist = re.search(r'<datalist id="punctual-zones">(.*?)</datalist>', page, re.S).group(1)
    zones = re.findall(r'<option value="([^"]+)">', datalist)
    assert zones[0] == "UTC" and "Europe/Berlin" in zones and "America/New_York" in zones
    for alias in ("US/Pacific", "Europe/Kiev", "Factory", "GMT", "localtime"):
        assert alias not in zones
    assert zones == list(schedules.canonical_timezones())
    assert 'list="punctual-zones"' in page

    # An alias is not suggested, yet it is a zone the API accepts: a job stored
    # with one keeps it through an edit.
    job = make_job(ann, name="legacy", cron="0 9 * * *", timezone="US/Pacific")
    data = form_data(name="legacy", cron="0 9 * * *", interval_seconds="", timezone="US/Pacific")
    response = ann_client.post(change_url(job), {**data, "expected_version": job.version})
    assert response.status_code == 302, errors(response)
    job.refresh_from_db()
    assert job.timezone == "US/Pacific"
    assert (
        "Not a valid time zone"
        in errors(ann_client.post(ADD, form_data(timezone="US/Nowhere")))["timezone"][0]
    )


def test_labels_and_help_say_what_each_policy_does(ann_client):
    form = ann_client.get(ADD).context["adminform"].form
    assert form.fields["url"].label == "URL"
    help_of = {name: str(form.fields[name].help_text) for name in form.fields}
    assert "Skip:" in help_of["misfire_policy"] and "Catch up:" in help_of["misfire_policy"]
    for choice in ("Skip:", "Queue one:", "Allow side by side:"):
        assert choice in help_of["overlap_policy"]
    assert "Catch up" in help_of["max_catchup"]
    assert "misfire" in help_of["misfire_grace_seconds"]
    assert "offset" in help_of["jitter_seconds"]
    assert "in a row" in help_of["pause_after_failures"]
    assert "Test deliveries do not count" in help_of["pause_after_failures"]
    assert (
        "Read in UTC" in help_of["start_at"]
        and "not in the job's time zone" in (help_of["start_at"])
    )


def test_max_catchup_is_validated_even_while_its_row_is_hidden(ann_client):
    # The script hides the row under "skip"; the value is still posted and judged.
    found = errors(ann_client.post(ADD, form_data(misfire_policy="skip", max_catchup="-1")))
    assert "max_catchup" in found
    assert not Job.objects.exists()

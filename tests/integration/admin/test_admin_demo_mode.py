"""Demo mode (PUNCTUAL_DEMO=true, ``make run``) in the admin: a banner on every
page says so, and the job form allows loopback targets and refuses every other
private address next to the field, as the API does."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import Job
from tests.factories import make_job
from tests.integration.admin.test_admin_job_form import ADD, errors, form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_mode(settings):
    settings.PUNCTUAL_DEMO = True
    # Narrowed to loopback in demo mode, whatever it says.
    settings.PUNCTUAL_ALLOW_PRIVATE_TARGETS = True
    return settings


def pages(job: Job) -> list[str]:
    return [
        reverse("admin:index"),
        reverse("admin:dashboard"),
        reverse("admin:jobs_job_changelist"),
        ADD,
        reverse("admin:jobs_job_change", args=[job.pk]),
        reverse("admin:runs_run_changelist"),
        reverse("admin:password_change"),
    ]


def test_every_admin_page_shows_the_demo_banner_in_demo_mode(ann_client, ann, demo_mode):
    job = make_job(ann, name="mine")
    for path in pages(job):
        html = ann_client.get(path).content.decode()
        assert 'id="demo-banner"' in html, path
        assert "169.254.169.254</code> included, is refused" in html
        assert "http://testserver/demo/receiver/" in html


def test_no_demo_banner_outside_demo_mode(ann_client, ann, settings):
    settings.PUNCTUAL_DEMO = False
    job = make_job(ann, name="mine")
    for path in pages(job):
        assert 'id="demo-banner"' not in ann_client.get(path).content.decode(), path


@pytest.mark.parametrize(
    ("url", "address"),
    [("http://10.0.0.1/hook", "10.0.0.1"), ("http://169.254.169.254/latest", "169.254.169.254")],
)
def test_demo_mode_refuses_private_targets_next_to_the_field(ann_client, demo_mode, url, address):
    found = errors(ann_client.post(ADD, form_data(url=url)))
    assert found["url"] == [f"URL host is a non-public address ({address})"]
    assert not Job.objects.exists()


def test_demo_mode_accepts_the_catch_all_receiver_on_loopback(ann_client, demo_mode):
    url = "http://127.0.0.1:8000/demo/receiver/?status=500&delay=3"
    response = ann_client.post(ADD, form_data(url=url))
    assert response.status_code == 302
    assert Job.objects.get().url == url

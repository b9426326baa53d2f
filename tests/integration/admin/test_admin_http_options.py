"""The job form's method, body, extra headers and authentication
(docs/guides/owners.md "Calling any HTTP endpoint"): saved encrypted, never
put back in a page or an event; a bad value is a form error on its box and
nothing is saved."""

from __future__ import annotations

import pytest
from django.forms.models import model_to_dict
from django.urls import reverse

from jobs import http_options
from jobs.models import Job, JobEvent
from tests.integration.admin.test_admin_job_form import ADD, change_url, errors, form_data

pytestmark = pytest.mark.django_db

TOKEN = "tok-admin-5e1f-never-shown"
VALUE = "hv-admin-0c2d-never-shown"
PASSWORD = "pw-admin-a9b3-never-shown"


def written() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


# (what the form posts over a valid job, the box the error is on)
BAD = [
    ({"method": "FETCH"}, "method"),
    ({"method": "GET", "body_mode": "envelope"}, "body_mode"),
    ({"method": "GET", "body_mode": "payload"}, "body_mode"),
    ({"body_mode": "raw"}, "body_mode"),
    ({"headers": "X-Key"}, "headers"),
    ({"headers": "Host: example.com"}, "headers"),
    ({"headers": "webhook-id: 1"}, "headers"),
    ({"headers": "Transfer-Encoding: chunked"}, "headers"),
    ({"headers": "Proxy-Authorization: x"}, "headers"),
    ({"headers": "Bad Name: 1"}, "headers"),
    ({"headers": "X-Key: é"}, "headers"),
    ({"headers": "X-Key: 1\nx-key: 2"}, "headers"),
    ({"headers": "\n".join(f"X-{i}: 1" for i in range(21))}, "headers"),
    (
        {"headers": "Authorization: Token x", "auth_kind": "bearer", "auth_token": "t"},
        "headers",
    ),
    ({"auth_kind": "digest"}, "auth_kind"),
    ({"auth_kind": "bearer"}, "auth_token"),
    ({"auth_kind": "bearer", "auth_token": "two words"}, "auth_token"),
    ({"auth_token": "t"}, "auth_token"),
    ({"auth_kind": "basic", "auth_password": "p"}, "auth_username"),
    ({"auth_kind": "basic", "auth_username": "a:b", "auth_password": "p"}, "auth_username"),
    ({"auth_kind": "basic", "auth_username": "u"}, "auth_password"),
    ({"auth_kind": "basic", "auth_username": "u", "auth_password": "a\x07b"}, "auth_password"),
]


@pytest.mark.parametrize("overrides,field", BAD, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD)])
def test_a_bad_request_option_is_a_form_error_on_its_box_and_saves_nothing(
    ann, ann_client, overrides, field
):
    before = written()
    assert field in errors(ann_client.post(ADD, form_data(**overrides)))
    assert written() == before
    # The same on an existing job: the job stays as it was.
    ann_client.post(ADD, form_data(name="existing"))
    job = Job.objects.get(name="existing")
    snapshot, before = model_to_dict(job), written()
    data = form_data(name="existing", expected_version=str(job.version), **overrides)
    assert field in errors(ann_client.post(change_url(job), data))
    assert model_to_dict(Job.objects.get(pk=job.pk)) == snapshot
    assert written() == before


def test_the_form_saves_get_with_bearer_and_headers_and_never_shows_them_again(ann, ann_client):
    answer = ann_client.post(
        ADD,
        form_data(
            method="GET",
            body_mode="",
            headers=f"X-Api-Key: {VALUE}\nX-Team: billing",
            auth_kind="bearer",
            auth_token=TOKEN,
        ),
    )
    assert answer.status_code == 302, errors(answer)
    job = Job.objects.get(name="nightly-report")
    assert (job.method, job.body_mode, job.auth_kind) == ("GET", "none", "bearer")
    assert job.header_names == ["X-Api-Key", "X-Team"]
    assert http_options.unseal(job.auth_encrypted) == {"auth_token": TOKEN}
    assert http_options.unseal(job.headers_encrypted) == {"X-Api-Key": VALUE, "X-Team": "billing"}
    [created] = JobEvent.objects.filter(job=job)
    assert created.changes["header_names"] == ["X-Api-Key", "X-Team"]
    assert created.changes["auth_credentials"] == "set"
    assert TOKEN not in str(created.changes) and VALUE not in str(created.changes)

    # The job's page: the names, each value masked; no secret anywhere.
    page = ann_client.get(change_url(job)).content.decode()
    assert "X-Api-Key: ••••••" in page
    for secret in (TOKEN, VALUE):
        at = page.find(secret)
        assert at < 0, page[at - 300 : at + 100]
    events = ann_client.get(reverse("admin:jobs_jobevent_changelist")).content.decode()
    assert TOKEN not in events and VALUE not in events

    # Saved again as shown (masked lines, empty secret boxes): nothing changes.
    form = ann_client.get(change_url(job)).context["adminform"].form
    shown = form.initial | {"headers": form.fields["headers"].initial}
    data = form_data(
        method="GET",
        body_mode="none",
        headers=shown["headers"],
        auth_kind="bearer",
        expected_version=str(job.version),
    )
    assert ann_client.post(change_url(job), data).status_code == 302
    job.refresh_from_db()
    assert job.version == 1
    # One line changed, one value kept, the token replaced by basic auth.
    data.update(
        headers="X-Api-Key: ••••••\nX-Team: payments",
        auth_kind="basic",
        auth_username="robot",
        auth_password=PASSWORD,
    )
    assert ann_client.post(change_url(job), data).status_code == 302
    job.refresh_from_db()
    assert http_options.unseal(job.headers_encrypted) == {"X-Api-Key": VALUE, "X-Team": "payments"}
    assert http_options.unseal(job.auth_encrypted) == {
        "auth_username": "robot",
        "auth_password": PASSWORD,
    }
    updated = JobEvent.objects.filter(job=job, action="updated").get()
    assert updated.changes["auth_kind"] == ["bearer", "basic"]
    assert updated.changes["header_values"] == "changed"
    assert PASSWORD not in str(updated.changes) and "payments" not in str(updated.changes)
    # An empty box removes every header.
    data.update(headers="", auth_username="", auth_password="", expected_version=str(job.version))
    assert ann_client.post(change_url(job), data).status_code == 302
    job.refresh_from_db()
    assert (job.header_names, job.headers_encrypted, job.auth_kind) == ([], "", "basic")

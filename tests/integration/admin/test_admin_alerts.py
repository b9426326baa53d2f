"""Alert channels and alerts in the admin (docs/guides/alerts.md): the URL
checked as the API checks it, stored encrypted, shown once, masked after;
owners see only their own; the test alert action; a job's channels and its
recent alerts on the job page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from alerts.models import Alert, Channel, JobChannel
from jobs import crypto
from tests.factories import make_job

pytestmark = pytest.mark.django_db

ADD = reverse("admin:alerts_channel_add")
LIST = reverse("admin:alerts_channel_changelist")
PUBLIC = "json://93.184.216.34:8080/hooks/alerts"


def errors(response) -> dict[str, list[str]]:
    assert response.status_code == 200, "expected the form back, with errors"
    form = response.context["adminform"].form
    return {field: list(messages) for field, messages in form.errors.items()}


def test_a_new_channel_s_url_is_shown_once_then_masked(ann_client, ann):
    answer = ann_client.post(ADD, {"name": "ops", "url": PUBLIC})
    channel = Channel.objects.get(owner=ann)
    assert answer.status_code == 302
    assert answer["Location"] == reverse("admin:alerts_channel_change", args=[channel.pk])
    assert crypto.decrypt(channel.url_encrypted) == PUBLIC
    first = ann_client.get(answer["Location"]).content.decode()
    assert PUBLIC in first
    second = ann_client.get(answer["Location"]).content.decode()
    assert PUBLIC not in second and "json://93.184.216.34:8080/…" in second
    assert PUBLIC not in ann_client.get(LIST).content.decode()


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("", "An apprise URL is required."),
        ("gopher://example.com/", "Unknown apprise scheme gopher://."),
        ("json://127.0.0.1:9/alerts", "non-public address (127.0.0.1)"),
        ("mailto://user:pw@example.com?smtp=10.0.0.5", "non-public address (10.0.0.5)"),
    ],
)
def test_a_bad_url_is_refused_on_the_field_and_nothing_is_written(ann_client, url, fragment):
    found = errors(ann_client.post(ADD, {"name": "bad", "url": url}))
    assert any(fragment in message for message in found["url"]), found
    assert not Channel.objects.exists()


def test_a_change_may_keep_the_url_and_another_owner_s_channel_is_a_404(
    ann_client, ann, ben_client
):
    ann_client.post(ADD, {"name": "ops", "url": PUBLIC})
    channel = Channel.objects.get(owner=ann)
    change = reverse("admin:alerts_channel_change", args=[channel.pk])
    assert ann_client.post(change, {"name": "renamed", "url": ""}).status_code == 302
    channel.refresh_from_db()
    assert (channel.name, crypto.decrypt(channel.url_encrypted)) == ("renamed", PUBLIC)
    assert ben_client.get(change).status_code == 404
    assert "renamed" not in ben_client.get(LIST).content.decode()


def test_the_send_test_alert_action_queues_an_alert_for_a_worker(ann_client, ann):
    ann_client.post(ADD, {"name": "ops", "url": PUBLIC})
    channel = Channel.objects.get(owner=ann)
    answer = ann_client.post(
        LIST, {"action": "send_test_alert", "_selected_action": [channel.pk]}, follow=True
    )
    assert "Queued 1 test alert" in answer.content.decode()
    alert = Alert.objects.get(channel=channel)
    assert (alert.kind, alert.state) == ("test", "pending")
    alerts = ann_client.get(reverse("admin:alerts_alert_changelist")).content.decode()
    assert "test alert" in alerts


def test_the_job_page_chooses_channels_and_shows_recent_alerts(ann_client, ann, ben):
    mine = Channel.objects.create(
        owner=ann, name="mine", url_encrypted=crypto.encrypt(PUBLIC), masked="json://…"
    )
    Channel.objects.create(
        owner=ben, name="bens", url_encrypted=crypto.encrypt(PUBLIC), masked="json://…"
    )
    job = make_job(ann, url="https://93.184.215.14/hook")
    Alert.objects.create(
        channel=mine,
        job=job,
        kind="failed",
        count=3,
        detail="HTTP 500",
        due_at=job.created_at,
        next_attempt_at=job.created_at,
        state="sent",
        attempts=1,
    )
    page = ann_client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    assert 'id="recent-alerts"' in page and "run failed" in page
    everything = reverse("admin:alerts_alert_changelist") + f"?job__id__exact={job.pk}"
    listed = ann_client.get(everything)
    assert listed.status_code == 200 and "HTTP 500" not in listed.content.decode()
    assert "run failed" in listed.content.decode()
    assert "mine" in page and "bens" not in page
    form = page  # the form's current values, posted back with a channel ticked
    assert 'name="alert_channels"' in form
    from tests.integration.admin.test_admin_job_form import form_data

    data = form_data(alert_channels=[str(mine.pk)], expected_version=str(job.version))
    data["name"] = job.name
    answer = ann_client.post(reverse("admin:jobs_job_change", args=[job.pk]), data)
    assert answer.status_code == 302, errors(answer)
    assert list(JobChannel.objects.filter(job=job).values_list("channel_id", flat=True)) == [
        mine.pk
    ]

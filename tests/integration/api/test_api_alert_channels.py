"""``/api/v1/alert-channels/`` (docs/guides/alerts.md "Channels"): the URL
encrypted and answered once, owner-scoped, bad input refused with the field
named and nothing written, and the test alert queued for a worker."""

from __future__ import annotations

import pytest

from alerts.models import Alert, Channel
from jobs import crypto, targets

pytestmark = pytest.mark.django_db

CHANNELS = "/api/v1/alert-channels/"
PUBLIC = "json://93.184.216.34:8080/hooks/alerts"


def test_a_channel_s_url_is_answered_once_then_masked_and_stored_encrypted(api, owner):
    answer = api.post(CHANNELS, {"name": "ops", "url": PUBLIC}, format="json")
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert (body["name"], body["url"], body["masked"]) == (
        "ops",
        PUBLIC,
        "json://93.184.216.34:8080/…",
    )
    channel = Channel.objects.get(pk=body["id"])
    assert PUBLIC not in channel.url_encrypted
    assert crypto.decrypt(channel.url_encrypted) == PUBLIC
    later = api.get(f"{CHANNELS}{channel.pk}/").json()
    assert "url" not in later and later["masked"] == "json://93.184.216.34:8080/…"
    assert [c["id"] for c in api.get(CHANNELS).json()] == [channel.pk]


def test_a_hosted_service_s_token_is_not_shown_in_the_mask(api):
    body = api.post(
        CHANNELS, {"name": "chat", "url": "slack://T1234/B5678/SECRETTOKEN"}, format="json"
    ).json()
    assert body["masked"] == "slack://…"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "This field may not be blank."),
        ("nonsense", "Not an apprise URL"),
        ("gopher://example.com/", "Unknown apprise scheme gopher://."),
        ("json://", "apprise cannot read this json:// URL"),
        ("json://127.0.0.1:9/alerts", "non-public address (127.0.0.1)"),
        ("json://10.1.2.3/alerts", "non-public address (10.1.2.3)"),
        ("json://localhost:8080/alerts", "resolves to a non-public address"),
        ("mailto://user:pw@169.254.169.254", "non-public address (169.254.169.254)"),
        ("mailto://user:pw@example.com?smtp=10.0.0.5", "non-public address (10.0.0.5)"),
        ("json://nowhere.example/alerts", "could not resolve nowhere.example"),
    ],
)
def test_a_bad_channel_url_is_a_400_naming_the_field_and_nothing_is_written(api, url, message):
    answer = api.post(CHANNELS, {"name": "bad", "url": url}, format="json")
    assert answer.status_code == 400
    [error] = answer.json()["url"]
    assert message in error
    assert "pw" not in error  # a credential in the URL is never echoed
    assert not Channel.objects.exists()


def test_a_refused_url_in_a_change_is_a_400_and_the_channel_keeps_its_url(api, owner):
    channel_id = api.post(CHANNELS, {"name": "ops", "url": PUBLIC}, format="json").json()["id"]
    answer = api.patch(f"{CHANNELS}{channel_id}/", {"url": "json://127.0.0.1:9/x"}, format="json")
    assert answer.status_code == 400 and "url" in answer.json()
    assert crypto.decrypt(Channel.objects.get(pk=channel_id).url_encrypted) == PUBLIC


def test_names_are_unique_per_owner_and_unknown_fields_are_refused(api):
    assert api.post(CHANNELS, {"name": "ops", "url": PUBLIC}, format="json").status_code == 201
    clash = api.post(CHANNELS, {"name": "ops", "url": PUBLIC}, format="json")
    assert clash.status_code == 400 and "name" in clash.json()
    extra = api.post(CHANNELS, {"name": "x", "url": PUBLIC, "colour": "red"}, format="json")
    assert extra.status_code == 400 and "colour" in extra.json()
    assert Channel.objects.count() == 1


@pytest.mark.parametrize("pk", ["abc", "99999999999999999999999", "-1", "1.5"])
def test_a_channel_id_that_is_not_one_is_a_json_404(api, pk):
    answer = api.get(f"{CHANNELS}{pk}/")
    assert answer.status_code == 404 and "detail" in answer.json()


def test_another_owner_s_channel_is_a_404(api, other_owner):
    theirs = Channel.objects.create(
        owner=other_owner, name="theirs", url_encrypted=crypto.encrypt(PUBLIC), masked="json://…"
    )
    assert api.get(f"{CHANNELS}{theirs.pk}/").status_code == 404
    assert api.delete(f"{CHANNELS}{theirs.pk}/").status_code == 404
    assert api.post(f"{CHANNELS}{theirs.pk}/test/").status_code == 404
    assert api.get(CHANNELS).json() == []
    assert Channel.objects.filter(pk=theirs.pk).exists()


def test_a_test_alert_is_queued_for_a_worker_and_answered_202(api):
    channel_id = api.post(CHANNELS, {"name": "ops", "url": PUBLIC}, format="json").json()["id"]
    answer = api.post(f"{CHANNELS}{channel_id}/test/")
    assert answer.status_code == 202
    alert = Alert.objects.get(pk=answer.json()["alert_id"])
    assert (alert.kind, alert.state, alert.channel_id, alert.job_id) == (
        "test",
        "pending",
        channel_id,
        None,
    )


def test_a_channel_url_is_looked_up_before_the_save_within_the_deadline(api, monkeypatch):
    seen = []
    stand_in = targets.system_resolve

    def resolve(host):
        seen.append(host)
        return stand_in(host)

    monkeypatch.setattr(targets, "system_resolve", resolve)
    api.post(CHANNELS, {"name": "n", "url": "json://localhost:9/x"}, format="json")
    assert seen == ["localhost"]


JOBS = "/api/v1/jobs/"


def _job_body(**fields):
    from tests.integration.api.support import PUBLIC_URL

    return {"name": "nightly", "interval_seconds": 60, "url": PUBLIC_URL, **fields}


def test_a_job_names_its_own_channels_and_put_without_them_goes_back_to_all(api):
    mine = api.post(CHANNELS, {"name": "ops", "url": PUBLIC}, format="json").json()["id"]
    created = api.post(JOBS, _job_body(alert_channels=[mine]), format="json")
    assert created.status_code == 201, created.json()
    job = created.json()
    assert job["alert_channels"] == [mine]
    assert api.get(f"{JOBS}{job['id']}/").json()["alert_channels"] == [mine]
    assert api.get(JOBS).json()["results"][0]["alert_channels"] == [mine]
    patched = api.patch(f"{JOBS}{job['id']}/", {"description": "x"}, format="json").json()
    assert patched["alert_channels"] == [mine]
    replaced = api.put(f"{JOBS}{job['id']}/", _job_body(), format="json").json()
    assert replaced["alert_channels"] == []


@pytest.mark.parametrize("value", ["all", [True], ["1"], None])
def test_a_malformed_channel_list_is_a_400_naming_the_field(api, value):
    from jobs.models import Job

    answer = api.post(JOBS, _job_body(alert_channels=value), format="json")
    assert answer.status_code == 400 and "alert_channels" in answer.json()
    assert not Job.objects.exists()


def test_another_owner_s_channel_on_a_job_is_a_400_and_nothing_is_written(api, other_owner):
    from alerts.models import JobChannel
    from jobs.models import Job

    theirs = Channel.objects.create(
        owner=other_owner, name="theirs", url_encrypted=crypto.encrypt(PUBLIC), masked="json://…"
    )
    answer = api.post(JOBS, _job_body(alert_channels=[theirs.pk]), format="json")
    assert answer.status_code == 400
    assert answer.json()["alert_channels"] == [f"No such alert channel of yours: {theirs.pk}."]
    assert not Job.objects.exists() and not JobChannel.objects.exists()

"""Alerts end to end in-process: events recorded with the facts that cause
them, folded by the quiet period, sent by the alert loop to real local
channels (apprise's json:// to an HTTP server, mailto:// to aiosmtpd)."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.test import override_settings

from alerts import ledger
from alerts.models import Alert, Channel
from dispatch.alert_loop import AlertSender
from dispatch.worker import Worker
from jobs import crypto
from jobs.targets import AddressRule
from runs import job_verbs
from tests.alert_receivers import JsonReceiver, mailto_url, smtp_server
from tests.factories import make_job

pytestmark = pytest.mark.django_db

LOCAL: AddressRule = {"allow_private": True, "allow_loopback": False}
PUBLIC_ONLY: AddressRule = {"allow_private": False, "allow_loopback": False}


def channel(owner, url: str, name: str = "ops") -> Channel:
    from alerts.channels import mask

    return Channel.objects.create(
        owner=owner, name=name, url_encrypted=crypto.encrypt(url), masked=mask(url)
    )


def fail_runs(job, n: int) -> None:
    for _ in range(n):
        job_verbs.trigger(job)
    assert Worker(concurrency=50, lease_seconds=5, allow_private=True).run_once() == n


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True, PUNCTUAL_ALERT_QUIET_SECONDS=900)
def test_failures_within_the_quiet_period_fold_into_one_alert_with_their_count(owner, receiver_url):
    with JsonReceiver() as hook:
        channel(owner, hook.url())
        job = make_job(
            owner, url=receiver_url("status/500"), max_attempts=1, overlap_policy="allow"
        )
        fail_runs(job, 5)

        alert = Alert.objects.get(job=job)
        assert (alert.kind, alert.state, alert.count) == ("failed", "pending", 5)
        assert AlertSender("w1", rule=LOCAL).run_once() == 1
        alert.refresh_from_db()
        assert (alert.state, alert.attempts) == ("sent", 1)
        [body] = hook.bodies
        assert "failed" in body["title"] and "(and 4 more failures)" in body["title"]
        assert "HTTP 500" in body["message"]

        # Two more failures inside the quiet period: one new alert, due one
        # quiet period after the first, standing for both.
        fail_runs(job, 1)
        fail_runs(job, 1)
        later = Alert.objects.get(job=job, state="pending")
        assert later.count == 2
        assert later.due_at == alert.due_at + dt.timedelta(seconds=900)
        assert AlertSender("w1", rule=LOCAL).run_once() == 0  # not due yet
        assert len(hook.bodies) == 1


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True)
def test_an_alert_reaches_a_local_smtp_server_through_mailto(owner, receiver_url):
    with smtp_server() as (port, messages):
        channel(owner, mailto_url(port), name="mail")
        job = make_job(owner, name="nightly-report", url=receiver_url("status/500"), max_attempts=1)
        fail_runs(job, 1)
        assert AlertSender("w1", rule=LOCAL).run_once() == 1
        assert Alert.objects.get(job=job).state == "sent"
        [message] = messages
        assert message["to"] == ["ops@example.com"]
        assert "nightly-report failed" in message["data"]


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True, PUNCTUAL_ALERT_MAX_ATTEMPTS=2)
def test_a_failing_channel_is_retried_with_backoff_then_failed(owner, receiver_url):
    with JsonReceiver(status=500) as hook:
        channel(owner, hook.url())
        job = make_job(
            owner, url=receiver_url("status/500"), max_attempts=1, overlap_policy="allow"
        )
        fail_runs(job, 1)
        alert = Alert.objects.get(job=job)
        assert AlertSender("w1", rule=LOCAL).run_once() == 1
        alert.refresh_from_db()
        assert (alert.state, alert.attempts) == ("pending", 1)
        assert "500" in alert.last_error
        assert alert.next_attempt_at >= alert.updated_at
        # The retry, once due: the last attempt fails the alert.
        Alert.objects.filter(pk=alert.pk).update(next_attempt_at=alert.due_at)
        assert AlertSender("w1", rule=LOCAL).run_once() == 1
        alert.refresh_from_db()
        assert (alert.state, alert.attempts) == ("failed", 2)
        assert len(hook.bodies) == 2


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True)
def test_a_channel_to_a_refused_address_is_never_contacted_at_send(owner, receiver_url):
    with JsonReceiver() as hook:
        channel(owner, hook.url())
        job = make_job(
            owner, url=receiver_url("status/500"), max_attempts=1, overlap_policy="allow"
        )
        fail_runs(job, 1)
        # The worker's rule refuses private addresses: 127.0.0.1 is one.
        assert AlertSender("w1", rule=PUBLIC_ONLY).run_once() == 1
        alert = Alert.objects.get(job=job)
        assert alert.state == "pending"
        assert "refused non-public address 127.0.0.1" in alert.last_error
        assert hook.connections == 0


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True, PUNCTUAL_ALERT_MAX_ATTEMPTS=1)
def test_a_channel_s_redirect_is_not_followed_even_when_its_url_asks(owner, receiver_url):
    with JsonReceiver(status=302, redirect="/elsewhere") as hook:
        channel(owner, hook.url("alerts") + "?redirect=yes")
        job = make_job(owner, url=receiver_url("status/500"), max_attempts=1)
        fail_runs(job, 1)
        assert AlertSender("w1", rule=LOCAL).run_once() == 1
        assert hook.requests == ["POST /alerts"]
        assert Alert.objects.get(job=job).state == "failed"


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True)
def test_a_dead_sender_s_alert_is_taken_over_once_its_lease_expires(owner, receiver_url):
    with JsonReceiver() as hook:
        channel(owner, hook.url())
        job = make_job(
            owner, url=receiver_url("status/500"), max_attempts=1, overlap_policy="allow"
        )
        fail_runs(job, 1)
        # A worker claims it and dies mid-send: nothing is written back.
        [held] = ledger.claim("dead-worker", limit=10, lease_seconds=30)
        assert AlertSender("w2", rule=LOCAL).run_once() == 0  # still leased
        Alert.objects.filter(pk=held.id).update(lease_until=held.due_at)  # the lease ran out
        assert AlertSender("w2", rule=LOCAL).run_once() == 1
        alert = Alert.objects.get(pk=held.id)
        assert (alert.state, alert.attempts) == ("sent", 2)
        assert len(hook.bodies) == 1
        # The dead worker's late result is fenced off.
        assert (
            ledger.complete("dead-worker", [ledger.Sent(held.id, 1, ok=False)], rng=random.Random())
            == {}
        )


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True, PUNCTUAL_ALERT_QUIET_SECONDS=0)
def test_a_system_pause_and_the_recovery_after_it_are_alerted(owner, receiver_url):
    with JsonReceiver() as hook:
        channel(owner, hook.url())
        job = make_job(
            owner, url=receiver_url("status/500"), max_attempts=1, pause_after_failures=1
        )
        fail_runs(job, 1)
        kinds = set(Alert.objects.filter(job=job).values_list("kind", flat=True))
        assert kinds == {"failed", "paused"}
        AlertSender("w1", rule=LOCAL).run_once()
        job.refresh_from_db()
        job_verbs.resume(job)
        job.url = receiver_url("ok")
        job.save(update_fields=["url"])
        job_verbs.trigger(job)
        Worker(concurrency=5, lease_seconds=5, allow_private=True).run_once()
        assert Alert.objects.filter(job=job, kind="recovered").count() == 1
        AlertSender("w1", rule=LOCAL).run_once()
        assert any("recovered" in b["title"] for b in hook.bodies)


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True)
def test_a_job_s_own_channels_replace_its_owner_s(owner, receiver_url):
    from alerts.models import JobChannel

    with JsonReceiver() as a, JsonReceiver() as b:
        first = channel(owner, a.url(), name="a")
        second = channel(owner, b.url(), name="b")
        job = make_job(
            owner, url=receiver_url("status/500"), max_attempts=1, overlap_policy="allow"
        )
        other = make_job(
            owner, url=receiver_url("status/500"), max_attempts=1, overlap_policy="allow"
        )
        JobChannel.objects.create(job=job, channel=second)
        fail_runs(job, 1)
        fail_runs(other, 1)
        assert set(Alert.objects.filter(job=job).values_list("channel", flat=True)) == {second.pk}
        assert set(Alert.objects.filter(job=other).values_list("channel", flat=True)) == {
            first.pk,
            second.pk,
        }


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True)
def test_a_failed_test_delivery_raises_no_alert(owner, receiver_url):
    with JsonReceiver() as hook:
        channel(owner, hook.url())
        job = make_job(owner, url=receiver_url("status/500"))
        job_verbs.send_test_delivery(job, actor=owner)
        assert Worker(concurrency=5, lease_seconds=5, allow_private=True).run_once() == 1
        assert not Alert.objects.filter(job=job).exists()


@override_settings(PUNCTUAL_ALLOW_PRIVATE_TARGETS=True)
def test_a_test_alert_is_sent_by_the_alert_loop(owner):
    with JsonReceiver() as hook:
        alert_id = ledger.queue_test(channel(owner, hook.url(), name="ops"))
        assert AlertSender("w1", rule=LOCAL).run_once() == 1
        assert Alert.objects.get(pk=alert_id).state == "sent"
        [body] = hook.bodies
        assert body["title"] == "Punctual: test alert"
        assert "to the channel ops" in body["message"]


def test_a_backlog_s_fires_held_back_by_its_first_are_one_missed_alert(owner):
    """The fast path's backlog (dispatch/queries.py DISPATCH_SIMPLE_INTERVALS):
    within the grace, the first fire runs and the others are missed, one
    row and one alert counting them."""
    from dispatch.dispatcher import Dispatcher
    from tests.factories import at, rewrite_job

    t0 = at("2026-06-01T12:00:00")
    channel(owner, "json://93.184.216.34/alerts")
    job = make_job(owner, name="behind", interval_seconds=10, misfire_grace_seconds=60)
    rewrite_job(job, next_fire_at=t0, created_at=t0, start_at=t0)
    Dispatcher().tick(now=t0 + dt.timedelta(seconds=41))
    alert = Alert.objects.get(job=job)
    assert (alert.kind, alert.count) == ("missed", 4)


@override_settings(PUNCTUAL_ALERT_QUIET_SECONDS=900)
def test_fires_missed_in_an_outage_are_one_alert_with_how_many(owner):
    from dispatch.dispatcher import Dispatcher
    from tests.factories import at, rewrite_job

    t0 = at("2026-06-01T12:00:00")
    channel(owner, "json://93.184.216.34/alerts")
    job = make_job(owner, name="fx-rates-fetch", interval_seconds=60, misfire_grace_seconds=30)
    rewrite_job(job, next_fire_at=t0, created_at=t0, start_at=t0)
    Dispatcher().tick(now=t0 + dt.timedelta(minutes=5, seconds=10))
    alert = Alert.objects.get(job=job)
    assert (alert.kind, alert.count, alert.state) == ("missed", 5, "pending")
    # A second outage within the quiet period folds in.
    Dispatcher().tick(now=t0 + dt.timedelta(minutes=9, seconds=10))
    alert.refresh_from_db()
    assert alert.count == 8
    from alerts import messages

    title, body = messages.render(
        kind="missed", count=8, detail="", job_name=job.name, channel_name="ops", due_at=t0
    )
    assert title == "Punctual: fx-rates-fetch missed fires"
    assert body.startswith("fx-rates-fetch missed 8 fires.")


@override_settings(PUNCTUAL_ALERT_QUIET_SECONDS=900)
def test_install_events_go_to_superusers_channels_only(owner, django_user_model):
    from tests.admin_support import beat

    root = django_user_model.objects.create_user("root", password="pw-root-123", is_superuser=True)
    with JsonReceiver() as root_hook, JsonReceiver() as owner_hook:
        mine = channel(root, root_hook.url(), name="root-pager")
        channel(owner, owner_hook.url(), name="owner-hook")
        # No dispatcher has ever beaten: fires would go unmade.
        sender = AlertSender("w1", rule=LOCAL, install_every=0)
        sender.run_once()
        # A second look: the next alert, due a quiet period after the first.
        sender.run_once()
        sent, later = Alert.objects.filter(kind="no_dispatcher").order_by("id")
        assert (sent.state, later.state) == ("sent", "pending")
        assert sent.channel_id == later.channel_id == mine.pk and sent.job_id is None
        assert later.due_at == sent.due_at + dt.timedelta(seconds=900)
        assert [b["title"] for b in root_hook.bodies] == ["Punctual: no dispatcher is running"]
        assert owner_hook.bodies == []
        # With a dispatcher alive, nothing is added.
        beat()
        sender.run_once()
        later.refresh_from_db()
        assert later.count == 1 and Alert.objects.filter(kind="no_dispatcher").count() == 2


@override_settings(PUNCTUAL_EVENT_RETENTION_DAYS=90)
def test_alerts_are_pruned_with_the_audit_events(owner):
    from core.db import db_now
    from runs import retention

    ops = channel(owner, "json://93.184.216.34/alerts")
    now = db_now()
    old, recent = (
        Alert.objects.create(channel=ops, kind="test", due_at=now, next_attempt_at=now)
        for _ in range(2)
    )
    Alert.objects.filter(pk=old.pk).update(created_at=now - dt.timedelta(days=91))
    assert retention.prune_history(now).alerts_deleted == 1
    assert list(Alert.objects.values_list("pk", flat=True)) == [recent.pk]

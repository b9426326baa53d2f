"""Alerts sent by real ``manage.py work`` processes to real local channels
(docs/guides/alerts.md): apprise's json:// to an HTTP server, mailto:// to
an aiosmtpd server, a channel that hangs, a worker killed mid-send, and a
channel to a refused address."""

from __future__ import annotations

import signal

import pytest

from alerts.channels import mask
from alerts.models import Alert, Channel
from jobs import crypto
from runs import job_verbs
from runs.models import Run
from tests.alert_receivers import JsonReceiver, mailto_url, smtp_server
from tests.factories import make_job
from tests.processes.conftest import process_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]


def channel(owner, url: str, name: str) -> Channel:
    return Channel.objects.create(
        owner=owner, name=name, url_encrypted=crypto.encrypt(url), masked=mask(url)
    )


def alert_in(job, states: set[str]) -> Alert | None:
    alert = Alert.objects.filter(job=job).order_by("id").first()
    return alert if alert is not None and alert.state in states else None


def test_a_worker_sends_a_failure_alert_to_json_and_smtp_channels(owner, processes, receiver):
    with JsonReceiver() as hook, smtp_server() as (port, messages):
        channel(owner, hook.url(), "hook")
        channel(owner, mailto_url(port), "mail")
        job = make_job(owner, name="billing-sync", url=receiver.url("status/500"), max_attempts=1)
        job_verbs.trigger(job)
        processes.manage("work", "--lease-seconds", "5")
        wait_until(
            lambda: Alert.objects.filter(job=job, state="sent").count() == 2,
            timeout=60,
            message="both alerts sent",
        )
        [body] = hook.bodies
        assert body["title"] == "Punctual: billing-sync failed"
        assert "HTTP 500" in body["message"]
        [mail] = wait_until(lambda: messages, message="the e-mail")
        assert mail["to"] == ["ops@example.com"]
        assert "Subject: Punctual: billing-sync failed" in mail["data"]


def test_a_hanging_channel_never_holds_up_deliveries_and_is_retried(owner, processes, receiver):
    env = process_env(
        PUNCTUAL_ALERT_SEND_SECONDS="6",
        PUNCTUAL_ALERT_RETRY_SECONDS="0.1",
        PUNCTUAL_ALERT_MAX_ATTEMPTS="2",
    )
    with JsonReceiver(hang=-1) as hook:
        channel(owner, hook.url(), "hangs")
        failing = make_job(owner, url=receiver.url("status/500"), max_attempts=1)
        healthy = make_job(owner, url=receiver.url("ok"), overlap_policy="allow")
        job_verbs.trigger(failing)
        processes.manage("work", "--lease-seconds", "5", env=env)
        wait_until(lambda: hook.bodies, timeout=60, message="the alert to reach the channel")
        # The channel holds the send. Deliveries go on meanwhile, one after
        # another, each within the send's deadline.
        runs = []
        for _ in range(3):
            run = job_verbs.trigger(healthy)
            wait_until(
                lambda r=run: Run.objects.get(pk=r.pk).state == "succeeded",
                timeout=30,
                message="a delivery while the channel hangs",
            )
            runs.append(Run.objects.get(pk=run.pk))
        alert = wait_until(lambda: alert_in(failing, {"failed"}), timeout=60, message="failed")
        # apprise's own read timeout (half the send's deadline) or the
        # deadline itself ended each attempt.
        assert alert.attempts == 2
        assert "Connection error" in alert.last_error or "timed out" in alert.last_error
        # Every delivery finished before the first send was abandoned.
        first_send_started = alert.created_at
        assert all(r.finished_at < first_send_started + _seconds(6) for r in runs)
        assert len(hook.bodies) == 2


def _seconds(n: float):
    import datetime as dt

    return dt.timedelta(seconds=n)


def test_an_alert_held_by_a_killed_worker_is_sent_by_another(owner, processes, receiver):
    env = process_env(PUNCTUAL_ALERT_SEND_SECONDS="2")  # the lease: 2 × 2 + 5 s
    with JsonReceiver(hang=1) as hook:
        channel(owner, hook.url(), "first-send-hangs")
        job = make_job(owner, url=receiver.url("status/500"), max_attempts=1)
        job_verbs.trigger(job)
        doomed = processes.manage("work", "--lease-seconds", "5", "--name", "doomed", env=env)
        wait_until(lambda: hook.bodies, timeout=60, message="the first send")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=10)
        held = Alert.objects.get(job=job)
        assert (held.state, held.lease_owner, held.attempts) == ("sending", "doomed", 1)
        processes.manage("work", "--lease-seconds", "5", "--name", "survivor", env=env)
        alert = wait_until(lambda: alert_in(job, {"sent"}), timeout=60, message="the takeover")
        assert alert.attempts == 2
        assert len(hook.bodies) == 2


def test_a_worker_never_contacts_a_channel_on_a_refused_address(owner, processes, receiver):
    env = process_env(PUNCTUAL_ALLOW_PRIVATE_TARGETS="false", PUNCTUAL_ALERT_MAX_ATTEMPTS="1")
    with JsonReceiver() as hook:
        channel(owner, hook.url(), "loopback")
        # The job's own delivery is refused too (a permanent failure): that
        # failure is what the alert is about.
        job = make_job(owner, url=receiver.url("ok"), max_attempts=1)
        job_verbs.trigger(job)
        processes.manage("work", "--lease-seconds", "5", env=env)
        alert = wait_until(lambda: alert_in(job, {"failed"}), timeout=60, message="refused")
        assert "refused non-public address 127.0.0.1" in alert.last_error
        assert hook.connections == 0

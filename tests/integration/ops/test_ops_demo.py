"""``manage.py demo`` and the built-in demo receiver (what ``make run`` starts)."""

from __future__ import annotations

import datetime as dt
import io
import logging
import re
import socket
import time
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from accounts import tokens
from accounts.models import ApiToken
from dispatch import webhooks
from jobs import crypto
from jobs.models import Job
from ops.demo.models import DemoDelivery
from runs.models import Run
from tests.integration.ops.conftest import wait_until

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_settings(settings, tmp_path):
    """The receiver answers only with DEBUG on; credentials go under tmp_path/var."""
    settings.DEBUG = True
    settings.BASE_DIR = tmp_path
    settings.PUNCTUAL_ALLOW_PRIVATE_TARGETS = True
    return settings


def run_demo(*args: str) -> str:
    out = io.StringIO()
    call_command("demo", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def demo_job() -> Job:
    return Job.objects.get(name="Demo: every 10 seconds")


def signed(job: Job, run_id: str | None = None, *, now: dt.datetime | None = None, attempt=1):
    """Headers and body exactly as a worker would send them (dispatch/webhooks.py)."""
    now = now or timezone.now()
    delivery = webhooks.Delivery(
        run_id=run_id or str(uuid.uuid4()),
        job_id=str(job.pk),
        job_name=job.name,
        scheduled_at=now,
        kind="scheduled",
        attempt=attempt,
        payload=job.payload,
        url=job.url,
        secrets=job.signing_secrets(now),
        timeout_seconds=10,
    )
    return webhooks.build_request(delivery, now)


def post(client, job: Job, headers: dict[str, str], body: bytes):
    headers = {k: v for k, v in headers.items() if k != "content-type"}
    return client.post(
        f"/demo/receiver/{job.pk}/", data=body, content_type="application/json", headers=headers
    )


# -- manage.py demo -----------------------------------------------------------


def test_demo_creates_the_owner_the_token_and_the_job_once(demo_settings, tmp_path):
    first = run_demo()
    user = get_user_model().objects.get(username="admin")
    assert user.is_superuser and user.is_staff
    key = first.strip().splitlines()[-1].removeprefix("API token: ")
    assert tokens.key_matches(user, key)
    assert f'curl -H "Authorization: Token {key}"' in first
    password = re.search(r"user admin  password (\S+)", first)[1]
    assert user.check_password(password)
    stored = (tmp_path / "var" / "demo-credentials.txt").read_text()
    assert f"password={password}" in stored and f"token={key}" in stored
    assert (tmp_path / "var" / "demo-credentials.txt").stat().st_mode & 0o077 == 0

    job = demo_job()
    assert (job.owner, job.interval_seconds, job.state) == (user, 10, "active")
    assert job.url == f"http://127.0.0.1:8000/demo/receiver/{job.pk}/"
    assert str(job.pk) in first

    second = run_demo()
    assert "already set up" in second
    assert f"password {password}" in second
    assert second.strip().splitlines()[-1] == f"API token: {key}"
    assert get_user_model().objects.count() == 1
    assert Job.objects.count() == 1
    assert ApiToken.objects.count() == 1
    user.refresh_from_db()
    assert user.check_password(password)

    # Rotated elsewhere (the admin, the API): the stored key no longer works,
    # so the next run makes and stores a new one.
    tokens.issue(user)
    third = run_demo()
    new_key = third.strip().splitlines()[-1].removeprefix("API token: ")
    assert new_key != key and tokens.key_matches(user, new_key)
    assert f"token={new_key}" in (tmp_path / "var" / "demo-credentials.txt").read_text()
    assert f"password {password}" in third


def test_demo_never_resets_an_existing_admin_password(demo_settings, django_user_model):
    django_user_model.objects.create_superuser("admin", password="chosen-by-me-123")
    output = run_demo()
    assert "password (unchanged" in output
    assert django_user_model.objects.get(username="admin").check_password("chosen-by-me-123")


def test_demo_rejects_a_bad_interval(demo_settings):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="--interval must be between 1 and 31536000"):
        run_demo("--interval", "0")


# -- the receiver -------------------------------------------------------------


def test_receiver_accepts_a_signed_delivery_and_deduplicates_on_webhook_id(demo_settings, client):
    run_demo()
    job = demo_job()
    headers, body = signed(job)
    first = post(client, job, headers, body)
    assert first.status_code == 200
    assert first.json() == {"received": headers["webhook-id"], "duplicate": False}
    # A retry of the same run: same webhook-id, new timestamp and signature.
    headers2, body2 = signed(job, headers["webhook-id"], attempt=2)
    again = post(client, job, headers2, body2)
    assert again.status_code == 200
    assert again.json()["duplicate"] is True

    row = DemoDelivery.objects.get()
    assert (row.webhook_id, row.signature_valid, row.times_received) == (
        headers["webhook-id"],
        True,
        2,
    )
    assert row.attempt == 1


def test_receiver_accepts_what_a_standard_webhooks_library_signs(demo_settings, client):
    run_demo()
    job = demo_job()
    [secret] = job.signing_secrets(timezone.now())
    msg_id, now, body = str(uuid.uuid4()), timezone.now(), '{"type": "job.fire", "data": {}}'
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, now, body),
    }
    assert post(client, job, headers, body.encode()).status_code == 200


def test_receiver_answers_401_to_a_bad_signature_and_records_it(demo_settings, client):
    run_demo()
    job = demo_job()
    headers, body = signed(job)
    forged = post(client, job, headers, body.replace(b"hello", b"HELLO"))
    assert forged.status_code == 401
    assert forged.json() == {"error": "no signature matches the job's secret"}
    row = DemoDelivery.objects.get()
    assert not row.signature_valid
    # The genuine delivery with the same id then wins.
    assert post(client, job, headers, body).status_code == 200
    row.refresh_from_db()
    assert (row.signature_valid, row.error, row.times_received) == (True, "", 2)


def test_receiver_refuses_a_stale_timestamp_and_a_missing_id(demo_settings, client):
    run_demo()
    job = demo_job()
    headers, body = signed(job, now=timezone.now() - dt.timedelta(minutes=10))
    response = post(client, job, headers, body)
    assert response.status_code == 401
    assert response.json() == {"error": "webhook-timestamp is too far from now"}
    headers, body = signed(job)
    del headers["webhook-id"]
    assert post(client, job, headers, body).status_code == 400


def test_receiver_verifies_with_either_secret_while_a_rotation_overlaps(demo_settings, client):
    run_demo()
    job = demo_job()
    old_secret = crypto.decrypt(job.secret_encrypted)
    job.rotate_secret()
    job.refresh_from_db()
    now = timezone.now()
    body = b'{"data": {}}'
    msg_id, ts = str(uuid.uuid4()), int(now.timestamp())
    old_only = webhooks.signature_header([old_secret], msg_id, ts, body)
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": old_only}
    assert post(client, job, headers, body).status_code == 200


def test_the_receiver_page_lists_deliveries_with_their_signature_and_run_state(
    demo_settings, client
):
    run_demo()
    job = demo_job()
    run = Run.objects.create(job=job, scheduled_at=timezone.now(), state="succeeded")
    headers, body = signed(job, str(run.pk))
    post(client, job, headers, body)
    bad_headers, bad_body = signed(job)
    post(client, job, bad_headers, bad_body + b" ")

    page = client.get(f"/demo/receiver/{job.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert str(run.pk) in html and bad_headers["webhook-id"] in html
    assert "valid" in html and "invalid" in html

    data = client.get(f"/demo/receiver/{job.pk}/?format=json").json()
    by_id = {d["webhook_id"]: d for d in data["deliveries"]}
    assert by_id[str(run.pk)]["signature_valid"] is True
    assert by_id[str(run.pk)]["run_state"] == "succeeded"
    assert by_id[bad_headers["webhook-id"]]["signature_valid"] is False
    assert client.get("/demo/?format=json").json()["deliveries"] == data["deliveries"]


def test_the_demo_receiver_is_off_without_debug(demo_settings, client):
    run_demo()
    job = demo_job()
    demo_settings.DEBUG = False
    headers, body = signed(job)
    assert post(client, job, headers, body).status_code == 404
    assert client.get("/demo/").status_code == 404
    assert not DemoDelivery.objects.exists()


def test_an_unknown_job_is_404(demo_settings, client):
    assert client.get(f"/demo/receiver/{uuid.uuid4()}/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_delivers_the_demo_job_to_the_receiver(
    demo_settings, live_server, worker_thread
):
    from core.db import db_now
    from dispatch.dispatcher import Dispatcher

    run_demo("--base-url", live_server.url)
    job = demo_job()
    Job.objects.filter(pk=job.pk).update(next_fire_at=db_now() - dt.timedelta(seconds=1))
    Dispatcher().tick()
    worker_thread()
    run = wait_until(
        lambda: Run.objects.filter(job=job, state="succeeded").first(),
        message="the demo run to succeed",
    )
    row = DemoDelivery.objects.get()
    assert (row.webhook_id, row.signature_valid) == (str(run.pk), True)


# -- the catch-all address and its switches -------------------------------------


def catch_all(client, path: str, headers: dict[str, str], body: bytes):
    headers = {k: v for k, v in headers.items() if k != "content-type"}
    return client.post(path, data=body, content_type="application/json", headers=headers)


@pytest.fixture
def demo_run(demo_settings) -> Run:
    """A run of the demo job: the catch-all finds the job from its id."""
    run_demo()
    return Run.objects.create(job=demo_job(), scheduled_at=timezone.now(), state="running")


@pytest.mark.parametrize(
    "path", ["/demo/receiver/", "/demo/receiver/orders/sync", "/demo/receiver/x/"]
)
def test_the_catch_all_finds_the_job_from_the_run_id_on_any_sub_path(demo_run, client, path):
    headers, body = signed(demo_run.job, str(demo_run.pk))
    answer = catch_all(client, path, headers, body)
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"received": str(demo_run.pk), "duplicate": False}
    row = DemoDelivery.objects.get()
    assert (row.job_id, row.signature_valid, row.last_status, row.last_request) == (
        demo_run.job_id,
        True,
        200,
        path,
    )


def test_the_catch_all_checks_the_signature_with_the_run_s_job_secret(demo_run, client):
    other = Job.objects.create(owner=demo_run.job.owner, name="other", interval_seconds=60)
    # Signed with another job's secret, under this run's id: refused.
    headers, body = signed(other, str(demo_run.pk))
    answer = catch_all(client, "/demo/receiver/", headers, body)
    assert answer.status_code == 401
    assert answer.json() == {"error": "no signature matches the job's secret"}
    row = DemoDelivery.objects.get()
    assert (row.job_id, row.signature_valid, row.last_status) == (demo_run.job_id, False, 401)


def test_the_catch_all_answers_404_to_an_id_that_is_no_run_and_records_nothing(demo_run, client):
    for msg_id in (str(uuid.uuid4()), "not-a-uuid"):
        headers, body = signed(demo_run.job, msg_id)
        answer = catch_all(client, "/demo/receiver/", headers, body)
        assert answer.status_code == 404
        assert "webhook-id is not the id of any run" in answer.json()["error"]
    assert not DemoDelivery.objects.exists()


@pytest.mark.parametrize("status", [500, 503, 410, 299, 599])
def test_the_status_switch_answers_a_verified_delivery_with_that_status(
    demo_run, client, status, caplog
):
    headers, body = signed(demo_run.job, str(demo_run.pk))
    with caplog.at_level(logging.INFO, logger="django.request"):
        answer = catch_all(client, f"/demo/receiver/?status={status}", headers, body)
    assert answer.status_code == status
    # An answer asked for is not logged as the server's error.
    assert [r for r in caplog.records if r.name == "django.request"] == []
    assert answer.json()["received"] == str(demo_run.pk)
    row = DemoDelivery.objects.get()
    assert (row.last_status, row.last_request) == (status, f"/demo/receiver/?status={status}")
    # A retry switched back to 200 is recorded as the last answer.
    headers, body = signed(demo_run.job, str(demo_run.pk), attempt=2)
    assert catch_all(client, "/demo/receiver/", headers, body).status_code == 200
    row.refresh_from_db()
    assert (row.times_received, row.last_status) == (2, 200)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("status", [204, 304])
def test_the_status_switch_sends_no_body_where_http_allows_none(demo_settings, live_server, status):
    """Over a real socket: Django's test client drops such bodies by itself."""
    run_demo()
    run = Run.objects.create(job=demo_job(), scheduled_at=timezone.now(), state="running")
    headers, body = signed(run.job, str(run.pk))
    host, port = live_server.thread.host, live_server.thread.port
    lines = [f"POST /demo/receiver/?status={status} HTTP/1.0", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"Content-Length: {len(body)}", "", ""]
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall("\r\n".join(lines).encode() + body)
        answer = b""
        while chunk := sock.recv(65536):  # HTTP/1.0: the server closes when done
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status}".encode()) or head.startswith(
        f"HTTP/1.0 {status}".encode()
    ), head
    assert rest == b""


def test_the_status_switch_never_hides_a_bad_signature(demo_run, client):
    headers, body = signed(demo_run.job, str(demo_run.pk))
    answer = catch_all(client, "/demo/receiver/?status=200", headers, body + b" ")
    assert answer.status_code == 401


def test_the_delay_switch_answers_that_many_seconds_late(demo_run, client):
    headers, body = signed(demo_run.job, str(demo_run.pk))
    started = time.monotonic()
    answer = catch_all(client, "/demo/receiver/?delay=0.4&status=502", headers, body)
    # A lower bound only: a slow machine makes it later, never earlier.
    assert time.monotonic() - started >= 0.4
    assert answer.status_code == 502
    assert DemoDelivery.objects.get().last_request == "/demo/receiver/?delay=0.4&status=502"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=99", "status must be an HTTP status code from 100 to 599 (got '99')"),
        ("status=600", "status must be an HTTP status code from 100 to 599 (got '600')"),
        ("status=abc", "status must be an HTTP status code from 100 to 599 (got 'abc')"),
        ("status=", "status must be an HTTP status code from 100 to 599 (got '')"),
        ("status=5e2", "status must be an HTTP status code from 100 to 599 (got '5e2')"),
        ("delay=61", "delay must be seconds from 0 to 60 (got '61')"),
        ("delay=-1", "delay must be seconds from 0 to 60 (got '-1')"),
        ("delay=nan", "delay must be seconds from 0 to 60 (got 'nan')"),
        ("delay=inf", "delay must be seconds from 0 to 60 (got 'inf')"),
        ("delay=3s", "delay must be seconds from 0 to 60 (got '3s')"),
    ],
)
def test_a_bad_switch_is_a_400_naming_it_and_records_nothing(demo_run, client, query, message):
    headers, body = signed(demo_run.job, str(demo_run.pk))
    for path in ("/demo/receiver/", f"/demo/receiver/{demo_run.job_id}/"):
        answer = catch_all(client, f"{path}?{query}", headers, body)
        assert (answer.status_code, answer.json()) == (400, {"error": message})
    assert not DemoDelivery.objects.exists()


def test_the_catch_all_lists_every_delivery_with_its_last_answer(demo_run, client):
    headers, body = signed(demo_run.job, str(demo_run.pk))
    catch_all(client, "/demo/receiver/hooks?status=500", headers, body)
    page = client.get("/demo/receiver/anything")
    assert page.status_code == 200
    html = page.content.decode()
    assert str(demo_run.pk) in html and "/demo/receiver/hooks?status=500" in html
    [row] = client.get("/demo/receiver/?format=json").json()["deliveries"]
    assert (row["last_status"], row["last_request"]) == (500, "/demo/receiver/hooks?status=500")


def test_the_catch_all_is_off_without_debug(demo_run, client, demo_settings):
    demo_settings.DEBUG = False
    headers, body = signed(demo_run.job, str(demo_run.pk))
    assert catch_all(client, "/demo/receiver/", headers, body).status_code == 404
    assert client.get("/demo/receiver/").status_code == 404
    assert not DemoDelivery.objects.exists()

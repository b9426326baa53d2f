"""The audit log (docs/guides/api.md "Audit events"): an event records only the
fields that changed, as [old, new], the payload as its size and hash, never a
secret; and events past PUNCTUAL_EVENT_RETENTION_DAYS are pruned with the runs."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from core.db import db_now, delete_oldest
from dispatch.dispatcher import Dispatcher
from jobs import changes, crypto
from jobs.models import IdempotencyKey, Job, JobEvent
from tests.admin_support import make_owner
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL, token_client

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
DAY = dt.timedelta(days=1)
ROOT = Path(__file__).resolve().parents[2]


def create(api, **fields) -> dict:
    body = {"name": "report", "interval_seconds": 60, "url": PUBLIC_URL, **fields}
    answer = api.post(JOBS, body, format="json")
    assert answer.status_code == 201, answer.json()
    return answer.json()


def stored_changes(action: str) -> list[str]:
    """The ``changes`` column as PostgreSQL stores it, for each event of ``action``."""
    with connection.cursor() as cur:
        cur.execute("SELECT changes::text FROM jobs_jobevent WHERE action = %s", [action])
        return [row[0] for row in cur.fetchall()]


def big_payload(marker: str) -> dict:
    """About 60 KB: just under the 64 KiB limit."""
    return {"marker": marker, "rows": [f"{marker}-{i:05d}" for i in range(2500)]}


# -- what an event records ----------------------------------------------------


def test_an_edit_records_exactly_the_fields_it_changed_with_old_and_new(owner):
    api = token_client(owner)
    job = create(api, timeout_seconds=30, description="first")
    # Three fields sent, one of them unchanged: only two were changed.
    answer = api.patch(
        f"{JOBS}{job['id']}/",
        {"name": "renamed", "timeout_seconds": 45, "description": "first"},
        format="json",
    )
    assert answer.status_code == 200
    [event] = JobEvent.objects.filter(action="updated")
    assert event.changes == {"name": ["report", "renamed"], "timeout_seconds": [30, 45]}
    listed = api.get(f"{JOBS}{job['id']}/events/").json()["results"]
    assert listed[0]["action"] == "updated" and listed[0]["changes"] == event.changes


def test_a_big_payload_edit_stores_its_size_and_hash_never_the_payload(owner):
    api = token_client(owner)
    first, second = big_payload("first-marker"), big_payload("second-marker")
    job = create(api, payload=first)
    assert api.patch(f"{JOBS}{job['id']}/", {"payload": second}, format="json").status_code == 200
    [updated] = stored_changes("updated")
    [created] = stored_changes("created")
    # A few hundred bytes, where copying the payloads would take 120 KB.
    assert len(updated) < 300, updated
    assert len(created) < 1000, created
    assert "marker" not in updated and "marker" not in created
    delivered = json.dumps(second, separators=(",", ":"), sort_keys=True).encode()
    old, new = JobEvent.objects.get(action="updated").changes["payload"]
    assert new == {"bytes": len(delivered), "sha256": hashlib.sha256(delivered).hexdigest()}
    assert old == changes.digest(first) != new
    assert JobEvent.objects.get(action="created").changes["payload"] == old


def test_a_create_records_its_initial_values(owner):
    api = token_client(owner)
    job = create(api, payload={"k": "v"}, start_at="2030-01-01T09:00:00+01:00")
    event = JobEvent.objects.get(job_id=job["id"])
    assert event.changes["name"] == "report" and event.changes["interval_seconds"] == 60
    assert event.changes["start_at"] == "2030-01-01T08:00:00Z"
    assert event.changes["payload"] == changes.digest({"k": "v"})
    assert job["secret"] not in json.dumps(event.changes)


def test_a_pause_records_the_fields_it_changed_and_no_others(owner):
    api = token_client(owner)
    job = create(api)
    url = f"{JOBS}{job['id']}/pause/"
    api.post(url, {"note": "first"}, format="json")
    api.post(url, {"note": "second"}, format="json")  # paused already: only the note changes
    first, again = JobEvent.objects.filter(action="paused").order_by("id")
    assert set(first.changes) == {
        "state",
        "pause_note",
        "paused_at",
        "next_fire_at",
        "cancelled_runs",
    }
    assert first.changes["state"] == ["active", "paused"]
    assert first.changes["next_fire_at"][1] is None
    assert again.changes == {"pause_note": ["first", "second"], "cancelled_runs": 0}


def test_no_event_ever_holds_a_secret(owner):
    """Every verb through the API, then every event's stored text searched
    for every secret the job ever had, plain and encrypted."""
    api = token_client(owner)
    job = create(api)
    url = f"{JOBS}{job['id']}/"
    secrets = [job["secret"]]
    api.patch(url, {"description": "x", "payload": {"n": 1}}, format="json")
    api.post(f"{url}pause/", {"note": "n"}, format="json")
    api.post(f"{url}resume/", {}, format="json")
    api.post(f"{url}trigger/")
    secrets.append(api.post(f"{url}rotate-secret/").json()["secret"])
    row = Job.objects.get(pk=job["id"])
    api.delete(url)
    with connection.cursor() as cur:
        cur.execute("SELECT string_agg(changes::text, ' ') FROM jobs_jobevent")
        [text] = cur.fetchone()
    assert JobEvent.objects.count() == 7
    for secret in [*secrets, row.secret_encrypted, row.previous_secret_encrypted]:
        assert secret not in text
    assert "whsec_" not in text and "secret_encrypted" not in text


def test_secret_fields_are_never_recorded_even_when_a_caller_passes_them():
    token = crypto.encrypt("whsec_x")
    assert changes.diff({"secret_encrypted": ("", token), "name": ("a", "b")}) == {
        "name": ["a", "b"]
    }
    assert changes.initial({"secret": "whsec_x", "previous_secret_encrypted": token}) == {}


def test_the_admin_shows_each_change_as_old_to_new():
    ann = make_owner("ann")
    job = make_job(ann, name="nightly", payload={})
    api = token_client(ann)
    api.patch(f"{JOBS}{job.pk}/", {"name": "hourly", "payload": {"k": "v"}}, format="json")
    client = Client()
    client.force_login(ann)
    digest = changes.digest({"k": "v"})
    lines = [
        "name: nightly → hourly",
        f"payload: 2 bytes, sha256 {changes.digest({})['sha256'][:12]}…"
        f" → {digest['bytes']} bytes, sha256 {digest['sha256'][:12]}…",
    ]
    listing = client.get(reverse("admin:jobs_jobevent_changelist")).content.decode()
    page = client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    assert all(f"<li>{line}</li>" in listing for line in lines)  # one line per change
    assert "; ".join(lines) in page


# -- retention ----------------------------------------------------------------


def add_events(job: Job, n: int, *, age: dt.timedelta) -> set[int]:
    events = [job.record_event("paused", changes={"n": k}) for k in range(n)]
    ids = {e.pk for e in events}
    JobEvent.objects.filter(pk__in=ids).update(created_at=db_now() - age)
    return ids


def add_keys(owner, n: int, *, age: dt.timedelta, prefix: str) -> None:
    created = db_now() - age
    IdempotencyKey.objects.bulk_create(
        IdempotencyKey(
            owner=owner,
            key=f"{prefix}-{k}",
            fingerprint="f",
            status_code=201,
            response_encrypted="",
            created_at=created,
        )
        for k in range(n)
    )


def test_prune_runs_deletes_events_past_their_own_retention_in_batches(owner, settings):
    settings.PUNCTUAL_EVENT_RETENTION_DAYS = 10
    settings.PUNCTUAL_RUN_RETENTION_DAYS = 1  # not the events' setting
    job = make_job(owner)
    add_events(job, 5, age=15 * DAY)
    kept = add_events(job, 3, age=5 * DAY)
    add_keys(owner, 3, age=2 * DAY, prefix="old")
    add_keys(owner, 2, age=dt.timedelta(hours=1), prefix="new")
    out = io.StringIO()
    call_command("prune_runs", "--batch-size", "2", stdout=out)
    assert "deleted 5 audit events created before" in out.getvalue()
    assert "and 3 expired Idempotency-Key answers" in out.getvalue()
    assert set(JobEvent.objects.values_list("pk", flat=True)) == kept
    assert sorted(IdempotencyKey.objects.values_list("key", flat=True)) == ["new-0", "new-1"]


def test_the_dispatcher_s_housekeeping_prunes_old_events_too(owner, settings):
    settings.PUNCTUAL_EVENT_RETENTION_DAYS = 30
    job = make_job(owner)
    add_events(job, 4, age=31 * DAY)
    kept = add_events(job, 2, age=29 * DAY)
    add_keys(owner, 2, age=2 * DAY, prefix="old")
    Dispatcher().housekeeping()
    assert set(job.events.values_list("pk", flat=True)) == kept
    assert not IdempotencyKey.objects.exists()


def test_each_batch_deletes_at_most_its_size_oldest_first(owner):
    job = make_job(owner)
    oldest = add_events(job, 2, age=50 * DAY)
    add_events(job, 2, age=40 * DAY)
    cutoff = db_now() - 30 * DAY
    with transaction.atomic():
        assert delete_oldest(JobEvent, cutoff, 2) == 2
    assert not JobEvent.objects.filter(pk__in=oldest).exists()
    assert JobEvent.objects.count() == 2  # the two 40 days old


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "PUNCTUAL_EVENT_RETENTION_DAYS must be between 1 and 36500"),
        ("36501", "PUNCTUAL_EVENT_RETENTION_DAYS must be between 1 and 36500"),
        ("soon", "invalid literal for int()"),
    ],
)
def test_a_bad_event_retention_stops_the_settings_from_loading(value, message):
    env = {**os.environ, "DEBUG": "true", "PUNCTUAL_EVENT_RETENTION_DAYS": value}
    loaded = subprocess.run(
        [sys.executable, "-c", "import scheduler_site.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.returncode != 0 and message in loaded.stderr


def test_the_event_retention_setting_is_read_from_the_environment():
    env = {**os.environ, "DEBUG": "true", "PUNCTUAL_EVENT_RETENTION_DAYS": "7"}
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import scheduler_site.settings as s; print(s.PUNCTUAL_EVENT_RETENTION_DAYS)",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "7"

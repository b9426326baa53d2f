"""Repeats are harmless: Idempotency-Key on create and trigger, and backfill
through the unique fire key."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import threading

import pytest
from django.apps import apps
from django.db import connection

from core.api_errors import Conflict
from core.db import db_now
from jobs import crypto, idempotency
from jobs.models import IdempotencyKey, Job
from runs import identity
from runs.models import Run
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL, token_client
from tests.resolver_watch import lookup_held

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
BODY = {"name": "once", "interval_seconds": 60, "url": PUBLIC_URL}


def test_trigger_repeated_with_the_same_key_returns_one_run(api, owner):
    job = make_job(owner)
    url = f"{JOBS}{job.pk}/trigger/"
    first = api.post(url, HTTP_IDEMPOTENCY_KEY="fire-2026-01-01")
    again = api.post(url, HTTP_IDEMPOTENCY_KEY="fire-2026-01-01")
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert Run.objects.filter(job=job).count() == 1
    assert job.events.filter(action="triggered").count() == 1
    assert first.json()["id"] == str(identity.manual_id(job.pk, "fire-2026-01-01"))
    other = api.post(url, HTTP_IDEMPOTENCY_KEY="another-key")
    assert other.json()["id"] != first.json()["id"]
    assert Run.objects.filter(job=job).count() == 2
    plain = api.post(url).json()
    assert plain["id"] == str(
        identity.fire_id(job.pk, dt.datetime.fromisoformat(plain["scheduled_at"]))
    )


def test_trigger_with_a_key_whose_answer_expired_is_still_one_run(api, owner):
    """The key names the manual fire for good: once its stored answer is gone,
    a repeat gets the same run back, not a second fire (nor a clash on the id)."""
    job = make_job(owner)
    url = f"{JOBS}{job.pk}/trigger/"
    first = api.post(url, HTTP_IDEMPOTENCY_KEY="deploy-42")
    IdempotencyKey.objects.update(created_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    later = api.post(url, HTTP_IDEMPOTENCY_KEY="deploy-42")
    assert later.status_code == 201 and "Idempotent-Replayed" not in later
    assert later.json()["id"] == first.json()["id"] == str(identity.manual_id(job.pk, "deploy-42"))
    assert Run.objects.filter(job=job).count() == 1
    assert job.events.filter(action="triggered").count() == 1


def test_create_repeated_with_the_same_key_returns_the_same_job_and_secret(api):
    first = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()  # the secret too: the first answer may have been lost
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1
    assert_no_secret_stored([first.json()["secret"]])


def assert_no_secret_stored(secrets: list[str]) -> None:
    """No stored answer holds a secret: not in any column as stored, nor in
    the answer once decrypted."""
    with connection.cursor() as cur:
        cur.execute("SELECT row_to_json(k)::text FROM jobs_idempotencykey k")
        rows = [row[0] for row in cur.fetchall()]
    assert rows
    decrypted = [crypto.decrypt(k.response_encrypted) for k in IdempotencyKey.objects.all()]
    for text in rows + decrypted:
        assert "whsec_" not in text and '"secret"' not in text
        assert not any(secret in text for secret in secrets)


def test_a_create_replayed_after_its_job_was_deleted_is_a_409_saying_so(api):
    first = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="gone")
    job_id = first.json()["id"]
    assert api.delete(f"{JOBS}{job_id}/").status_code == 204
    again = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="gone")
    assert again.status_code == 409
    assert again.json() == {
        "detail": f"This Idempotency-Key created job {job_id}, which has since been deleted;"
        " the answer is not replayed."
    }
    assert Job.objects.count() == 1  # and nothing new was made


def test_a_create_replayed_after_a_rotation_is_a_409_and_shows_no_secret(api):
    first = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="rotated")
    job_id = first.json()["id"]
    new = api.post(f"{JOBS}{job_id}/rotate-secret/").json()["secret"]
    again = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="rotated")
    assert again.status_code == 409
    detail = again.json()["detail"]
    assert f"created job {job_id}, whose secret has since been rotated" in detail
    assert "shown only once" in detail
    assert first.json()["secret"] not in again.content.decode()
    assert new not in again.content.decode()
    assert_no_secret_stored([first.json()["secret"], new])


def test_a_create_replayed_after_an_edit_still_answers_the_current_secret(api):
    """Only a delete or a rotation changes the answer: the secret given is
    still the one that signs."""
    first = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="edited")
    api.patch(f"{JOBS}{first.json()['id']}/", {"description": "later"}, format="json")
    again = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="edited")
    assert again.status_code == 201 and again.json() == first.json()
    job = Job.objects.get()
    assert job.signing_secrets(job.updated_at) == [again.json()["secret"]]


def test_an_answer_stored_with_its_secret_before_the_upgrade_is_rewritten(api, owner):
    """The migration that stopped storing secrets rewrites older rows: the
    secret goes; a job whose secret is still that one replays it, a job
    rotated since answers 409."""
    kept, rotated = make_job(owner, name="kept"), make_job(owner, name="rotated")
    kept_secret = crypto.decrypt(kept.secret_encrypted)
    rotated_secret = crypto.decrypt(rotated.secret_encrypted)
    rotated.rotate_secret()
    for key, job, secret in (("a", kept, kept_secret), ("b", rotated, rotated_secret)):
        answer = {"id": str(job.pk), "name": job.name, "secret": secret}
        IdempotencyKey.objects.create(
            owner=owner,
            key=key,
            fingerprint="legacy",
            status_code=201,
            response_encrypted=crypto.encrypt(json.dumps(answer)),
            created_at=db_now(),
        )
    migration = importlib.import_module("jobs.migrations.0008_idempotency_secret_digests")
    migration.strip_stored_secrets(apps, None)
    assert_no_secret_stored([kept_secret, rotated_secret])
    replay = idempotency._replay(IdempotencyKey.objects.get(key="a"), "legacy")
    assert replay.data == {"id": str(kept.pk), "name": "kept", "secret": kept_secret}
    with pytest.raises(Conflict, match="has since been rotated"):
        idempotency._replay(IdempotencyKey.objects.get(key="b"), "legacy")


def test_the_same_key_on_a_different_request_is_a_422(api, owner):
    api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    changed = api.post(JOBS, {**BODY, "name": "other"}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert changed.status_code == 422 and "detail" in changed.json()
    job = make_job(owner)
    elsewhere = api.post(f"{JOBS}{job.pk}/trigger/", HTTP_IDEMPOTENCY_KEY="k1")
    assert elsewhere.status_code == 422
    assert Job.objects.count() == 2 and not Run.objects.exists()


def test_keys_belong_to_one_owner(api, other_api):
    mine = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    theirs = other_api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert theirs.status_code == 201 and theirs.json()["id"] != mine.json()["id"]


def test_a_refused_request_does_not_use_up_its_key(api):
    bad = api.post(JOBS, {**BODY, "interval_seconds": 0}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert bad.status_code == 400
    fixed = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert fixed.status_code == 201


def test_a_key_expires_after_24_hours(api):
    first = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k")
    Job.objects.filter(pk=first.json()["id"]).update(name="renamed")
    api.post(JOBS, {**BODY, "name": "other"}, format="json", HTTP_IDEMPOTENCY_KEY="k2")
    IdempotencyKey.objects.update(created_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    later = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert later.status_code == 201 and later.json()["id"] != first.json()["id"]
    # The expired keys were swept on the way: only the new one is left.
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["k"]


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9"])
def test_malformed_keys_are_a_400_naming_the_header(api, key):
    answer = api.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert answer.status_code == 400 and "Idempotency-Key" in answer.json()
    assert not Job.objects.exists()


def test_a_backfill_repeated_over_the_same_window_creates_nothing_new(api, owner):
    job = make_job(owner, cron="*/15 * * * *", interval_seconds=None)
    url = f"{JOBS}{job.pk}/backfill/"
    body = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T02:00:00Z"}
    assert api.post(url, body, format="json").json()["created"] == 8
    ids = set(Run.objects.filter(job=job).values_list("id", flat=True))
    again = api.post(url, body, format="json").json()
    assert again == {"slots": [], "created": 0}
    wider = api.post(url, {**body, "end": "2026-01-01T03:00:00Z"}, format="json").json()
    assert wider["created"] == 4
    assert ids < set(Run.objects.filter(job=job).values_list("id", flat=True))
    assert Run.objects.filter(job=job).count() == 12


def test_concurrent_creates_with_one_key_make_one_job(transactional_db, owner):
    """Both requests pass the lookup before either commits; the unique key row,
    inserted first, makes the second wait and then replay the first answer."""
    clients = [token_client(owner) for _ in range(4)]
    start = threading.Barrier(len(clients))
    answers = []

    def create(client):
        try:
            start.wait(timeout=10)
            answer = client.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="race")
            answers.append((answer.status_code, answer.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert [status for status, _ in answers] == [201] * len(clients)
    assert len({body["id"] for _, body in answers}) == 1
    assert Job.objects.count() == 1 and IdempotencyKey.objects.count() == 1


@pytest.mark.system_resolver
def test_a_create_refused_for_what_its_twin_just_made_replays_the_twin(
    transactional_db, owner, settings
):
    """A request is checked before its key's transaction: its twin (the same
    key and body) may commit in between, and then its name is taken. It
    replays the twin's answer, as if it had come a moment later. The
    system resolver's lookup of ``localhost`` (demo mode allows it) is held
    to place the twin's whole request in that moment."""
    settings.PUNCTUAL_DEMO = True
    settings.PUNCTUAL_TARGET_LOOKUP_SECONDS = 30  # the held lookup answers in time
    body = {**BODY, "url": "http://localhost:9/hook"}
    answers = {}

    def create(name: str) -> None:
        try:
            answer = token_client(owner).post(JOBS, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
            answers[name] = answer
        finally:
            connection.close()

    release = threading.Event()
    with lookup_held("localhost", release) as began:
        late = threading.Thread(target=create, args=("late",))
        late.start()
        # It has found no stored answer, and looks its host up.
        assert began.wait(timeout=30)
        create("twin")
        release.set()
        late.join(timeout=60)
    assert answers["twin"].status_code == 201
    assert answers["late"].status_code == 201, answers["late"].json()
    assert answers["late"]["Idempotent-Replayed"] == "true"
    assert answers["late"].json()["id"] == answers["twin"].json()["id"]
    assert Job.objects.count() == 1

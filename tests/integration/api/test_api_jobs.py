"""The jobs API: CRUD, versions, the job verbs, previews and audit events."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection

from accounts.throttles import OwnerRateThrottle
from core.db import db_now
from jobs import changes
from jobs.models import Job, JobEvent
from runs import job_verbs
from runs.models import Run
from tests.factories import at, make_job, rewrite_job
from tests.integration.api.support import PUBLIC_URL, token_client

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def create(api, **fields):
    body = {"name": "nightly report", "interval_seconds": 60, "url": PUBLIC_URL, **fields}
    response = api.post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_create_answers_201_with_the_secret_once(api):
    job = create(api, cron="0 2 * * *", interval_seconds=None, timezone="Europe/Berlin")
    assert job["secret"].startswith("whsec_")
    assert job["state"] == "active" and job["version"] == 1 and job["owner"] == "alice"
    assert job["next_fire_at"].endswith(":00Z")
    detail = api.get(f"{JOBS}{job['id']}/")
    listed = api.get(JOBS).json()["results"][0]
    patched = api.patch(f"{JOBS}{job['id']}/", {"description": "x"}, format="json")
    for answer in (detail.json(), listed, patched.json()):
        assert "secret" not in answer
        assert job["secret"] not in str(answer)
    stored = Job.objects.get(pk=job["id"])
    assert job["secret"] not in stored.secret_encrypted
    assert stored.signing_secrets(db_now()) == [job["secret"]]


def test_defaults_follow_the_field_table(api):
    job = create(api)
    assert {k: job[k] for k in DEFAULTS} == DEFAULTS


DEFAULTS = {
    "description": "",
    "cron": None,
    "timezone": "UTC",
    "start_at": None,
    "target_kind": "webhook",
    "payload": {},
    "timeout_seconds": 30,
    "max_attempts": 3,
    "retry_backoff_seconds": 10,
    "misfire_policy": "skip",
    "max_catchup": 3,
    "misfire_grace_seconds": 60,
    "overlap_policy": "skip",
    "jitter_seconds": 0,
    "pause_after_failures": None,
    "consecutive_failures": 0,
    "last_run": None,
}


def test_a_pull_job_needs_no_url(api):
    job = create(api, target_kind="pull", url="")
    assert job["target_kind"] == "pull" and job["url"] == ""


def test_unicode_and_200_character_names_are_fine(api):
    assert create(api, name="Ünïcødé 日本語 🚀")["name"] == "Ünïcødé 日本語 🚀"
    assert len(create(api, name="é" * 200)["name"]) == 200


def test_get_answers_an_etag_and_if_match_guards_writes(api):
    job = create(api)
    url = f"{JOBS}{job['id']}/"
    assert api.get(url)["ETag"] == '"1"'

    stale = api.patch(url, {"description": "a"}, format="json", HTTP_IF_MATCH='"7"')
    assert stale.status_code == 412
    assert "detail" in stale.json()
    assert Job.objects.get(pk=job["id"]).description == ""

    ok = api.patch(url, {"description": "a"}, format="json", HTTP_IF_MATCH='"1"')
    assert ok.status_code == 200 and ok["ETag"] == '"2"' and ok.json()["version"] == 2
    weak = api.patch(url, {"description": "b"}, format="json", HTTP_IF_MATCH='W/"2"')
    assert weak.status_code == 412
    assert api.put(url, {**PUT_BODY}, format="json", HTTP_IF_MATCH='"1"').status_code == 412
    assert api.delete(url, HTTP_IF_MATCH='"1"').status_code == 412
    assert api.delete(url, HTTP_IF_MATCH='"0", "2"').status_code == 204


PUT_BODY = {"name": "replaced", "cron": "*/5 * * * *", "url": PUBLIC_URL}


def test_put_replaces_and_resets_omitted_fields_to_defaults(api):
    job = create(api, description="old", max_attempts=7, payload={"a": 1})
    answer = api.put(f"{JOBS}{job['id']}/", PUT_BODY, format="json")
    assert answer.status_code == 200, answer.json()
    data = answer.json()
    assert (data["name"], data["cron"], data["interval_seconds"]) == (
        "replaced",
        "*/5 * * * *",
        None,
    )
    assert (data["description"], data["max_attempts"], data["payload"]) == ("", 3, {})


def test_patch_with_the_same_values_is_not_a_change(api):
    job = create(api, description="same")
    answer = api.patch(f"{JOBS}{job['id']}/", {"description": "same"}, format="json")
    assert answer.json()["version"] == 1
    assert list(JobEvent.objects.values_list("action", flat=True)) == ["created"]


def test_editing_the_schedule_recomputes_next_fire_from_now(api):
    job = create(api, interval_seconds=3600)
    answer = api.patch(
        f"{JOBS}{job['id']}/", {"cron": "*/5 * * * *", "interval_seconds": None}, format="json"
    ).json()
    next_fire = dt.datetime.fromisoformat(answer["next_fire_at"])
    now = db_now()
    assert now < next_fire <= now + dt.timedelta(minutes=5)
    assert next_fire.minute % 5 == 0 and next_fire.second == 0


def test_switching_schedule_kind_needs_the_other_one_nulled(api):
    job = create(api)
    answer = api.patch(f"{JOBS}{job['id']}/", {"cron": "@daily"}, format="json")
    assert answer.status_code == 400
    assert set(answer.json()) == {"cron", "interval_seconds"}


def test_every_change_writes_an_audit_event_without_the_secret(api, owner):
    job = create(api)
    url = f"{JOBS}{job['id']}/"
    api.patch(url, {"name": "renamed", "payload": {"k": "v"}}, format="json")
    api.post(f"{url}pause/", {"note": "maintenance"}, format="json")
    api.post(f"{url}resume/", {}, format="json")
    api.post(f"{url}trigger/")
    api.post(f"{url}rotate-secret/")
    api.delete(url)
    events = list(JobEvent.objects.order_by("id"))
    assert [e.action for e in events] == [
        "created",
        "updated",
        "paused",
        "resumed",
        "triggered",
        "secret_rotated",
        "deleted",
    ]
    assert all(e.channel == "api" and e.actor == owner for e in events)
    assert events[1].changes == {
        "name": ["nightly report", "renamed"],
        "payload": [changes.digest({}), changes.digest({"k": "v"})],
    }
    assert events[2].changes["pause_note"] == ["", "maintenance"]
    assert events[2].changes["state"] == ["active", "paused"]
    assert events[3].changes["state"] == ["paused", "active"]
    assert list(events[5].changes) == ["previous_secret_until"]
    assert events[6].changes["deleted_at"][0] is None
    recorded = str([e.changes for e in events])
    assert job["secret"] not in recorded and "whsec_" not in recorded


def test_events_are_listed_newest_first(api):
    job = create(api)
    api.patch(f"{JOBS}{job['id']}/", {"description": "x"}, format="json")
    events = api.get(f"{JOBS}{job['id']}/events/").json()["results"]
    assert [e["action"] for e in events] == ["updated", "created"]
    assert events[0]["actor"] == "alice" and events[0]["channel"] == "api"


def test_delete_answers_204_cancels_waiting_runs_and_hides_the_job(api, owner):
    job = make_job(owner)
    run = job_verbs.trigger(job)
    answer = api.delete(f"{JOBS}{job.pk}/")
    assert answer.status_code == 204
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", "deleted")
    assert api.get(f"{JOBS}{job.pk}/").status_code == 404
    assert api.get(JOBS).json()["results"] == []
    # A new job may take the deleted one's name.
    assert (
        api.post(
            JOBS, {"name": job.name, "interval_seconds": 60, "url": PUBLIC_URL}, format="json"
        ).status_code
        == 201
    )


def test_duplicate_name_is_a_400_naming_the_field(api):
    create(api, name="dup")
    answer = api.post(
        JOBS, {"name": "dup", "interval_seconds": 60, "url": PUBLIC_URL}, format="json"
    )
    assert answer.status_code == 400 and list(answer.json()) == ["name"]


def test_another_owner_may_use_the_same_name(api, other_api):
    create(api, name="same")
    create(other_api, name="same")


def test_pause_and_resume(api, owner):
    job = make_job(owner)
    run = job_verbs.trigger(job)
    url = f"{JOBS}{job.pk}/"
    resume_at = (db_now() + dt.timedelta(days=1)).isoformat()
    paused = api.post(f"{url}pause/", {"note": "deploy", "resume_at": resume_at}, format="json")
    assert paused.status_code == 200
    data = paused.json()
    assert (data["state"], data["pause_note"], data["next_fire_at"]) == ("paused", "deploy", None)
    assert data["resume_at"] is not None
    run.refresh_from_db()
    assert run.state == "cancelled"

    dry = api.post(f"{url}resume/", {"dry_run": True}, format="json").json()
    assert dry["state"] == "paused" and dry["resume"]["dry_run"] is True
    resumed = api.post(f"{url}resume/", {}, format="json").json()
    assert resumed["state"] == "active" and resumed["next_fire_at"] is not None


def test_pausing_again_keeps_when_the_pause_began(api, owner):
    job = make_job(owner)
    first = api.post(f"{JOBS}{job.pk}/pause/", {}, format="json").json()
    again = api.post(f"{JOBS}{job.pk}/pause/", {"note": "still"}, format="json").json()
    assert again["paused_at"] == first["paused_at"] and again["pause_note"] == "still"


def test_resume_with_catch_up_runs_the_last_max_catchup_fires(api, owner):
    job = make_job(owner, interval_seconds=60, max_catchup=2)
    job_verbs.pause(job)
    ten_minutes_ago = db_now() - dt.timedelta(minutes=10)
    rewrite_job(job, created_at=ten_minutes_ago, paused_at=ten_minutes_ago)
    answer = api.post(f"{JOBS}{job.pk}/resume/", {"catch_up": True}, format="json").json()
    assert len(answer["resume"]["catch_up"]) == 2 and answer["resume"]["created"] == 2
    assert Run.objects.filter(job=job, kind="catch_up").count() == 2


def test_pause_refuses_a_resume_at_in_the_past(api, owner):
    job = make_job(owner)
    answer = api.post(
        f"{JOBS}{job.pk}/pause/", {"resume_at": "2001-01-01T00:00:00Z"}, format="json"
    )
    assert answer.status_code == 400 and list(answer.json()) == ["resume_at"]


def test_trigger_makes_a_manual_run_at_database_now(api, owner):
    job = make_job(owner)
    before = db_now()
    answer = api.post(f"{JOBS}{job.pk}/trigger/")
    assert answer.status_code == 201
    run = Run.objects.get(pk=answer.json()["id"])
    assert (run.kind, run.state, run.job_id) == ("manual", "pending", job.pk)
    assert before <= run.scheduled_at <= db_now()


def test_rotate_secret_answers_the_new_secret_and_keeps_the_old_for_a_day(api):
    job = create(api)
    answer = api.post(f"{JOBS}{job['id']}/rotate-secret/")
    assert answer.status_code == 200
    new = answer.json()["secret"]
    assert new.startswith("whsec_") and new != job["secret"]
    stored = Job.objects.get(pk=job["id"])
    assert stored.signing_secrets(db_now()) == [new, job["secret"]]


def test_job_preview_lists_the_next_fires(api, owner):
    job = make_job(owner, cron="0 9 * * *", interval_seconds=None, timezone="Europe/Berlin")
    answer = api.get(
        f"{JOBS}{job.pk}/preview/", {"count": 3, "after": "2026-03-28T12:00:00Z"}
    ).json()
    # Berlin switches to summer time on 2026-03-29: 09:00 is 08:00Z, then 07:00Z.
    assert answer["fires"] == [
        "2026-03-29T07:00:00Z",
        "2026-03-30T07:00:00Z",
        "2026-03-31T07:00:00Z",
    ]
    assert len(api.get(f"{JOBS}{job.pk}/preview/").json()["fires"]) == 5
    bad = api.get(f"{JOBS}{job.pk}/preview/", {"count": 101, "after": "yesterday"})
    assert bad.status_code == 400 and set(bad.json()) == {"count", "after"}


def test_schedule_preview_validates_like_job_creation(api):
    answer = api.post(
        "/api/v1/schedules/preview/",
        {
            "interval_seconds": 90,
            "start_at": "2026-01-01T00:00:00Z",
            "after": "2026-01-01T00:00:00Z",
            "count": 2,
        },
        format="json",
    )
    assert answer.json()["fires"] == ["2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z"]
    never = api.post("/api/v1/schedules/preview/", {"cron": "0 0 30 2 *"}, format="json")
    assert never.status_code == 400 and list(never.json()) == ["cron"]
    both = api.post(
        "/api/v1/schedules/preview/", {"cron": "@daily", "interval_seconds": 5}, format="json"
    )
    assert both.status_code == 400


def test_backfill_creates_runs_for_past_slots(api, owner):
    job = make_job(owner, cron="0 * * * *", interval_seconds=None)
    body = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T03:00:00Z"}
    dry = api.post(f"{JOBS}{job.pk}/backfill/", {**body, "dry_run": True}, format="json").json()
    assert dry == {
        "slots": ["2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"],
        "created": 0,
    }
    assert not Run.objects.filter(job=job).exists()
    done = api.post(f"{JOBS}{job.pk}/backfill/", body, format="json").json()
    assert done["created"] == 3
    assert set(Run.objects.filter(job=job).values_list("kind", flat=True)) == {"backfill"}


def test_backfill_refuses_a_window_over_1000_fires_and_the_future(api, owner):
    job = make_job(owner, cron="* * * * *", interval_seconds=None)
    big = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}
    answer = api.post(f"{JOBS}{job.pk}/backfill/", big, format="json")
    assert answer.status_code == 400 and list(answer.json()) == ["end"]
    future = {"start": "2026-01-01T00:00:00Z", "end": "2999-01-01T00:00:00Z"}
    assert api.post(f"{JOBS}{job.pk}/backfill/", future, format="json").status_code == 400
    assert not Run.objects.filter(job=job).exists()


def test_job_list_shows_the_last_run(api, owner):
    job = make_job(owner)
    Run.objects.create_for_fires(
        job, [at("2026-01-01T00:00:00"), at("2026-01-02T00:00:00")], kind="backfill"
    )
    Run.objects.filter(job=job).update(state="succeeded")  # attempted: a last run
    [listed] = api.get(JOBS).json()["results"]
    assert listed["last_run"]["scheduled_at"] == "2026-01-02T00:00:00Z"
    assert api.get(f"{JOBS}{job.pk}/").json()["last_run"] == listed["last_run"]


def test_job_list_is_cursor_paginated_by_name(api, owner):
    for name in ("c", "a", "b"):
        make_job(owner, name=name)
    first = api.get(JOBS, {"page_size": 2}).json()
    assert [j["name"] for j in first["results"]] == ["a", "b"]
    second = api.get(first["next"])
    assert [j["name"] for j in second.json()["results"]] == ["c"]


def test_superusers_see_every_owner_s_jobs(admin_api, owner, other_owner):
    make_job(owner, name="a")
    make_job(other_owner, name="b")
    assert {j["name"] for j in admin_api.get(JOBS).json()["results"]} == {"a", "b"}


def test_the_throttle_is_per_owner_and_answers_429_json(api, other_api, monkeypatch):
    monkeypatch.setattr(OwnerRateThrottle, "THROTTLE_RATES", {"user": "3/day", "anon": "60/min"})
    assert [api.get(JOBS).status_code for _ in range(3)] == [200, 200, 200]
    limited = api.get(JOBS)
    assert limited.status_code == 429 and "detail" in limited.json()
    assert int(limited["Retry-After"]) > 0
    assert other_api.get(JOBS).status_code == 200


def test_unknown_api_paths_answer_json_404(api):
    for path in ("/api/v1/nope/", "/api/v1/jobs"):
        answer = api.post(path, {}, format="json")
        assert answer.status_code == 404 and "detail" in answer.json()


def test_the_schema_and_swagger_ui_are_served_without_a_cdn(anon):
    schema = anon.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert "/api/v1/jobs/{id}/trigger/" in schema.json()["paths"]
    docs = anon.get("/api/v1/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "swagger-ui" in html and "cdn" not in html.lower() and "//unpkg" not in html


def test_two_concurrent_creates_of_one_name_make_one_job_and_a_400(transactional_db, owner):
    """Both may pass the serializer's name check before either commits: the
    unique constraint decides, and the loser gets a 400 naming the field."""
    clients = [token_client(owner) for _ in range(4)]
    start = threading.Barrier(len(clients))
    answers = []

    def create(client):
        try:
            start.wait(timeout=10)
            body = {"name": "contested", "interval_seconds": 60, "url": PUBLIC_URL}
            answer = client.post(JOBS, body, format="json")
            answers.append((answer.status_code, answer.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(status for status, _ in answers) == [201, 400, 400, 400]
    assert all(list(body) == ["name"] for status, body in answers if status == 400)
    assert Job.objects.count() == 1

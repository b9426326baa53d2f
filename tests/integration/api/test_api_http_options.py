"""A webhook job's method, body mode, extra headers and authentication
through the API (docs/guides/api.md "Calling any HTTP endpoint"): every bad
value refused with a 400 naming its field and nothing written, through a
single create, a bulk create and a PATCH; the secrets stored encrypted and
never answered, exported or put in an event."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.forms.models import model_to_dict

from jobs import http_options
from jobs.models import IdempotencyKey, Job, JobEvent
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
VALID = {"name": "ok", "interval_seconds": 60, "url": PUBLIC_URL}
TOKEN = "tok-7f3a9c1e-secret-bearer"
HEADER_VALUE = "hv-51d2-secret-header-value"
PASSWORD = "pw-e8b0-secret-password"

# (what the request adds to a valid job, the field the 400 must name)
CASES = [
    ({"method": "FETCH"}, "method"),
    ({"method": 5}, "method"),
    ({"method": "get"}, "method"),
    ({"body_mode": "raw"}, "body_mode"),
    ({"method": "GET", "body_mode": "envelope"}, "body_mode"),
    ({"method": "GET", "body_mode": "payload"}, "body_mode"),
    ({"headers": "X-Key: 1"}, "headers"),
    ({"headers": ["X-Key", "1"]}, "headers"),
    ({"headers": {"Host": "example.com"}}, "headers"),
    ({"headers": {"webhook-id": "x"}}, "headers"),
    ({"headers": {"Webhook-Signature": "v1,x"}}, "headers"),
    ({"headers": {"Content-Length": "3"}}, "headers"),
    ({"headers": {"Idempotency-Key": "k"}}, "headers"),
    ({"headers": {"Connection": "close"}}, "headers"),
    ({"headers": {"Keep-Alive": "5"}}, "headers"),
    ({"headers": {"Proxy-Authorization": "x"}}, "headers"),
    ({"headers": {"TE": "trailers"}}, "headers"),
    ({"headers": {"Trailer": "x"}}, "headers"),
    ({"headers": {"Transfer-Encoding": "chunked"}}, "headers"),
    ({"headers": {"Upgrade": "websocket"}}, "headers"),
    ({"headers": {"authorization": "x"}, "auth_kind": "bearer", "auth_token": "t"}, "headers"),
    (
        {"headers": {"Authorization": "Token x"}, "auth_kind": "bearer", "auth_token": "t"},
        "headers",
    ),
    ({"headers": {"Bad Name": "1"}}, "headers"),
    ({"headers": {"X-Colon:": "1"}}, "headers"),
    ({"headers": {"": "1"}}, "headers"),
    ({"headers": {"X-" + "a" * 100: "1"}}, "headers"),
    ({"headers": {"X-Key": "a\r\nInjected: 1"}}, "headers"),
    ({"headers": {"X-Key": "a\nb"}}, "headers"),
    ({"headers": {"X-Key": ""}}, "headers"),
    ({"headers": {"X-Key": "é"}}, "headers"),
    ({"headers": {"X-Key": "a" * 4001}}, "headers"),
    ({"headers": {"X-Key": 1}}, "headers"),
    ({"headers": {"X-Key": "1", "x-key": "2"}}, "headers"),
    ({"headers": {f"X-{i}": "1" for i in range(21)}}, "headers"),
    ({"auth_kind": "digest"}, "auth_kind"),
    ({"auth_kind": None}, "auth_kind"),
    ({"auth_kind": "bearer"}, "auth_token"),
    ({"auth_kind": "bearer", "auth_token": ""}, "auth_token"),
    ({"auth_kind": "bearer", "auth_token": "two words"}, "auth_token"),
    ({"auth_kind": "bearer", "auth_token": "t\n"}, "auth_token"),
    ({"auth_kind": "bearer", "auth_token": "t" * 4001}, "auth_token"),
    ({"auth_kind": "bearer", "auth_token": 12}, "auth_token"),
    ({"auth_token": "t"}, "auth_token"),
    (
        {"auth_kind": "basic", "auth_token": "t", "auth_username": "u", "auth_password": "p"},
        "auth_token",
    ),
    ({"auth_kind": "basic", "auth_password": "p"}, "auth_username"),
    ({"auth_kind": "basic", "auth_username": "", "auth_password": "p"}, "auth_username"),
    ({"auth_kind": "basic", "auth_username": "a:b", "auth_password": "p"}, "auth_username"),
    ({"auth_kind": "basic", "auth_username": "a\rb", "auth_password": "p"}, "auth_username"),
    ({"auth_kind": "basic", "auth_username": "u" * 201, "auth_password": "p"}, "auth_username"),
    ({"auth_kind": "bearer", "auth_token": "t", "auth_username": "u"}, "auth_username"),
    ({"auth_kind": "basic", "auth_username": "u"}, "auth_password"),
    ({"auth_kind": "basic", "auth_username": "u", "auth_password": "a\x07b"}, "auth_password"),
    ({"auth_kind": "basic", "auth_username": "u", "auth_password": "p" * 1001}, "auth_password"),
    ({"auth_kind": "basic", "auth_username": "u", "auth_password": None}, "auth_password"),
    ({"auth_password": "p"}, "auth_password"),
    ({"header_names": ["X-Key"]}, "header_names"),
]


def _id(case) -> str:
    body, field = case
    return f"{field}-{json.dumps(body)[:60]}"


def counts() -> tuple[int, int, int]:
    return Job.objects.count(), JobEvent.objects.count(), IdempotencyKey.objects.count()


def _names_field(answer, field: str, path: tuple = ()) -> list[str]:
    data = answer.json()
    for key in path:
        data = data[key]
    assert field in data, data
    messages = data[field]
    assert messages and all(isinstance(m, str) and m for m in messages)
    return messages


@pytest.mark.parametrize("body,field", CASES, ids=[_id(c) for c in CASES])
def test_bad_request_options_are_refused_naming_the_field_and_write_nothing(
    api, owner, body, field
):
    make_job(owner, name="mine", url=PUBLIC_URL)
    job = Job.objects.get(name="mine")
    snapshot = model_to_dict(job)
    before = counts()

    single = api.post(JOBS, {**VALID, **body}, format="json", HTTP_IDEMPOTENCY_KEY="bad-1")
    assert single.status_code == 400, single.content[:300]
    _names_field(single, field)

    bulk = api.post(JOBS, [{**VALID, "name": "fine"}, {**VALID, **body}], format="json")
    assert bulk.status_code == 400, bulk.content[:300]
    _names_field(bulk, field, ("1",))

    if field != "header_names":
        patch = api.patch(f"{JOBS}{job.pk}/", body, format="json")
        assert patch.status_code == 400, patch.content[:300]
        _names_field(patch, field)

    assert counts() == before
    assert model_to_dict(Job.objects.get(pk=job.pk)) == snapshot


def test_a_reserved_header_is_refused_by_its_name(api):
    answer = api.post(
        JOBS, {**VALID, "headers": {"X-Fine": "1", "Host": "a", "Upgrade": "h2c"}}, format="json"
    )
    assert answer.status_code == 400
    [message] = answer.json()["headers"]
    assert "Host" in message and "Upgrade" in message and "X-Fine" not in message


def test_authorization_is_a_header_of_your_own_only_without_auth_kind(api):
    own = api.post(JOBS, {**VALID, "headers": {"Authorization": f"Token {TOKEN}"}}, format="json")
    assert own.status_code == 201, own.json()
    assert own.json()["header_names"] == ["Authorization"]
    # Setting an authentication kind on it later names the clash.
    clash = api.patch(
        f"{JOBS}{own.json()['id']}/", {"auth_kind": "bearer", "auth_token": "t"}, format="json"
    )
    assert clash.status_code == 400
    assert "Authorization" in clash.json()["headers"][0]


def test_get_gets_no_body_unless_told_and_never_one(api):
    get = api.post(JOBS, {**VALID, "method": "GET"}, format="json")
    assert get.status_code == 201, get.json()
    assert (get.json()["method"], get.json()["body_mode"]) == ("GET", "none")
    delete = api.post(JOBS, {**VALID, "name": "d", "method": "DELETE"}, format="json")
    assert delete.json()["body_mode"] == "none"
    delete_with = api.post(
        JOBS,
        {**VALID, "name": "d2", "method": "DELETE", "body_mode": "payload"},
        format="json",
    )
    assert delete_with.json()["body_mode"] == "payload"
    post = api.post(JOBS, {**VALID, "name": "p"}, format="json")
    assert (post.json()["method"], post.json()["body_mode"]) == ("POST", "envelope")
    # A PATCH to GET drops the body it could not send; back to PUT keeps none.
    job = f"{JOBS}{post.json()['id']}/"
    assert api.patch(job, {"method": "GET"}, format="json").json()["body_mode"] == "none"
    assert api.patch(job, {"method": "PUT"}, format="json").json()["body_mode"] == "none"
    payload = api.patch(job, {"body_mode": "payload"}, format="json")
    assert payload.json()["body_mode"] == "payload"


def _stored_text(job_id) -> str:
    """Everything the database holds about the job, its events and
    idempotency answers, as text."""
    with connection.cursor() as cur:
        cur.execute("SELECT row_to_json(j)::text FROM jobs_job j WHERE id = %s", [job_id])
        [row] = cur.fetchone()
        cur.execute("SELECT coalesce(string_agg(changes::text, ' '), '') FROM jobs_jobevent")
        [events] = cur.fetchone()
        cur.execute(
            "SELECT coalesce(string_agg(response_encrypted, ' '), '') FROM jobs_idempotencykey"
        )
        [answers] = cur.fetchone()
    return row + events + answers


def test_secrets_are_stored_encrypted_and_never_answered_exported_or_in_events(api):
    made = api.post(
        JOBS,
        {
            **VALID,
            "method": "GET",
            "headers": {"X-Api-Key": HEADER_VALUE},
            "auth_kind": "bearer",
            "auth_token": TOKEN,
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY="made-once",
    )
    assert made.status_code == 201, made.json()
    body = made.content.decode()
    assert TOKEN not in body and HEADER_VALUE not in body
    data = made.json()
    assert data["header_names"] == ["X-Api-Key"]
    assert data["auth_kind"] == "bearer"
    assert not {"headers", "auth_token", "auth_username", "auth_password"} & set(data)
    job = Job.objects.get(pk=data["id"])
    assert http_options.unseal(job.auth_encrypted) == {"auth_token": TOKEN}
    assert http_options.unseal(job.headers_encrypted) == {"X-Api-Key": HEADER_VALUE}

    # Changed: the old values nowhere either.
    url = f"{JOBS}{job.pk}/"
    changed = api.patch(
        url,
        {"auth_kind": "basic", "auth_username": "robot", "auth_password": PASSWORD},
        format="json",
    )
    assert changed.status_code == 200, changed.json()
    assert PASSWORD not in changed.content.decode()

    stored = _stored_text(job.pk)
    for secret in (TOKEN, HEADER_VALUE, PASSWORD, "robot"):
        assert secret not in stored
    events = api.get(f"{url}events/").content.decode()
    for secret in (TOKEN, HEADER_VALUE, PASSWORD, "robot"):
        assert secret not in events
    [updated, created] = api.get(f"{url}events/").json()["results"]
    for event in (created, updated):
        # Not even encrypted: a ciphertext and its key leak together.
        assert not {"auth_encrypted", "headers_encrypted", "headers", "auth_token"} & set(
            event["changes"]
        )
    assert created["changes"]["header_names"] == ["X-Api-Key"]
    assert created["changes"]["auth_credentials"] == "set"
    assert created["changes"]["header_values"] == "set"
    assert updated["changes"]["auth_kind"] == ["bearer", "basic"]
    assert updated["changes"]["auth_credentials"] == "changed"

    exported = api.get(f"{JOBS}export/")
    text = exported.content.decode()
    for secret in (TOKEN, HEADER_VALUE, PASSWORD, "robot"):
        assert secret not in text
    [item] = exported.json()
    assert item["method"] == "GET" and item["body_mode"] == "none"
    assert not {"headers", "header_names", "auth_kind", "auth_token"} & set(item)
    # The export is still a create as it is: a job without them.
    again = api.post(JOBS, [{**item, "name": "copy"}], format="json")
    assert again.status_code == 201, again.json()
    assert again.json()[0]["auth_kind"] == "none"


def test_a_credential_not_sent_is_kept_and_resending_one_changes_nothing(api):
    made = api.post(
        JOBS,
        {
            **VALID,
            "auth_kind": "basic",
            "auth_username": "robot",
            "auth_password": PASSWORD,
            "headers": {"X-Api-Key": HEADER_VALUE},
        },
        format="json",
    )
    assert made.status_code == 201, made.json()
    url = f"{JOBS}{made.json()['id']}/"
    job = Job.objects.get(pk=made.json()["id"])
    sealed = (job.auth_encrypted, job.headers_encrypted)

    # Another field changed: the credentials and headers stay as they were.
    other = api.patch(url, {"description": "edited"}, format="json")
    assert other.json()["version"] == 2
    job.refresh_from_db()
    assert (job.auth_encrypted, job.headers_encrypted) == sealed
    # A new password alone keeps the user name.
    api.patch(url, {"auth_password": "new-pass"}, format="json")
    job.refresh_from_db()
    assert http_options.unseal(job.auth_encrypted) == {
        "auth_username": "robot",
        "auth_password": "new-pass",
    }
    # The same values again: no change, no new version, no event.
    events = JobEvent.objects.filter(job=job).count()
    same = api.patch(
        url,
        {"auth_password": "new-pass", "headers": {"X-Api-Key": HEADER_VALUE}},
        format="json",
    )
    assert same.json()["version"] == job.version
    assert JobEvent.objects.filter(job=job).count() == events
    # A PUT without auth_kind is a job without authentication; headers not
    # sent are kept; {} removes them.
    put = api.put(url, {**VALID, "name": "ok"}, format="json")
    assert put.json()["auth_kind"] == "none"
    assert put.json()["header_names"] == ["X-Api-Key"]
    cleared = api.patch(url, {"headers": {}}, format="json")
    assert cleared.json()["header_names"] == []
    job.refresh_from_db()
    assert (job.auth_encrypted, job.headers_encrypted) == ("", "")
    # Switching kind needs the new kind's credentials.
    switch = api.patch(url, {"auth_kind": "bearer"}, format="json")
    assert switch.status_code == 400
    assert "auth_token" in switch.json()

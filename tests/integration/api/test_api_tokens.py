"""API tokens: only digests in the database; rotate, revoke and expiry each
refuse the old key with a 401 that says why; an owner reaches only their own
token; the old authtoken keys are converted and keep working."""

from __future__ import annotations

import datetime as dt
import importlib

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts import tokens
from accounts.models import ApiToken
from core.db import db_now
from tests.integration.api.support import api_key

JOBS = "/api/v1/jobs/"
TOKEN = "/api/v1/token/"
ROTATE = "/api/v1/token/rotate/"

_conversion = importlib.import_module("accounts.migrations.0003_hash_authtoken_keys")


def client_with(key: str, scheme: str = "Token") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {key}")
    return client


def rows_containing(text: str) -> list[str]:
    """Every table of the database whose rows, as text, contain ``text``."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT quote_ident(table_name) FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        )
        tables = [name for (name,) in cur.fetchall()]
        found = []
        for table in tables:
            cur.execute(
                f"SELECT EXISTS (SELECT 1 FROM {table} AS r WHERE r::text LIKE %s)", [f"%{text}%"]
            )
            if cur.fetchone()[0]:
                found.append(table)
    return found


def test_the_database_holds_only_a_digest_of_the_key(owner):
    key = api_key(owner)
    assert client_with(key).get(JOBS).status_code == 200
    secret_part = key[tokens.PREFIX_LENGTH :]
    assert rows_containing(secret_part) == []
    # For contrast, the search does find what is stored: the digest and the prefix.
    assert rows_containing(tokens.digest(key)) == ["accounts_apitoken"]
    [row] = ApiToken.objects.filter(user=owner).values("prefix", "digest")
    assert row == {"prefix": key[: tokens.PREFIX_LENGTH], "digest": tokens.digest(key)}


def test_rotate_answers_the_new_key_once_and_the_old_one_gets_401(owner):
    old = api_key(owner)
    answer = client_with(old).post(ROTATE, {}, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    new = body["key"]
    assert new != old and body["prefix"] == new[: tokens.PREFIX_LENGTH]
    assert body["expires_at"] is None

    refused = client_with(old).get(JOBS)
    assert refused.status_code == 401
    assert "replaced by a newer one" in refused.json()["detail"]
    assert refused["WWW-Authenticate"] == "Token"
    assert client_with(new).get(JOBS).status_code == 200
    # Reading the token never shows the key.
    shown = client_with(new).get(TOKEN).json()
    assert shown["prefix"] == body["prefix"] and "key" not in shown
    assert new not in str(shown)


def test_a_key_two_rotations_old_is_simply_invalid(owner):
    first = api_key(owner)
    second = client_with(first).post(ROTATE).json()["key"]
    client_with(second).post(ROTATE)
    assert client_with(first).get(JOBS).json() == {"detail": "Invalid token."}
    assert ApiToken.objects.filter(user=owner).count() == 2  # the live one and the last retired


def test_revoke_refuses_the_key_from_then_on(owner):
    key = api_key(owner)
    assert client_with(key).delete(TOKEN).status_code == 204
    refused = client_with(key).get(JOBS)
    assert refused.status_code == 401 and "was revoked" in refused.json()["detail"]
    # A session can still see there is none, and make a new one.
    session = APIClient()
    session.force_login(owner)
    assert session.get(TOKEN).status_code == 404
    assert session.delete(TOKEN).status_code == 404
    new = session.post(ROTATE, {}, format="json").json()["key"]
    assert client_with(new).get(JOBS).status_code == 200


def test_an_expired_token_gets_401_saying_when(owner):
    key = api_key(owner)
    assert client_with(key).get(JOBS).status_code == 200
    ApiToken.objects.filter(user=owner).update(expires_at=db_now() - dt.timedelta(seconds=1))
    refused = client_with(key).get(JOBS)
    assert refused.status_code == 401 and "expired at" in refused.json()["detail"]


def test_an_inactive_user_s_token_gets_401(owner):
    key = api_key(owner)
    type(owner).objects.filter(pk=owner.pk).update(is_active=False)
    assert client_with(key).get(JOBS).status_code == 401


def test_rotate_with_an_expiry_in_days_or_at_a_time(owner):
    key = api_key(owner)
    before = db_now()
    body = client_with(key).post(ROTATE, {"expires_in_days": 30}, format="json").json()
    expires = dt.datetime.fromisoformat(body["expires_at"])
    assert before + dt.timedelta(days=30) <= expires <= db_now() + dt.timedelta(days=30)

    at = "2100-01-01T00:00:00Z"
    body = client_with(body["key"]).post(ROTATE, {"expires_at": at}, format="json").json()
    assert body["expires_at"] == at
    assert client_with(body["key"]).get(TOKEN).json()["expires_at"] == at


@pytest.mark.parametrize(
    "payload,field",
    [
        ({"expires_in_days": 0}, "expires_in_days"),
        ({"expires_in_days": 3651}, "expires_in_days"),
        ({"expires_in_days": "5"}, "expires_in_days"),
        ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"expires_at": "2100-01-01T00:00:00"}, "expires_at"),
        ({"expires_in_days": 5, "expires_at": "2100-01-01T00:00:00Z"}, "expires_at"),
        ({"expires": 5}, "expires"),
    ],
)
def test_a_bad_rotation_is_a_400_naming_the_field_and_changes_nothing(owner, payload, field):
    key = api_key(owner)

    def state():
        return list(ApiToken.objects.values_list("id", "digest", "expires_at", "retired_at"))

    before = state()
    answer = client_with(key).post(ROTATE, payload, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.content
    assert state() == before
    assert client_with(key).get(JOBS).status_code == 200


def test_an_owner_rotates_and_revokes_only_their_own_token(owner, other_owner):
    mine, theirs = api_key(owner), api_key(other_owner)
    their_row = ApiToken.objects.get(user=other_owner)
    new = client_with(mine).post(ROTATE).json()["key"]
    assert client_with(new).delete(TOKEN).status_code == 204
    assert client_with(theirs).get(JOBS).status_code == 200
    assert ApiToken.objects.get(pk=their_row.pk).retired_at is None
    assert client_with(theirs).get(TOKEN).json()["prefix"] == theirs[: tokens.PREFIX_LENGTH]


def test_last_used_moves_at_most_once_a_minute(owner):
    key = api_key(owner)
    client_with(key).get(JOBS)
    first = ApiToken.objects.get(user=owner).last_used_at
    assert first is not None
    with CaptureQueriesContext(connection) as queries:
        client_with(key).get(JOBS)
    assert not [q for q in queries if q["sql"].startswith('UPDATE "accounts_apitoken"')]
    assert ApiToken.objects.get(user=owner).last_used_at == first
    ApiToken.objects.filter(user=owner).update(last_used_at=first - dt.timedelta(minutes=2))
    client_with(key).get(JOBS)
    assert ApiToken.objects.get(user=owner).last_used_at > first - dt.timedelta(minutes=2)


def test_two_processes_that_read_a_stale_last_used_write_it_once(owner):
    key = api_key(owner)
    stale = ApiToken.objects.annotate(db_now=Now()).get(user=owner)  # read by both
    tokens.authenticate_key(key)  # the first one writes
    written = ApiToken.objects.get(user=owner).last_used_at
    tokens._note_use(stale, stale.db_now)  # the second one, from its stale read
    assert ApiToken.objects.get(user=owner).last_used_at == written


def test_bearer_works_too_and_a_malformed_header_is_a_clear_401(owner):
    key = api_key(owner)
    assert client_with(key, scheme="Bearer").get(JOBS).status_code == 200
    spaced = client_with(f"{key} extra").get(JOBS)
    assert spaced.status_code == 401 and "without spaces" in spaced.json()["detail"]
    assert client_with("").get(JOBS).status_code == 401


def test_old_authtoken_keys_are_hashed_keep_working_and_their_table_is_dropped(owner):
    legacy = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cur:
        cur.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY,"
            " created timestamptz NOT NULL, user_id integer NOT NULL UNIQUE)"
        )
        cur.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [legacy, owner.pk])
        assert _conversion.convert_authtoken_keys(cur) == 1
        cur.execute("SELECT to_regclass('authtoken_token')")
        assert cur.fetchone() == (None,)
        # Nothing to do a second time (a database that never had the table).
        assert _conversion.convert_authtoken_keys(cur) == 0
    assert client_with(legacy).get(JOBS).status_code == 200
    assert rows_containing(legacy[tokens.PREFIX_LENGTH :]) == []
    assert ApiToken.objects.get(user=owner).prefix == legacy[: tokens.PREFIX_LENGTH]

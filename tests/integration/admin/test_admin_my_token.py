"""The admin's "My API token" page: an owner sees their token (never its
key), rotates it after a confirmation (the new key shown once) or revokes
it; superusers see every token and set expiries."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from accounts import tokens
from accounts.models import ApiToken

pytestmark = pytest.mark.django_db

PAGE = "/admin/token/"


def api_status(key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/api/v1/jobs/").status_code


def shown_key(html: str) -> str:
    return re.search(r'<code class="secret" id="key-value">([^<]+)</code>', html)[1]


def test_rotate_asks_first_then_shows_the_new_key_once(ann, ann_client):
    page = ann_client.get(PAGE).content.decode()
    assert 'id="no-token"' in page and 'id="rotate-form"' not in page
    confirm = ann_client.get(PAGE + "?confirm=rotate").content.decode()
    assert 'id="rotate-form"' in confirm and "Yes, rotate" in confirm
    assert not ApiToken.objects.exists()  # asking wrote nothing

    answer = ann_client.post(PAGE, {"action": "rotate", "expires_in_days": ""})
    assert answer.status_code == 200
    key = shown_key(answer.content.decode())
    assert tokens.key_matches(ann, key) and api_status(key) == 200

    again = ann_client.get(PAGE).content.decode()
    assert key not in again and key[: tokens.PREFIX_LENGTH] in again
    assert "never" in again  # no expiry, never used... until now


def test_rotating_retires_the_old_key_and_can_set_an_expiry(ann, ann_client):
    _, old = tokens.issue(ann)
    answer = ann_client.post(PAGE, {"action": "rotate", "expires_in_days": "7"})
    new = shown_key(answer.content.decode())
    assert api_status(old) == 401 and api_status(new) == 200
    assert tokens.live_token(ann).expires_at is not None


@pytest.mark.parametrize("days", ["0", "3651", "soon"])
def test_a_bad_expiry_is_a_400_that_changes_nothing(ann, ann_client, days):
    _, key = tokens.issue(ann)
    answer = ann_client.post(PAGE, {"action": "rotate", "expires_in_days": days})
    assert answer.status_code == 400
    assert 'class="errorlist' in answer.content.decode()
    assert ApiToken.objects.count() == 1 and api_status(key) == 200


def test_an_unknown_action_is_a_400(ann, ann_client):
    answer = ann_client.post(PAGE, {"action": "explode"})
    assert answer.status_code == 400 and "Unknown action" in answer.content.decode()
    assert not ApiToken.objects.exists()


def test_revoke_asks_first_then_the_key_stops_working(ann, ann_client):
    _, key = tokens.issue(ann)
    assert 'id="revoke-form"' in ann_client.get(PAGE + "?confirm=revoke").content.decode()
    assert api_status(key) == 200
    answer = ann_client.post(PAGE, {"action": "revoke"})
    assert answer.status_code == 302 and answer["Location"] == PAGE
    assert api_status(key) == 401 and tokens.live_token(ann) is None


def test_an_owner_sees_and_changes_only_their_own_token(ann, ben, ann_client):
    _, bens = tokens.issue(ben)
    page = ann_client.get(PAGE).content.decode()
    assert bens[: tokens.PREFIX_LENGTH] not in page
    ann_client.post(PAGE, {"action": "rotate"})
    ann_client.post(PAGE, {"action": "revoke"})
    assert api_status(bens) == 200
    # Every owner's tokens are for superusers only.
    assert ann_client.get(reverse("admin:accounts_apitoken_changelist")).status_code == 403


def test_every_page_links_to_it_and_anonymous_visitors_are_sent_to_log_in(ann_client, client):
    assert 'id="my-token-link"' in ann_client.get(reverse("admin:index")).content.decode()
    answer = client.get(PAGE)
    assert answer.status_code == 302 and "/admin/login/" in answer["Location"]


def test_superusers_list_every_token_and_set_an_expiry(ann, root_client):
    token, key = tokens.issue(ann)
    listing = root_client.get(reverse("admin:accounts_apitoken_changelist")).content.decode()
    assert token.prefix in listing and key not in listing
    url = reverse("admin:accounts_apitoken_change", args=[token.pk])
    answer = root_client.post(url, {"expires_at_0": "2001-01-01", "expires_at_1": "00:00:00"})
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert api_status(key) == 401

"""Helpers for the API tests (imported; the fixtures are in conftest.py)."""

from __future__ import annotations

from django.db import connection
from rest_framework.test import APIClient

from accounts import tokens

# A public IP literal: it passes the outbound-address rule without DNS. No
# test ever connects to it.
PUBLIC_URL = "https://93.184.215.14/hook"

# Keys this test session issued, by user id: the database holds only digests,
# so a second client for one user reuses the key while it is still live.
_keys: dict[int, str] = {}


def api_key(user) -> str:
    """The user's live API key, issuing one when they have none we know."""
    key = _keys.get(user.pk)
    if key is None or not tokens.key_matches(user, key):
        _, key = tokens.issue(user)
        _keys[user.pk] = key
    return key


def token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key(user)}")
    return client


def forget_rate_counts() -> None:
    """Delete every rate-limit counter (a transactional test commits its own)."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM punctual_rate_counts")

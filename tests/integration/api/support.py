"""Helpers for the API tests (imported; the fixtures are in conftest.py)."""

from __future__ import annotations

from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

# A public IP literal: it passes the outbound-address rule without DNS. No
# test ever connects to it.
PUBLIC_URL = "https://93.184.215.14/hook"


def token_client(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client

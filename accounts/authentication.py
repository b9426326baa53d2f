"""DRF authentication with Punctual's hashed API tokens.

The header is ``Authorization: Token <key>`` (``Bearer <key>`` also works).
A refused key is a 401 whose message says why (invalid, rotated, revoked,
expired), and counts against the client address's rate limit, so that
guessing keys is limited like any anonymous traffic.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from accounts import throttles, tokens

KEYWORDS = ("token", "bearer")


class ApiTokenAuthentication(BaseAuthentication):
    def authenticate(self, request):
        words = get_authorization_header(request).split()
        if not words or words[0].lower().decode(errors="replace") not in KEYWORDS:
            return None  # not ours: anonymous, or another scheme
        try:
            token = tokens.authenticate_key(_key(words))
        except tokens.TokenRefused as refused:
            throttles.charge_failed_authentication(request)
            raise exceptions.AuthenticationFailed(str(refused)) from None
        return token.user, token

    def authenticate_header(self, request) -> str:
        return "Token"


def _key(words: list[bytes]) -> str:
    if len(words) != 2:
        raise tokens.TokenRefused(
            "Invalid Authorization header: send 'Token <key>', the key without spaces."
        )
    try:
        return words[1].decode("ascii")
    except UnicodeDecodeError:
        raise tokens.TokenRefused("Invalid token: a key is ASCII only.") from None


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema (and Swagger's "Authorize") describes the token header."""

    target_class = ApiTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'The API token, as "Token <key>" (or "Bearer <key>").',
        }

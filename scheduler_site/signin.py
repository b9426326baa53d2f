"""Sign-in attempt limits: how django-axes sees the client, and what a
locked-out client sees (README "Security").

Axes counts failed sign-ins in the database by user name and, separately, by
client address; at ``PUNCTUAL_LOGIN_FAILURE_LIMIT`` failures within the
cool-off, further attempts are refused before any password is hashed.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse


def client_address(request: HttpRequest) -> str | None:
    """The address failures are counted against.

    Without trusted proxies, the connection's own address: X-Forwarded-For is
    then whatever the client chose to write. Behind N proxies, each appends
    the address it received the request from, so the N-th entry from the
    right is the one the outermost proxy saw; entries further left were
    written by the client and could be forged. A header with fewer entries
    than N, or an entry that is not an address, falls back to the
    connection's address (the nearest proxy), which cannot be forged.
    """
    remote = request.META.get("REMOTE_ADDR")
    proxies = settings.PUNCTUAL_TRUSTED_PROXIES
    if not proxies:
        return remote
    forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [a for a in forwarded if a]
    if len(forwarded) < proxies:
        return remote
    try:
        return str(ipaddress.ip_address(forwarded[-proxies]))
    except ValueError:
        return remote


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None
) -> HttpResponse:
    """429 with ``Retry-After`` and an admin page that says why and for how long.

    The page does not say whether the user name or the address hit the
    limit: either way it reads the same, so it tells nothing about which
    user names exist."""
    cooloff = settings.AXES_COOLOFF_TIME
    context = {
        **admin.site.each_context(request),
        "title": "Too many failed sign-in attempts",
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cooloff_minutes": int(cooloff.total_seconds() // 60),
    }
    response = TemplateResponse(request, "admin/punctual/locked_out.html", context, status=429)
    response["Retry-After"] = str(int(cooloff.total_seconds()))
    return response.render()

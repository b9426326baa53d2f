"""Sign-in attempt limits: how django-axes sees the client, and what a
locked-out client sees (docs/security.md "Sign-in limits").

Axes counts failed sign-ins in the database by user name and, separately, by
client address (core/client_address.py); at ``PUNCTUAL_LOGIN_FAILURE_LIMIT`` failures within the
cool-off, further attempts are refused before any password is hashed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse


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


# One sign-in checked at a time in each web process (docs/security.md "Sign-in limits").
_checking = threading.Lock()
BUSY_RETRY_AFTER = 1


class OneSignInAtATime:
    """Answer a sign-in post 429 at once while this process is already
    checking one.

    Checking a password costs a few hundred milliseconds of CPU, and every
    post that gets this far holds one of the process's few threads for that
    long. Without this gate, eight clients posting wrong passwords fill every
    thread with hashing before their failures reach the limit, and the health
    check (and every other request) waits for a thread. With it, a process
    hashes one password at a time and answers the rest in about a
    millisecond, before the session, the CSRF check or axes' queries: the
    client is told to try again in a second (``Retry-After: 1``), and its
    attempt is not counted as a failure, since its password was not looked at.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.login_path = reverse("admin:login")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST" or request.path_info != self.login_path:
            return self.get_response(request)
        if not _checking.acquire(blocking=False):
            response = HttpResponse(
                "Another sign-in is being checked. Try again in a second.\n",
                status=429,
                content_type="text/plain; charset=utf-8",
            )
            response["Retry-After"] = str(BUSY_RETRY_AFTER)
            return response
        try:
            return self.get_response(request)
        finally:
            _checking.release()

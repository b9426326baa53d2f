"""Sign-in attempt limits: what a locked-out client sees, and one password
hashed at a time in each process (docs/security.md "Sign-in limits").

Axes counts failed sign-ins in the database by user name at a client
address, and by client address over all user names (the address by
core/client_address.py); at ``PUNCTUAL_LOGIN_FAILURE_LIMIT`` failures within
the cool-off, further attempts are refused before any password is hashed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None
) -> HttpResponse:
    """429 with ``Retry-After`` and an admin page that says why and for how long.

    The page does not say whether the user name at this address or the
    address itself hit the limit: either way it reads the same, so it tells
    nothing about which user names exist."""
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


# One password hashed at a time in each web process (docs/security.md "Sign-in limits").
_checking = threading.Lock()
BUSY_RETRY_AFTER = 1


class SignInBusy(Exception):
    """This process is already hashing another sign-in's password."""


class OneHashAtATime(ModelBackend):
    """Django's password check, one at a time in each process; a sign-in
    that arrives while another is checked raises ``SignInBusy`` at once.

    Checking a password costs a few hundred milliseconds of CPU, and every
    post that gets this far holds one of the process's few threads for that
    long. Without this gate, eight clients posting wrong passwords fill every
    thread with hashing before their failures reach the limit, and the health
    check (and every other request) waits for a thread.

    The gate holds only the hash, and only a post that would be hashed takes
    it: Django's CSRF check has passed before any view runs, and axes'
    backend, listed first in ``AUTHENTICATION_BACKENDS``, has refused a
    locked-out client before this backend is asked. A gate in front of those
    would let a locked-out client, whose posts cost no hash, keep the gate
    busy and turn everyone else's correct sign-in away. Raising (rather than
    returning None) stops ``authenticate`` before it tells axes of a failure:
    the busy attempt is not counted, since its password was not looked at.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not _checking.acquire(blocking=False):
            raise SignInBusy
        try:
            return super().authenticate(request, username, password, **kwargs)
        finally:
            _checking.release()


class AnswerBusySignIns:
    """A sign-in that met ``SignInBusy``: 429 with ``Retry-After: 1``, and a
    line of text asking the client to try again in a second."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not isinstance(exc, SignInBusy):
            return None
        response = HttpResponse(
            "Another sign-in is being checked. Try again in a second.\n",
            status=429,
            content_type="text/plain; charset=utf-8",
        )
        response["Retry-After"] = str(BUSY_RETRY_AFTER)
        return response

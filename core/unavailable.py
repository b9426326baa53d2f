"""What a web request gets while the database cannot be reached
(docs/operating/high-availability.md "What clients see meanwhile"): 503 with
``Retry-After``, not a 500.

During a failover, a PostgreSQL restart or a cut network, every statement
fails with ``OperationalError`` until a server accepts writes again. That is
not a bug in the request, and the client should simply try again shortly:
the API answers ``{"detail": ...}`` as its other errors do, an admin page a
line of text (``DatabaseUnavailable`` below, for every view outside the
API). The same request succeeds once the primary is back, on a new
connection (``CONN_HEALTH_CHECKS`` drops the broken one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

log = logging.getLogger("punctual.web")

RETRY_AFTER_SECONDS = 5
MESSAGE = "The database is unavailable right now; try again in a few seconds."


def lost_database(exc: BaseException) -> bool:
    """``exc`` says no server can take the statement now, not that the
    request was wrong."""
    return isinstance(exc, OperationalError | InterfaceError)


def note(exc: BaseException, path: str) -> None:
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    log.warning("database unavailable", extra={"error": first_line, "path": path})


class DatabaseUnavailable:
    """Turns a view's lost database into 503 with ``Retry-After``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        """The admin's and every other non-API view's; the API's own
        exception handler answers the same (core/api_errors.py)."""
        if not lost_database(exc):
            return None  # any other error is a 500, with its traceback logged
        note(exc, request.path)
        response = HttpResponse(MESSAGE, status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response

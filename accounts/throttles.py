"""The API's rate limits, counted in PostgreSQL (docs/guides/api.md "Rate limits").

Two limits: each signed-in owner may make ``PUNCTUAL_API_RATE`` requests
(keyed by user id), and each client address ``PUNCTUAL_API_ANON_RATE``
requests without valid credentials: anonymous ones, and those with a bad,
expired, rotated or revoked token (``charge_failed_authentication``, called
by the authentication class, since DRF answers their 401 before any throttle
runs).

Every gunicorn process on every host counts against the same number: one
row per client in ``punctual_rate_counts`` (accounts migration 0004), with
the end of its fixed window ("requests in this minute") and the requests
counted in it. A counted request is one statement, ``COUNT``: an atomic
upsert, so concurrent requests of one client never count once less; on an
UNLOGGED table, so it never waits for a disk flush. A client over the limit
is refused until its window ends. The dispatcher deletes the rows whose
window has ended (``prune``), a row that the next request would restart.
"""

from __future__ import annotations

from django.db import connection
from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from core.client_address import client_address
from core.db import bound_cursor


class WindowRateThrottle(SimpleRateThrottle):
    """DRF's rate format and settings ("100/min" in DEFAULT_THROTTLE_RATES
    under ``scope``), counted per fixed window in one row of ``punctual_rate_counts``.

    DRF's own SimpleRateThrottle keeps a list of every request time in one
    cache entry, rewritten on each request: thousands of timestamps per owner
    at the default rate.
    """

    cache_format = "punctual:throttle:%(scope)s:%(ident)s"
    # Set by SimpleRateThrottle.__init__ from the rate.
    num_requests: int
    duration: int
    wait_seconds: float = 0.0

    def get_ident(self, request) -> str:
        """The client address by Punctual's one rule (core/client_address.py),
        never DRF's own: given a header shorter than ``NUM_PROXIES``, DRF
        takes its first entry, which the client wrote."""
        return str(client_address(request))

    def allow_request(self, request, view) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        return key is None or self.count(key)

    def count(self, key: str) -> bool:
        """Count one request under ``key``; False once over the rate."""
        now = self.timer()
        window_ends = (int(now // self.duration) + 1) * self.duration
        self.wait_seconds = window_ends - now
        return _increment(key, window_ends) <= self.num_requests

    def wait(self) -> float:
        return self.wait_seconds


class OwnerRateThrottle(WindowRateThrottle):
    """``PUNCTUAL_API_RATE`` per signed-in user."""

    scope = "user"

    def get_cache_key(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


class AddressRateThrottle(WindowRateThrottle):
    """``PUNCTUAL_API_ANON_RATE`` per client address, for requests without
    valid credentials."""

    scope = "anon"

    def get_cache_key(self, request, view):
        if request.user and request.user.is_authenticated:
            return None
        return self.address_key(request)

    def address_key(self, request) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def charge_failed_authentication(request: Request) -> None:
    """Count a request whose credentials were refused against its address;
    raise Throttled (429 with Retry-After) once the address is over its rate.

    Called from inside authentication, so it must not touch ``request.user``."""
    throttle = AddressRateThrottle()
    if throttle.rate is not None and not throttle.count(throttle.address_key(request)):
        raise Throttled(wait=throttle.wait())


# One counted request: the client's row (``key``) is created, or counted
# into, or restarted at 1 when the request belongs to a later window than the
# row's. A window end from a host whose clock runs behind counts into the
# current window rather than restarting it.
COUNT = """
    INSERT INTO punctual_rate_counts AS c (key, window_ends, hits)
    VALUES (%s, to_timestamp(%s), 1)
    ON CONFLICT (key) DO UPDATE SET
        hits = CASE WHEN EXCLUDED.window_ends > c.window_ends THEN 1 ELSE c.hits + 1 END,
        window_ends = GREATEST(c.window_ends, EXCLUDED.window_ends)
    RETURNING hits
"""

# The rows whose window has ended (on the window_ends index).
PRUNE = "DELETE FROM punctual_rate_counts WHERE window_ends < %s"


def _increment(key: str, window_ends: float) -> int:
    """Count one request under ``key`` in the window ending at
    ``window_ends`` (Unix seconds); the requests counted in it so far."""
    with bound_cursor(prepare=True) as cur:
        cur.execute(COUNT, [key, window_ends])
        return cur.fetchone()[0]


def prune(now) -> int:
    """Delete the counters whose window ended before ``now``; how many."""
    with connection.cursor() as cur:
        cur.execute(PRUNE, [now])
        return cur.rowcount

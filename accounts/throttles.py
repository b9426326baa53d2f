"""The API's rate limits, counted in the shared cache (README "Rate limits").

Two limits: each signed-in owner may make ``PUNCTUAL_API_RATE`` requests
(keyed by user id), and each client address ``PUNCTUAL_API_ANON_RATE``
requests without valid credentials: anonymous ones, and those with a bad,
expired, rotated or revoked token (``charge_failed_authentication``, called
by the authentication class, since DRF answers their 401 before any throttle
runs).

The counters live in Django's default cache, which is PostgreSQL by default
(``PUNCTUAL_CACHE_URL``), so every gunicorn process on every host counts
against the same number. Each counter is one small cache entry per client
and fixed window ("requests in this minute"), incremented with
``cache.incr``: atomic on Redis and Memcached; on the database cache a read
then a write, so concurrent requests of one client may each count once less
than they should. A client over the limit is refused until its window ends.
"""

from __future__ import annotations

from django.core.cache import cache
from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle


def client_address(request) -> str:
    """The caller's address, as every limit keys it: the one place to change
    when a trusted proxy's forwarded address should count instead.

    DRF's ``get_ident``: REMOTE_ADDR, or with ``NUM_PROXIES`` set, the
    address that many hops back in X-Forwarded-For."""
    return BaseThrottle().get_ident(request)


class WindowRateThrottle(SimpleRateThrottle):
    """DRF's rate format and settings ("100/min" in DEFAULT_THROTTLE_RATES
    under ``scope``), counted per fixed window in one cache entry.

    DRF's own SimpleRateThrottle keeps a list of every request time in one
    entry, rewritten on each request: thousands of timestamps per owner at
    the default rate, too heavy for a database cache.
    """

    cache_format = "punctual:throttle:%(scope)s:%(ident)s"
    # Set by SimpleRateThrottle.__init__ from the rate.
    num_requests: int
    duration: int
    wait_seconds: float = 0.0

    def allow_request(self, request, view) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        return key is None or self.count(key)

    def count(self, key: str) -> bool:
        """Count one request under ``key``; False once over the rate."""
        now = self.timer()
        window = int(now // self.duration)
        self.wait_seconds = (window + 1) * self.duration - now
        return _increment(f"{key}:{window}", self.duration) <= self.num_requests

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
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}


def charge_failed_authentication(request: Request) -> None:
    """Count a request whose credentials were refused against its address;
    raise Throttled (429 with Retry-After) once the address is over its rate.

    Called from inside authentication, so it must not touch ``request.user``."""
    throttle = AddressRateThrottle()
    if throttle.rate is not None and not throttle.count(throttle.address_key(request)):
        raise Throttled(wait=throttle.wait())


def _increment(key: str, timeout: int) -> int:
    """Add one to the counter ``key``, creating it for ``timeout`` seconds."""
    try:
        return cache.incr(key)
    except ValueError:  # no such entry yet (or it expired)
        if cache.add(key, 1, timeout):
            return 1
    try:
        return cache.incr(key)  # another process added it first
    except ValueError:
        return 1  # the cache refused the write: let the request through

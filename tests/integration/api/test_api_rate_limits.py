"""Rate limits: counted in PostgreSQL (one row per client), per owner with a valid
token and per client address without one (anonymous callers and refused
tokens alike, the address by core/client_address.py), with health never
limited."""

from __future__ import annotations

import pytest
from django.db import connection
from django.urls import URLResolver, get_resolver

from accounts.throttles import WindowRateThrottle
from core.db import db_now
from dispatch.dispatcher import Dispatcher
from tests import client_addresses
from tests.integration.api.support import api_key, token_client

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"

# Per day, not per minute: a window boundary in the middle of a test would
# reset the count (the windows are fixed, see accounts/throttles.py).
RATES = {"user": "3/day", "anon": "3/day"}


@pytest.fixture(autouse=True)
def _small_rates(monkeypatch):
    monkeypatch.setattr(WindowRateThrottle, "THROTTLE_RATES", RATES)


def counters(scope: str) -> list[tuple[str, int]]:
    """The throttle's rows for ``scope``: key and requests counted."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT key, hits FROM punctual_rate_counts WHERE key LIKE %s",
            [f"punctual:throttle:{scope}:%"],
        )
        return cur.fetchall()


def assert_limited(answer) -> None:
    assert answer.status_code == 429, answer.content
    assert "throttled" in answer.json()["detail"].lower()
    assert int(answer["Retry-After"]) > 0


def test_an_owner_is_limited_and_the_count_is_one_row(api, owner):
    assert [api.get(JOBS).status_code for _ in range(3)] == [200, 200, 200]
    assert_limited(api.get(JOBS))
    assert counters("user") == [(f"punctual:throttle:user:{owner.pk}", 4)]


def test_anonymous_requests_get_429_after_the_limit(anon):
    # Protected endpoints answer 401 first: those count too.
    assert [anon.get(JOBS).status_code for _ in range(3)] == [401, 401, 401]
    assert_limited(anon.get(JOBS))
    # So do the public ones: the schema, and unknown paths.
    assert anon.get("/api/v1/schema/").status_code == 429
    assert_limited(anon.get("/api/v1/nope/"))
    assert counters("anon") == [("punctual:throttle:anon:127.0.0.1", 6)]


def test_bad_tokens_get_429_after_the_limit_and_share_the_address_count(anon, owner):
    bad = token_client(owner)
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-key")
    assert [bad.get(JOBS).status_code for _ in range(2)] == [401, 401]
    assert anon.get(JOBS).status_code == 401
    assert_limited(bad.get(JOBS))
    assert_limited(anon.get(JOBS))
    # A valid token from the same address is counted as its owner, not the address.
    assert token_client(owner).get(JOBS).status_code == 200


def test_a_rotated_key_counts_as_a_bad_one(owner):
    old = api_key(owner)
    client = token_client(owner)
    client.post("/api/v1/token/rotate/")
    client.credentials(HTTP_AUTHORIZATION=f"Token {old}")
    assert [client.get(JOBS).status_code for _ in range(3)] == [401, 401, 401]
    assert_limited(client.get(JOBS))


def test_health_is_never_limited(anon):
    for _ in range(4):
        anon.get(JOBS)
    assert_limited(anon.get(JOBS))
    assert all(anon.get("/api/v1/health/").status_code != 429 for _ in range(5))


def test_a_later_window_restarts_the_count(api, owner, monkeypatch):
    clock = [1_000_000 * 86_400 + 5.0]  # 5 s into a day: "3/day" windows are days
    monkeypatch.setattr(WindowRateThrottle, "timer", lambda self: clock[0])
    assert [api.get(JOBS).status_code for _ in range(3)] == [200, 200, 200]
    assert_limited(api.get(JOBS))
    clock[0] += 86_400  # the next day's window
    assert api.get(JOBS).status_code == 200
    assert counters("user") == [(f"punctual:throttle:user:{owner.pk}", 1)]
    # A request stamped with the window before (a host whose clock runs
    # behind) counts into the current one, and never restarts it.
    clock[0] -= 86_400
    assert [api.get(JOBS).status_code for _ in range(2)] == [200, 200]
    assert_limited(api.get(JOBS))
    clock[0] += 86_400  # this host's clock again: still the same window
    assert_limited(api.get(JOBS))
    assert counters("user") == [(f"punctual:throttle:user:{owner.pk}", 5)]


def test_the_counters_skip_the_write_ahead_log():
    """A counted request never waits for a disk flush: the table is UNLOGGED."""
    with connection.cursor() as cur:
        cur.execute("SELECT relpersistence FROM pg_class WHERE relname = 'punctual_rate_counts'")
        assert cur.fetchone() == ("u",)


def test_the_dispatcher_deletes_the_counters_whose_window_ended(api, anon, owner, monkeypatch):
    now = db_now().timestamp()
    clock = [now - 2 * 86_400]  # two days ago: that window has ended
    monkeypatch.setattr(WindowRateThrottle, "timer", lambda self: clock[0])
    api.get(JOBS)
    clock[0] = now  # today's window has not
    anon.get(JOBS)
    Dispatcher().housekeeping()
    assert counters("user") == []
    assert counters("anon") == [("punctual:throttle:anon:127.0.0.1", 1)]


@pytest.mark.parametrize(("proxies", "forwarded", "counted"), client_addresses.CASES)
def test_anonymous_requests_count_against_the_address_of_the_one_client_address_rule(
    anon, settings, proxies, forwarded, counted
):
    """The same cases, and the same addresses, as the sign-in limits
    (tests/integration/admin/test_signin_limits.py)."""
    settings.PUNCTUAL_TRUSTED_PROXIES = proxies
    assert anon.get(JOBS, **client_addresses.headers(forwarded)).status_code == 401
    assert counters("anon") == [(f"punctual:throttle:anon:{counted}", 1)]


@pytest.mark.parametrize(
    ("proxies", "forged"),
    [
        pytest.param(2, "192.0.2.{}", id="two proxies, one forged entry"),
        pytest.param(1, "client-{}", id="one proxy, an entry that is not an address"),
    ],
)
def test_refused_keys_under_a_forged_x_forwarded_for_still_reach_the_limit(
    owner, settings, proxies, forged
):
    """Each request names another address of its own choosing: a header
    shorter than the proxies promise, or no address at all, counts the
    connection's address, so the limit holds."""
    settings.PUNCTUAL_TRUSTED_PROXIES = proxies
    bad = token_client(owner)
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-key")
    answers = [
        bad.get(JOBS, REMOTE_ADDR="10.9.0.1", HTTP_X_FORWARDED_FOR=forged.format(k)).status_code
        for k in range(12)
    ]
    assert answers == [401] * 3 + [429] * 9


def test_every_throttle_of_the_api_keys_clients_by_the_one_rule():
    """DRF's own throttles would key an anonymous client by DRF's
    ``get_ident``, which trusts what the client writes in X-Forwarded-For."""
    views = [
        pattern.callback.cls
        for pattern in _patterns(get_resolver())
        if hasattr(pattern.callback, "cls")
    ]
    assert views, "no API view found"
    for view in views:
        for throttle in view().get_throttles():
            assert isinstance(throttle, WindowRateThrottle), (view, throttle)
            assert type(throttle).get_ident is WindowRateThrottle.get_ident, (view, throttle)


def _patterns(resolver):
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            yield from _patterns(pattern)
        else:
            yield pattern

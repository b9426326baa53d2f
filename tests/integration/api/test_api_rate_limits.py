"""Rate limits: counted in PostgreSQL (one row per client), per owner with a valid
token and per client address without one (anonymous callers and refused
tokens alike), with health never limited."""

from __future__ import annotations

import pytest
from django.db import connection

from accounts.throttles import WindowRateThrottle
from core.db import db_now
from dispatch.dispatcher import Dispatcher
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

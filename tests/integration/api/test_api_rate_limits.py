"""Rate limits: counted in the shared database cache, per owner with a valid
token and per client address without one (anonymous callers and refused
tokens alike), with health never limited."""

from __future__ import annotations

import pytest
from django.db import connection

from accounts.throttles import WindowRateThrottle
from tests.integration.api.support import api_key, token_client

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"

# Per day, not per minute: a window boundary in the middle of a test would
# reset the count (the windows are fixed, see accounts/throttles.py).
RATES = {"user": "3/day", "anon": "3/day"}


@pytest.fixture(autouse=True)
def _small_rates(monkeypatch):
    monkeypatch.setattr(WindowRateThrottle, "THROTTLE_RATES", RATES)


def counters(scope: str) -> list[str]:
    """The throttle's rows in the database cache table."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT cache_key FROM punctual_cache WHERE cache_key LIKE %s",
            [f"%punctual:throttle:{scope}:%"],
        )
        return [key for (key,) in cur.fetchall()]


def assert_limited(answer) -> None:
    assert answer.status_code == 429, answer.content
    assert "throttled" in answer.json()["detail"].lower()
    assert int(answer["Retry-After"]) > 0


def test_an_owner_is_limited_and_the_count_is_a_row_of_the_database_cache(api, owner):
    assert [api.get(JOBS).status_code for _ in range(3)] == [200, 200, 200]
    assert_limited(api.get(JOBS))
    [row] = counters("user")
    assert f":user:{owner.pk}:" in row


def test_anonymous_requests_get_429_after_the_limit(anon):
    # Protected endpoints answer 401 first: those count too.
    assert [anon.get(JOBS).status_code for _ in range(3)] == [401, 401, 401]
    assert_limited(anon.get(JOBS))
    # So do the public ones: the schema, and unknown paths.
    assert anon.get("/api/v1/schema/").status_code == 429
    assert_limited(anon.get("/api/v1/nope/"))
    [row] = counters("anon")
    assert ":anon:127.0.0.1:" in row


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

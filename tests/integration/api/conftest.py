"""Fixtures for the API tests: token clients for two owners, an anonymous
client, and no real DNS (check_url resolves host names when a job is saved),
except in the tests marked ``system_resolver``."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.throttles import WindowRateThrottle
from jobs import targets
from tests.integration.api.support import forget_rate_counts, token_client


@pytest.fixture(autouse=True)
def _no_dns(request, monkeypatch):
    """localhost answers as /etc/hosts does; every other name fails to resolve."""
    if request.node.get_closest_marker("system_resolver"):
        return

    def resolve(host: str) -> list[str]:
        if host.lower() == "localhost":
            return ["127.0.0.1", "::1"]
        raise OSError(f"no DNS in tests ({host})")

    monkeypatch.setattr(targets, "system_resolve", resolve)


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.PUNCTUAL_ALLOW_PRIVATE_TARGETS = False
    # The owner fixtures set passwords; the real hasher costs ~0.3 s per user.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_throttles(request):
    """The rate-limit counters live in ``punctual_rate_counts``: each test's
    transaction rolls its own back, but a transactional test commits them."""
    transactional = "transactional_db" in request.fixturenames
    if transactional:
        request.getfixturevalue("transactional_db")
        forget_rate_counts()
    yield
    if transactional:
        forget_rate_counts()


@pytest.fixture
def unlimited(monkeypatch):
    """No rate limits, for the tests that count a request's statements: the
    limiter's own statement would only blur them."""
    monkeypatch.setattr(WindowRateThrottle, "THROTTLE_RATES", {"user": None, "anon": None})


@pytest.fixture
def api(owner) -> APIClient:
    return token_client(owner)


@pytest.fixture
def other_api(other_owner) -> APIClient:
    return token_client(other_owner)


@pytest.fixture
def anon() -> APIClient:
    return APIClient()


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", password="pw-root-123")


@pytest.fixture
def admin_api(superuser) -> APIClient:
    return token_client(superuser)

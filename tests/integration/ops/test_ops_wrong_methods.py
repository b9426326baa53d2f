"""Health and /metrics answer any method but GET and HEAD with a JSON 405 in
the API's error shape, with ``Allow``: not the CSRF middleware's HTML 403."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.admin_support import beat

PATHS = ["/api/v1/health/", "/metrics"]


@pytest.fixture
def browser_like_client():
    """Checks CSRF as a real request would be checked (the test client skips it by default)."""
    return Client(enforce_csrf_checks=True)


@pytest.mark.django_db
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_a_wrong_method_is_a_json_405_naming_the_allowed_ones(browser_like_client, path, method):
    response = browser_like_client.generic(method, path, data="{}", content_type="application/json")
    assert response.status_code == 405
    assert response["Content-Type"] == "application/json"
    assert response["Allow"] == "GET, HEAD"
    assert response.json() == {"detail": f'Method "{method}" not allowed.'}


@pytest.mark.django_db
@pytest.mark.parametrize("path", PATHS)
def test_get_and_head_still_answer(browser_like_client, path):
    beat("dispatcher")
    assert browser_like_client.get(path).status_code == 200
    assert browser_like_client.head(path).status_code == 200

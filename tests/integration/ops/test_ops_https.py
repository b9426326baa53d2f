"""``PUNCTUAL_HTTPS`` and ``PUNCTUAL_TRUSTED_PROXIES``, read from the
environment by a fresh process as in production
(docs/operating/tls-proxy.md): Django's deployment checks pass, plain HTTP is redirected except
for health and metrics, and X-Forwarded-Proto counts only behind a proxy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management.utils import get_random_secret_key

from tests.database import subprocess_database_url

ROOT = Path(__file__).resolve().parents[3]


def production_env(**extra: str) -> dict[str, str]:
    """DEBUG off, a real secret key, a real host name: the rest from ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "PUNCTUAL_HTTPS")}
    env.update(
        SECRET_KEY=get_random_secret_key(),
        ALLOWED_HOSTS="punctual.example.com,testserver",
        PUNCTUAL_LOG_LEVEL="WARNING",
    )
    env.update(extra)
    return env


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_https_on():
    out = manage(
        "check", "--deploy", "--fail-level", "WARNING", env=production_env(PUNCTUAL_HTTPS="true")
    )
    assert out.returncode == 0, out.stderr
    assert "System check identified no issues" in out.stdout


def test_a_secret_key_that_starts_with_a_dollar_is_the_key_itself():
    """Regression: django-environ read a key starting with "$" (one in about
    50 of Django's generated keys) as another variable's name, found none,
    and the process refused to start without a SECRET_KEY."""
    key = "$" + get_random_secret_key()[1:]
    out = manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.SECRET_KEY)",
        env=production_env(SECRET_KEY=key),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == key


def test_check_deploy_warns_without_https():
    out = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env())
    assert out.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in out.stderr, out.stderr


# Requests through Django's test client inside the configured process.
PROBE = """
import json
from django.test import Client

def answer(path, **headers):
    r = Client().get(path, **headers)
    cookie = r.cookies.get("csrftoken")
    return {
        "status": r.status_code,
        "location": r.get("Location"),
        "hsts": r.get("Strict-Transport-Security"),
        "secure_cookie": bool(cookie and cookie["secure"]),
    }

print(json.dumps({
    "login": answer("/admin/login/"),
    "login_forwarded": answer("/admin/login/", HTTP_X_FORWARDED_PROTO="https"),
    "health": answer("/api/v1/health/"),
    "metrics": answer("/metrics"),
}))
"""


@pytest.fixture
def probe(db):
    def run(**extra: str) -> dict:
        env = production_env(PUNCTUAL_HTTPS="true", DATABASE_URL=subprocess_database_url(), **extra)
        out = manage("shell", "-c", PROBE, env=env)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    return run


def test_without_a_proxy_plain_http_is_redirected_and_x_forwarded_proto_ignored(probe):
    answers = probe()
    assert answers["login"]["status"] == 301
    assert answers["login"]["location"] == "https://testserver/admin/login/"
    # A client cannot talk its way out of the redirect.
    assert answers["login_forwarded"]["status"] == 301


def test_behind_a_proxy_https_requests_get_hsts_and_secure_cookies(probe):
    answers = probe(PUNCTUAL_TRUSTED_PROXIES="1")
    assert answers["login"]["status"] == 301
    forwarded = answers["login_forwarded"]
    assert forwarded["status"] == 200
    assert forwarded["hsts"] == "max-age=31536000; includeSubDomains; preload"
    assert forwarded["secure_cookie"]


def test_health_and_metrics_answer_plain_http_probes(probe):
    answers = probe()
    # 503 for health: no dispatcher beats in this test's database.
    assert answers["health"]["status"] == 503
    assert answers["metrics"]["status"] == 200

"""The rate limits hold across processes: gunicorn with two worker processes
on the test database, and the limit is reached at the rate, not at twice it,
for an owner's token and for bad tokens from one address alike. Gunicorn's
access log names the process of each answer, so the test also sees that both
processes answered. Behind trusted proxies (``PUNCTUAL_TRUSTED_PROXIES`` in
the environment, as an operator sets it), a client cannot escape the limit
by what it writes in X-Forwarded-For."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests
from django.contrib.auth import get_user_model

from accounts import tokens
from tests.integration.api.support import forget_rate_counts
from tests.processes.conftest import free_port, process_env, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

LIMIT = 6
# More requests than two per-process counters would allow together.
ATTEMPTS = 3 * LIMIT


def start_gunicorn(processes, port: int, access_log: Path, **extra_env: str) -> str:
    env = process_env(
        DJANGO_SETTINGS_MODULE="scheduler_site.settings",
        DEBUG="false",
        # Per day: a window boundary during the test would reset the count.
        PUNCTUAL_API_RATE=f"{LIMIT}/day",
        PUNCTUAL_API_ANON_RATE=f"{LIMIT}/day",
        **extra_env,
    )
    processes.start(
        "-m", "gunicorn", "scheduler_site.wsgi", "--bind", f"127.0.0.1:{port}",
        "--workers", "2", "--access-logfile", str(access_log),
        "--access-logformat", "%(p)s %(U)s %(s)s",
        env=env, name="gunicorn",
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return requests.get(f"{base}/api/v1/health/", timeout=10).status_code in (200, 503)
        except requests.RequestException:
            return False  # not listening yet

    wait_until(answers, timeout=120, message="gunicorn answering")
    return base


def statuses(base: str, key: str) -> list[int]:
    """ATTEMPTS requests, each on a new connection, so either process may take it."""
    headers = {"Authorization": f"Token {key}"}
    return [
        requests.get(f"{base}/api/v1/jobs/", headers=headers, timeout=30).status_code
        for _ in range(ATTEMPTS)
    ]


def processes_that_answered(access_log: Path, path: str) -> set[str]:
    lines = access_log.read_text().splitlines()
    return {m[1] for line in lines if (m := re.match(r"<(\d+)> (\S+) ", line)) and m[2] == path}


def test_two_gunicorn_processes_share_one_count(processes, tmp_path):
    forget_rate_counts()  # a transactional test commits its counters
    owner = get_user_model().objects.create_user("limited", is_staff=True)
    _, key = tokens.issue(owner)
    access_log = tmp_path / "access.log"
    base = start_gunicorn(processes, free_port(), access_log)

    owner_answers = statuses(base, key)
    assert owner_answers == [200] * LIMIT + [429] * (ATTEMPTS - LIMIT)

    bad_answers = statuses(base, "not-a-key")
    assert bad_answers == [401] * LIMIT + [429] * (ATTEMPTS - LIMIT)

    # Which process accepts a connection is the kernel's choice: on a busy
    # machine one may have taken every request so far. Until both have
    # answered, more requests, each over the limit already counted, so each
    # one must be refused by whichever process takes it.
    def both_answered() -> bool:
        if len(processes_that_answered(access_log, "/api/v1/jobs/")) == 2:
            return True
        assert set(statuses(base, key)) == {429}
        return False

    wait_until(both_answered, timeout=60, message="both gunicorn processes in the access log")
    forget_rate_counts()


@pytest.mark.parametrize(
    ("proxies", "forged"),
    [
        pytest.param("2", "192.0.2.{}", id="two proxies, one forged entry"),
        pytest.param("1", "client-{}", id="one proxy, an entry that is not an address"),
    ],
)
def test_a_forged_x_forwarded_for_does_not_escape_the_address_limit(
    processes, tmp_path, proxies, forged
):
    """Each request names an address of its own: a header shorter than the
    proxies promise, or an entry that is no address, counts the connection's
    address (core/client_address.py), so refused keys reach the limit."""
    forget_rate_counts()
    access_log = tmp_path / "access.log"
    base = start_gunicorn(processes, free_port(), access_log, PUNCTUAL_TRUSTED_PROXIES=proxies)
    answers = [
        requests.get(
            f"{base}/api/v1/jobs/",
            headers={"Authorization": "Token not-a-key", "X-Forwarded-For": forged.format(k)},
            timeout=30,
        ).status_code
        for k in range(ATTEMPTS)
    ]
    assert answers == [401] * LIMIT + [429] * (ATTEMPTS - LIMIT)
    forget_rate_counts()

"""The one-password-at-a-time gate (scheduler_site/signin.py) against
gunicorn as the Procfile runs it (2 processes, 4 threads each), with the
production password hasher: a client that is locked out keeps posting from
eight connections at once, and another client's correct sign-ins, from
another address, all go through.

Each client has an address of its own on the loopback network (127.0.0.2
and 127.0.0.3, bound as the source of its connections), so gunicorn sees two
addresses with no proxy setting involved."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import requests
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher, make_password

from ops.bench import processes as bench
from tests.processes.conftest import process_env, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

OWNER_ADDRESS = "127.0.0.2"
LOCKED_ADDRESS = "127.0.0.3"
PASSWORD = "pw-gate-owner-123"
FAILURE_LIMIT = 10  # PUNCTUAL_LOGIN_FAILURE_LIMIT's default
CONNECTIONS = 8
SIGN_INS = 12
# Bounds the hammering, whatever happens to the rest of the test.
MOST_POSTS_PER_CONNECTION = 5_000


class FromAddress(requests.adapters.HTTPAdapter):
    """Connections whose source is ``address``: a client of its own to the server."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["source_address"] = (self.address, 0)
        super().init_poolmanager(*args, **kwargs)


def client(address: str, login: str) -> tuple[requests.Session, str]:
    """A browser at ``address`` that has fetched the sign-in form: its
    session and CSRF token."""
    session = requests.Session()
    session.mount("http://", FromAddress(address))
    session.get(login, timeout=120).raise_for_status()
    return session, session.cookies["csrftoken"]


def post(session: requests.Session, login: str, token: str, username: str, password: str):
    return session.post(
        login,
        data={"username": username, "password": password, "csrfmiddlewaretoken": token},
        allow_redirects=False,
        timeout=120,
    )


def hammer(login: str, stop: threading.Event, answers: Counter, lock: threading.Lock) -> None:
    """One connection of the locked-out client: wrong passwords until
    ``stop``; its answers by status and Retry-After, or the error it met."""
    try:
        session, token = client(LOCKED_ADDRESS, login)
        with session:
            for n in range(MOST_POSTS_PER_CONNECTION):
                if stop.is_set():
                    return
                answer = post(session, login, token, f"nobody-{n}", "wrong")
                with lock:
                    answers[(answer.status_code, answer.headers.get("Retry-After"))] += 1
    except requests.RequestException as exc:
        with lock:
            answers[(type(exc).__name__, str(exc)[:200])] += 1


def test_a_locked_out_client_on_eight_connections_never_turns_a_correct_sign_in_away(
    processes,
):
    owner = get_user_model().objects.create_user("gate-owner", is_staff=True)
    # The web processes run the production settings: a production hash.
    owner.password = make_password(PASSWORD, hasher=PBKDF2PasswordHasher())
    owner.save(update_fields=["password"])
    env = process_env(DJANGO_SETTINGS_MODULE="scheduler_site.settings")
    web, port = bench.start_web(processes.tmp_path, workers=2, threads=4, env=env)
    processes.adopt(web, processes.tmp_path / "web.out")
    login = f"http://127.0.0.1:{port}/admin/login/"

    # The client's address locks itself out, one real failure at a time.
    session, token = client(LOCKED_ADDRESS, login)
    failures = [post(session, login, token, f"nobody-{k}", "wrong") for k in range(FAILURE_LIMIT)]
    assert [a.status_code for a in failures] == [200] * (FAILURE_LIMIT - 1) + [429]

    answers: Counter = Counter()
    lock, stop = threading.Lock(), threading.Event()
    threads = [
        threading.Thread(target=hammer, args=(login, stop, answers, lock))
        for _ in range(CONNECTIONS)
    ]
    for thread in threads:
        thread.start()
    try:
        wait_until(
            lambda: sum(answers.values()) >= 4 * CONNECTIONS,
            timeout=120,
            message="the locked-out client posting on every connection",
        )
        during = sum(answers.values())
        signed_in = []
        for _ in range(SIGN_INS):
            browser, csrf = client(OWNER_ADDRESS, login)
            with browser:
                answer = post(browser, login, csrf, "gate-owner", PASSWORD)
                signed_in.append((answer.status_code, answer.headers.get("Retry-After")))
        # The hammering went on for as long as the sign-ins took.
        assert sum(answers.values()) > during
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)

    assert signed_in == [(302, None)] * SIGN_INS, Counter(signed_in)
    # Every post of the locked-out client was refused by its lockout (the
    # cool-off in Retry-After), none checked and none told to wait a second.
    assert set(answers) == {(429, str(15 * 60))}, answers
    assert not AccessAttempt.objects.filter(ip_address=OWNER_ADDRESS).exists()

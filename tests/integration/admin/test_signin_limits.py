"""Sign-in attempt limits (django-axes, scheduler_site/signin.py): failures
counted by user name at a client address and by client address over all
names, in the database; a locked-out attempt is refused with a readable 429
before any password is hashed, and one password is hashed at a time. Hashing
is counted by a real hasher (tests/admin_support.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Iterator

import pytest
from axes.models import AccessAttempt
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import F
from django.test import Client
from django.urls import reverse

from tests import client_addresses
from tests.admin_support import PASSWORD, CountingHasher, HeldHasher

LOGIN = reverse("admin:login")
LIMIT = 10  # PUNCTUAL_LOGIN_FAILURE_LIMIT's default


@pytest.fixture(autouse=True)
def counting_hasher(settings):
    settings.PASSWORD_HASHERS = ["tests.admin_support.CountingHasher"]
    assert django_settings.AXES_FAILURE_LIMIT == LIMIT


def hashes() -> int:
    return CountingHasher.encodes


def sign_in(username: str, password: str, *, address: str = "10.0.0.1", **headers):
    """One POST to the admin's sign-in form, with its CSRF token, from ``address``."""
    client = Client(enforce_csrf_checks=True, REMOTE_ADDR=address)
    client.get(LOGIN)
    token = client.cookies["csrftoken"].value
    response = client.post(
        LOGIN,
        {"username": username, "password": password, "csrfmiddlewaretoken": token},
        REMOTE_ADDR=address,
        **headers,
    )
    response.signed_in = "_auth_user_id" in client.session
    return response


def fail(times: int, username: str = "ann", **where) -> list[int]:
    return [sign_in(username, "not-the-password", **where).status_code for _ in range(times)]


def assert_refused_without_hashing(username: str, password: str, **where) -> None:
    before = hashes()
    response = sign_in(username, password, **where)
    assert response.status_code == 429
    assert not response.signed_in
    assert hashes() == before, "a locked-out attempt hashed a password"


def test_the_eleventh_bad_password_is_refused_without_hashing(ann):
    start = hashes()
    # The tenth failure is still checked (and hashed); it is the one that locks.
    assert fail(LIMIT) == [200] * (LIMIT - 1) + [429]
    assert hashes() - start == LIMIT
    assert_refused_without_hashing("ann", "still-wrong")
    # Even the right password, while locked out.
    assert_refused_without_hashing("ann", PASSWORD)


def test_the_locked_out_page_is_readable_and_says_when_to_come_back(ann):
    fail(LIMIT)
    response = sign_in("ann", PASSWORD)
    assert response.status_code == 429
    assert response["Retry-After"] == str(15 * 60)
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "Too many failed sign-in attempts" in page
    assert f"after {LIMIT}" in page and "Try again in 15 minutes" in page
    assert "Punctual" in page  # the admin's own frame, not a bare error


def test_wrong_passwords_from_one_address_do_not_lock_the_user_out_of_another(root):
    """Anyone may type a user name, a superuser's included: failures lock
    the address they came from, never the name everywhere."""
    assert fail(LIMIT, "root", address="10.0.1.1") == [200] * (LIMIT - 1) + [429]
    assert_refused_without_hashing("root", PASSWORD, address="10.0.1.1")
    response = sign_in("root", PASSWORD, address="10.0.2.1")
    assert response.status_code == 302 and response.signed_in


def test_one_name_tried_from_many_addresses_is_never_locked(ann):
    """What remains (docs/security.md "Sign-in limits"): a guesser spread
    over many addresses gets the limit's worth of guesses at each."""
    for k in range(3):
        fail(LIMIT, "ann", address=f"10.0.8.{k}")
    assert sign_in("ann", PASSWORD, address="10.0.8.200").signed_in


def test_failures_from_one_address_count_across_user_names(ann):
    """User names that do not exist count too (Django hashes once for those,
    so that they take as long as a real one)."""
    start = hashes()
    for k in range(LIMIT):
        fail(1, f"nobody-{k}", address="10.0.3.1")
    assert hashes() - start == LIMIT
    assert_refused_without_hashing("ann", PASSWORD, address="10.0.3.1")
    assert sign_in("ann", PASSWORD, address="10.0.3.2").signed_in


def test_a_successful_sign_in_does_not_clear_the_failures_of_its_address(ann):
    """Otherwise an owner could guess at other user names, signing in as
    themselves between guesses to start their address's count again."""
    for k in range(LIMIT - 1):
        fail(1, f"nobody-{k}", address="10.0.7.1")
    assert sign_in("ann", PASSWORD, address="10.0.7.1").signed_in
    assert fail(1, "nobody-last", address="10.0.7.1") == [429]


def age_failures(by: dt.timedelta) -> None:
    """Move the recorded failures back in time, as if ``by`` had passed."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - by)


def test_after_the_cooloff_the_user_may_sign_in_again(ann):
    fail(LIMIT)
    age_failures(django_settings.AXES_COOLOFF_TIME + dt.timedelta(seconds=1))
    response = sign_in("ann", PASSWORD)
    assert response.status_code == 302 and response.signed_in


def test_attempts_during_the_lockout_write_nothing_and_the_wait_does_not_restart(ann):
    fail(LIMIT)
    recorded = list(AccessAttempt.objects.values())
    # A client that keeps hammering: each attempt is refused, and the rows
    # that count the failures are left as they were (no growing post_data
    # rewritten with every attempt).
    assert fail(20) == [429] * 20
    assert list(AccessAttempt.objects.values()) == recorded
    age_failures(django_settings.AXES_COOLOFF_TIME - dt.timedelta(minutes=1))
    assert sign_in("ann", PASSWORD).status_code == 429
    # A cool-off after the failure that reached the limit, the user may sign in.
    age_failures(dt.timedelta(minutes=2))
    response = sign_in("ann", PASSWORD)
    assert response.status_code == 302 and response.signed_in


def test_x_forwarded_for_is_ignored_without_a_trusted_proxy(ann):
    for k in range(LIMIT):
        fail(1, f"nobody-{k}", address="10.0.4.1", HTTP_X_FORWARDED_FOR=f"192.0.2.{k}")
    assert_refused_without_hashing(
        "ann", PASSWORD, address="10.0.4.1", HTTP_X_FORWARDED_FOR="192.0.2.200"
    )


def test_behind_a_trusted_proxy_the_address_the_proxy_saw_counts(settings, ann):
    settings.PUNCTUAL_TRUSTED_PROXIES = 1
    proxy = "10.0.5.1"
    # Each client forges a first entry; the proxy appends the address it saw.
    for k in range(LIMIT):
        fail(1, f"nobody-{k}", address=proxy, HTTP_X_FORWARDED_FOR=f"198.51.100.7, 192.0.2.{k}")
    # Ten clients, one failure each: none is locked out, though all came through one proxy.
    assert sign_in("ann", PASSWORD, address=proxy, HTTP_X_FORWARDED_FOR="192.0.2.1").signed_in
    fail(LIMIT, "nobody", address=proxy, HTTP_X_FORWARDED_FOR="203.0.113.9")
    # 203.0.113.9 is locked out, whatever it writes to the left of its address.
    assert_refused_without_hashing(
        "ann", PASSWORD, address=proxy, HTTP_X_FORWARDED_FOR="192.0.2.99, 203.0.113.9"
    )
    assert AccessAttempt.objects.filter(ip_address="198.51.100.7").count() == 0


@pytest.mark.parametrize(("proxies", "forwarded", "counted"), client_addresses.CASES)
def test_failures_count_against_the_address_of_the_one_client_address_rule(
    settings, ann, proxies, forwarded, counted
):
    """The same cases, and the same addresses, as the API's rate limit
    (tests/integration/api/test_api_rate_limits.py)."""
    settings.PUNCTUAL_TRUSTED_PROXIES = proxies
    where = client_addresses.headers(forwarded)
    assert fail(1, "nobody", address=where.pop("REMOTE_ADDR"), **where) == [200]
    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == [counted]


@contextlib.contextmanager
def checking_a_sign_in() -> Iterator[None]:
    """While the block runs, this process is hashing a sign-in's password
    (ann's, a wrong one, from 10.0.9.1): the gate is taken. Needs a
    transactional test (the sign-in runs on a thread with its own connection)."""
    ann = get_user_model().objects.get(username="ann")
    ann.set_password(PASSWORD)  # by HeldHasher, the first of PASSWORD_HASHERS
    ann.save(update_fields=["password"])
    HeldHasher.hashing.clear()
    HeldHasher.release.clear()
    first: list = []

    def first_sign_in() -> None:
        try:
            first.append(sign_in("ann", "not-it", address="10.0.9.1"))
        finally:
            connection.close()  # the thread's own connection

    worker = threading.Thread(target=first_sign_in)
    worker.start()
    try:
        assert HeldHasher.hashing.wait(timeout=60), "the first sign-in never reached its hash"
        yield
    finally:
        HeldHasher.release.set()
        worker.join(timeout=60)
    assert first[0].status_code == 200  # the form again: a wrong password, checked


@pytest.fixture
def held_hasher(settings):
    settings.PASSWORD_HASHERS = [
        "tests.admin_support.HeldHasher",
        "tests.admin_support.CountingHasher",
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("held_hasher")
def test_a_sign_in_posted_while_another_is_checked_is_answered_at_once(ann):
    """One password hashed at a time per process: the second post, while the
    first one's hash runs, gets 429 with Retry-After: 1 and is not counted."""
    with checking_a_sign_in():
        before = AccessAttempt.objects.count()
        busy = sign_in("ann", PASSWORD, address="10.0.9.9")
        assert busy.status_code == 429 and busy["Retry-After"] == "1"
        assert busy.content.decode().startswith("Another sign-in is being checked")
        assert not busy.signed_in
        assert AccessAttempt.objects.count() == before
    # Once the first is done, a sign-in goes through as usual.
    assert sign_in("ann", PASSWORD, address="10.0.9.9").signed_in


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("held_hasher")
def test_a_locked_out_client_is_refused_by_its_lockout_while_another_sign_in_is_checked(ann):
    """Axes refuses a locked-out client before the gate: its posts, which
    cost no hash, never take the gate from someone whose password is checked."""
    fail(LIMIT, "nobody", address="10.0.10.1")
    with checking_a_sign_in():
        locked = sign_in("nobody", "still-wrong", address="10.0.10.1")
        assert locked.status_code == 429
        assert locked["Retry-After"] == str(15 * 60)
        assert "Too many failed sign-in attempts" in locked.content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("held_hasher")
def test_a_post_without_a_csrf_token_is_refused_by_the_csrf_check_while_another_is_checked(ann):
    with checking_a_sign_in():
        client = Client(enforce_csrf_checks=True, REMOTE_ADDR="10.0.11.1")
        forged = client.post(LOGIN, {"username": "ann", "password": PASSWORD})
        assert forged.status_code == 403
        assert "_auth_user_id" not in client.session
